#!/usr/bin/env bash
# Hardware counters per empty-kernel launch (issue #13 point 5, the launch goal): where a
# policed launch's extra ~130 ns go. Runs launch_bench (ROUNDS x N launches) under
# `perf stat` in three processes — no shim, shim with nothing attached, shim with
# count_launch.o — and prints one `PERF` line per process with each counter divided by the
# launches made. Counters are per process (all threads, the driver's included); compare the
# differences, not the absolute values.
#   tests/gpu/workloads/launch_perf.sh DIST LAUNCH_BENCH [N=200000] [ROUNDS=3]
set -u
DIST=$(realpath "$1")
BENCH=$2
N=${3:-200000}
ROUNDS=${4:-3}
G="$DIST/gpubpf"
if ! command -v perf >/dev/null; then
	echo "SKIP launch-perf: perf is not installed"
	exit 0
fi
WORK=$(mktemp -d)
export GPUBPF_HOME="$WORK/registry"
EVENTS=cycles,instructions,cache-references,cache-misses,L1-dcache-load-misses,L1-icache-load-misses,dTLB-load-misses,iTLB-load-misses,branch-misses
run() { # NAME PRELOAD
	local out="$WORK/$1.perf"
	if [ -n "$2" ]; then
		LD_PRELOAD="$2" perf stat -x, -e "$EVENTS" -o "$out" "$BENCH" "$N" "$ROUNDS" 20000 >"$WORK/$1.txt" 2>&1
	else
		perf stat -x, -e "$EVENTS" -o "$out" "$BENCH" "$N" "$ROUNDS" 20000 >"$WORK/$1.txt" 2>&1
	fi
	python3 - "$1" "$out" "$WORK/$1.txt" <<'PY'
import re, sys
name, perf, bench = sys.argv[1:4]
text = open(bench).read()
m = re.search(r"launches=(\d+)", text)
t = re.search(r"median=([0-9.]+)", text)
if not m:
    print(f"PERF {name}: no launch count in {text.strip()[:200]!r}"); sys.exit(0)
n = int(m.group(1))
parts = []
for line in open(perf):
    f = line.strip().split(",")
    if len(f) < 3 or line.startswith("#"):
        continue
    try:
        v = float(f[0])
    except ValueError:
        parts.append(f"{f[2]}=n/a"); continue
    parts.append(f"{f[2]}={v / n:.1f}")
print(f"PERF {name}: launch_ns={t.group(1) if t else '?'} per launch: " + " ".join(parts))
PY
}
run none ""
run shim "$DIST/libgpubpf.so"
"$G" load "$DIST/count_launch.o" --name count >/dev/null
run count "$DIST/libgpubpf.so"
rm -rf "$WORK"
