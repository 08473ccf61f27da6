#!/usr/bin/env bash
# Launch overhead of a policy inside ONE process (issue #13 point 5: same process,
# interleaved): launch_bench runs ROUNDS loops of N empty-kernel launches under the shim;
# between loops this script loads count_launch.o (`--wait`: applied before the next loop)
# or unloads it, so even loops run with nothing attached and odd loops with the policy.
# Prints the per-loop figures and `TOGGLE policy_ns=… none_ns=… added=…% paired=…ns (…%)`:
# `added` compares the medians of the two kinds of loop; `paired` is the median over the
# policy's loops of each one's difference from the mean of its two neighbours (nothing
# attached), which cancels the machine's slow drifts (launches drift by ±10 % over
# seconds there) and is the figure to read. TOGGLE_POLICY
# names another object of DIST to toggle instead (e.g. pass_launch, an entry program that
# does nothing).
#   tests/gpu/workloads/launch_toggle.sh DIST LAUNCH_BENCH [ROUNDS=12] [N=100000]
set -u
DIST=$(realpath "$1")
BENCH=$2
ROUNDS=${3:-12}
N=${4:-100000}
G="$DIST/gpubpf"
POLICY=${TOGGLE_POLICY:-count_launch}
WORK=$(mktemp -d)
export GPUBPF_HOME="$WORK/registry"
"$G" load "$DIST/$POLICY.o" --name scratch >/dev/null && "$G" prog unload scratch >/dev/null
LD_PRELOAD="$DIST/libgpubpf.so" "$BENCH" "$N" "$ROUNDS" 20000 "$WORK" >"$WORK/bench.txt" 2>&1 &
pid=$!
for r in $(seq 0 $((ROUNDS - 1))); do
	for _ in $(seq 30000); do
		[ -e "$WORK/done-$r" ] && break
		kill -0 $pid 2>/dev/null || break
		sleep 0.001
	done
	if [ $((r % 2)) = 0 ]; then
		"$G" load "$DIST/$POLICY.o" --name count --wait=30s >/dev/null
	else
		"$G" prog unload count --wait=30s >/dev/null
	fi
	touch "$WORK/go-$r"
done
wait $pid
cat "$WORK/bench.txt"
python3 - "$WORK/bench.txt" "$POLICY" "$(dirname "$(realpath "$0")")" <<'PY'
import re, statistics, sys
sys.path.insert(0, sys.argv[3])
from common import paired
line = open(sys.argv[1]).read()
m = re.search(r"rounds=([0-9.,]+)", line)
if not m:
    print("TOGGLE error: no rounds in", line.strip()); sys.exit(1)
v = [float(x) for x in m.group(1).split(",")]
none, pol = v[0::2], v[1::2]
a, b = statistics.median(none), statistics.median(pol)
d = paired(v)
print(f"TOGGLE policy_ns={b:.1f} none_ns={a:.1f} added={100 * (b / a - 1):+.2f}% "
      f"paired={d:+.1f}ns ({100 * d / a:+.2f}%) "
      f"(one process, {len(v)} loops alternating; nothing attached {','.join(f'{x:.0f}' for x in none)}; "
      f"{sys.argv[2]} {','.join(f'{x:.0f}' for x in pol)})")
PY
