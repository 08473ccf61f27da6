#!/usr/bin/env bash
# Launch overhead of a policy inside ONE process (issue #13 point 5: same process,
# interleaved): launch_bench runs ROUNDS loops of N empty-kernel launches under the shim;
# between loops this script loads count_launch.o (`--wait`: applied before the next loop)
# or unloads it, so even loops run with nothing attached and odd loops with the policy.
# Prints the per-loop figures and `TOGGLE policy_ns=… none_ns=… added=…%`.
#   tests/gpu/workloads/launch_toggle.sh DIST LAUNCH_BENCH [ROUNDS=12] [N=100000]
set -u
DIST=$(realpath "$1")
BENCH=$2
ROUNDS=${3:-12}
N=${4:-100000}
G="$DIST/gpubpf"
WORK=$(mktemp -d)
export GPUBPF_HOME="$WORK/registry"
"$G" load "$DIST/count_launch.o" --name scratch >/dev/null && "$G" prog unload scratch >/dev/null
LD_PRELOAD="$DIST/libgpubpf.so" "$BENCH" "$N" "$ROUNDS" 20000 "$WORK" >"$WORK/bench.txt" 2>&1 &
pid=$!
for r in $(seq 0 $((ROUNDS - 1))); do
	for _ in $(seq 30000); do
		[ -e "$WORK/done-$r" ] && break
		kill -0 $pid 2>/dev/null || break
		sleep 0.001
	done
	if [ $((r % 2)) = 0 ]; then
		"$G" load "$DIST/count_launch.o" --name count --wait=30s >/dev/null
	else
		"$G" prog unload count --wait=30s >/dev/null
	fi
	touch "$WORK/go-$r"
done
wait $pid
cat "$WORK/bench.txt"
python3 - "$WORK/bench.txt" <<'PY'
import re, statistics, sys
line = open(sys.argv[1]).read()
m = re.search(r"rounds=([0-9.,]+)", line)
if not m:
    print("TOGGLE error: no rounds in", line.strip()); sys.exit(1)
v = [float(x) for x in m.group(1).split(",")]
none, pol = v[0::2], v[1::2]
a, b = statistics.median(none), statistics.median(pol)
print(f"TOGGLE policy_ns={b:.1f} none_ns={a:.1f} added={100 * (b / a - 1):+.2f}% "
      f"(one process, {len(v)} loops alternating; nothing attached {','.join(f'{x:.0f}' for x in none)}; "
      f"count_launch {','.join(f'{x:.0f}' for x in pol)})")
PY
