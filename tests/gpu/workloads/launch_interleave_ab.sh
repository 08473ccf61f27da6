#!/usr/bin/env bash
# Two shim builds side by side on the launch goal (issue #13 point 5): runs
# launch_interleave.sh (one process per configuration, the driver's own cuLaunchKernel and
# the shim's alternating by batches) for DIST_A and DIST_B in turn, ROUNDS times each, so
# that both meet the same machine state; INTERLEAVE_POLICIES is passed on (default
# count_launch). Prints every GOAL line prefixed with its side and round, then one `AB`
# line per configuration: each side's median over its rounds.
#   tests/gpu/workloads/launch_interleave_ab.sh DIST_A DIST_B [ROUNDS=3] [PAIRS=400] [B=2000]
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
A=$1 BDIST=$2
ROUNDS=${3:-3} PAIRS=${4:-400} B=${5:-2000}
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
for r in $(seq "$ROUNDS"); do
	for side in A B; do
		dist=$A
		[ "$side" = B ] && dist=$BDIST
		"$HERE/launch_interleave.sh" "$dist" 1 "$PAIRS" "$B" | grep '^GOAL' |
			sed "s/^/$side round=$r /" | tee -a "$LOG"
	done
done
python3 - "$LOG" "$A" "$BDIST" <<'PY'
import re, statistics, sys
log, a, b = sys.argv[1:4]
runs = {}
for line in open(log):
    m = re.match(r"(A|B) round=\d+ GOAL (\S+): added (\S+) ns", line)
    if m:
        runs.setdefault((m[2], m[1]), []).append(float(m[3]))
for name in sorted({n for n, _ in runs}):
    ra, rb = runs.get((name, "A"), []), runs.get((name, "B"), [])
    if ra and rb:
        ma, mb = statistics.median(ra), statistics.median(rb)
        print(f"AB {name}: A {ma:+.1f} ns, B {mb:+.1f} ns, B - A {mb - ma:+.1f} ns "
              f"(A {', '.join(f'{x:+.1f}' for x in ra)}; B {', '.join(f'{x:+.1f}' for x in rb)}; "
              f"A = {a}, B = {b})")
PY
