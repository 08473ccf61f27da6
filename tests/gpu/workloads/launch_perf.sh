#!/usr/bin/env bash
# Hardware counters per empty-kernel launch (issue #13 point 5, the launch goal): where a
# policed launch's extra ~130 ns go. Runs launch_bench (ROUNDS x N launches) under
# pcount.c (user-space counters of the process and its threads) in three processes — no
# shim, shim with nothing attached, shim with count_launch.o — and prints one `PERF` line
# per process with each counter divided by the launches made. Counters are per process
# (all threads, the driver's included, warm-up and initialisation too): compare the
# differences, not the absolute values. Counters the CPU or hypervisor lacks read n/a.
#   tests/gpu/workloads/launch_perf.sh DIST LAUNCH_BENCH [N=200000] [ROUNDS=3]
set -u
DIST=$(realpath "$1")
BENCH=$2
N=${3:-200000}
ROUNDS=${4:-3}
G="$DIST/gpubpf"
WORK=$(mktemp -d)
export GPUBPF_HOME="$WORK/registry"
# User-space counts of the process and its threads: pcount.c (perf_event_open; the GPU
# machine has no `perf`).
if ! gcc -O2 -o "$WORK/pcount" "$(dirname "$0")/pcount.c" 2>"$WORK/pcount.err"; then
	echo "SKIP launch-perf: cannot build pcount: $(head -c 300 "$WORK/pcount.err")"
	exit 0
fi
run() { # NAME PRELOAD
	local out="$WORK/$1.counts"
	if [ -n "$2" ]; then
		LD_PRELOAD="$2" "$WORK/pcount" "$out" "$BENCH" "$N" "$ROUNDS" 20000 >"$WORK/$1.txt" 2>&1
	else
		"$WORK/pcount" "$out" "$BENCH" "$N" "$ROUNDS" 20000 >"$WORK/$1.txt" 2>&1
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
    f = line.split()
    if len(f) != 2:
        continue
    parts.append(f"{f[0]}=n/a" if f[1] == "n/a" else f"{f[0]}={int(f[1]) / n:.1f}")
print(f"PERF {name}: launch_ns={t.group(1) if t else '?'} per launch: " + " ".join(parts))
PY
}
run none ""
run shim "$DIST/libgpubpf.so"
"$G" load "$DIST/count_launch.o" --name count >/dev/null
run count "$DIST/libgpubpf.so"
rm -rf "$WORK"
