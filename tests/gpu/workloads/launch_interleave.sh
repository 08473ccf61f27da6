#!/usr/bin/env bash
# The launch goal (issue #13 point 5) with launch_interleave.cu: in one process, batches
# through the driver's own cuLaunchKernel and through the shim's alternate. Runs it
# without the shim (both sides the driver: the instrument's zero), under the shim with
# nothing attached, and under the shim with count_launch.o loaded, REPS times in turn;
# prints each INTERLEAVE line and one GOAL line per configuration (median of its runs).
# INTERLEAVE_POLICIES="count_launch pass_launch" measures more objects of DIST the same way
# (pass_launch: an entry program that does nothing — the shim's policed path alone;
# trace+reader: trace.o while `gpubpf maps consume count.events -f` drains its ring, so that
# its launches write their events, as when someone reads them; trace alone fills its ring
# within ~2 200 launches and then writes none. Its line ends with the events written and
# dropped, from `gpubpf maps show`).
# LI_WORK_KB=N writes N KB of the program's own data between launches (launch_interleave.cu:
# the policy's indirect cost, e.g. 0 against 256 with count_launch).
# The registry goes under LI_REG_ROOT (default /dev/shm, gpubpf's default place: tmpfs).
#   tests/gpu/workloads/launch_interleave.sh DIST [REPS=2] [PAIRS=1000] [B=2000]
set -u
DIST=$(realpath "$1")
REPS=${2:-2} PAIRS=${3:-1000} B=${4:-2000}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
nvcc -O2 -arch=sm_90 -o "$WORK/li" "$HERE/launch_interleave.cu" -lcuda || exit 1
REG_ROOT=${LI_REG_ROOT:-/dev/shm}
[ -d "$REG_ROOT" ] || REG_ROOT=$WORK
GPUBPF_HOME=$(mktemp -d -p "$REG_ROOT")
export GPUBPF_HOME
trap 'rm -rf "$GPUBPF_HOME"' EXIT
echo "registry $GPUBPF_HOME: $(stat -f -c %T "$GPUBPF_HOME")"
LOG="$WORK/log"
for r in $(seq "$REPS"); do
	echo "no-shim rep=$r $(timeout 120 "$WORK/li" "$PAIRS" "$B" "${LI_WORK_KB:-0}")" | tee -a "$LOG"
	"$DIST/gpubpf" prog unload count >/dev/null 2>&1
	echo "shim-nothing rep=$r $(LD_PRELOAD="$DIST/libgpubpf.so" timeout 120 "$WORK/li" "$PAIRS" "$B" "${LI_WORK_KB:-0}")" | tee -a "$LOG"
	for p in ${INTERLEAVE_POLICIES:-count_launch}; do
		"$DIST/gpubpf" prog unload count >/dev/null 2>&1
		"$DIST/gpubpf" load "$DIST/${p%+reader}.o" --name count >/dev/null || exit 1
		reader= ring=
		if [ "$p" != "${p%+reader}" ]; then
			"$DIST/gpubpf" maps consume count.events -f >/dev/null 2>&1 &
			reader=$!
		fi
		line=$(LD_PRELOAD="$DIST/libgpubpf.so" timeout 120 "$WORK/li" "$PAIRS" "$B" "${LI_WORK_KB:-0}")
		if [ -n "$reader" ]; then
			kill "$reader"
			wait "$reader" 2>/dev/null
			ring=" ring: $("$DIST/gpubpf" maps show count.events 2>&1 | tr -s ' \n' ' ')"
		fi
		echo "shim-$p rep=$r $line$ring" | tee -a "$LOG"
	done
done
python3 - "$LOG" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) rep=\d+ INTERLEAVE hooked_ns=(\S+) direct_ns=(\S+) added=(\S+)ns", line)
    if m:
        runs.setdefault(m[1], []).append((float(m[3]), float(m[4])))
for name, rs in runs.items():
    added = statistics.median(a for _, a in rs)
    base = statistics.median(d for d, _ in rs)
    print(f"GOAL {name}: added {added:+.1f} ns per launch ({100 * added / base:+.2f}% of {base:.0f} ns; "
          f"runs {', '.join(f'{a:+.1f}' for _, a in rs)})")
PY
