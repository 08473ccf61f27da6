#!/usr/bin/env bash
# Where a policed launch's time goes on the real driver (issue #13 point 5): launch_bench
# runs under the shim with the launch-counting policy loaded, and `gpubpf ps --stats`
# collects per-program run counts and run time for a window in the middle of the run. The
# program's own mean run time, set against the wall-clock difference per launch that
# launch_toggle.sh measures, says how much of a policed launch is the program and how much
# the shim around it (entry path, ctx, statistics) and the caches the driver evicts.
# Prints the bench line and `STATS runs=… run_ns_mean=… calls=…`.
#   tests/gpu/workloads/launch_stats.sh DIST LAUNCH_BENCH [N=200000] [ROUNDS=8]
set -u
DIST=$(realpath "$1")
BENCH=$2
N=${3:-200000}
ROUNDS=${4:-8}
G="$DIST/gpubpf"
WORK=$(mktemp -d)
export GPUBPF_HOME="$WORK/registry"
"$G" load "$DIST/count_launch.o" --name count >/dev/null || exit 1
LD_PRELOAD="$DIST/libgpubpf.so" "$BENCH" "$N" "$ROUNDS" 20000 >"$WORK/bench.txt" 2>&1 &
pid=$!
sleep 2
"$G" -j ps --stats=2s >"$WORK/ps.json" 2>"$WORK/ps.err"
wait $pid
cat "$WORK/bench.txt"
python3 - "$WORK/ps.json" "$pid" <<'PY'
import json, sys
procs = json.load(open(sys.argv[1]))
p = next((p for p in procs if p["pid"] == int(sys.argv[2])), None)
if p is None:
    print("STATS error: the bench process is not in gpubpf ps"); sys.exit(1)
for prog in p["programs"]:
    runs, ns = prog["run_cnt"], prog["run_time_ns"]
    mean = ns / runs if runs else 0.0
    print(f"STATS program={prog['object']}/{prog['name']} point={prog['attach_point']} "
          f"runs={runs} run_ns_mean={mean:.1f} faults={prog['faults']} "
          f"(runs counted while `ps --stats` collected, 2 s)")
for pt in p["attach_points"]:
    if pt["calls"]:
        print(f"STATS point={pt['attach_point']} calls={pt['calls']} denied={pt['denied']}")
PY
