#!/usr/bin/env bash
# Diagnostic for the training-step overhead (not a pass/fail check): (1) the driver calls
# one PyTorch training step makes, counted by the shim with a counting program on every
# attach point; (2) the step time without the shim and with the shim but no registry (the
# shim inert: every wrapper is one load and the real call), interleaved ROUNDS times.
#   tests/gpu/workloads/step_diag.sh [DIST] [ROUNDS=4]
set -u
DIST=$(realpath "${1:-target/gpu-dist}")
ROUNDS=${2:-4}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
G="$DIST/gpubpf"
SHIM="$DIST/libgpubpf.so"
export GPUBPF="$G"
export GPUBPF_HOME="$WORK/all"
points=$("$G" -j attach-points | python3 -c 'import json,sys; print(",".join(p["name"] for p in json.load(sys.stdin)))')
timeout 120 "$G" load "$DIST/count_launch.o" --name all --attach "$points" >"$WORK/load.txt" 2>&1 ||
	{ echo "load on every attach point failed:"; tail -5 "$WORK/load.txt"; }
LD_PRELOAD="$SHIM" timeout 120 python3 "$HERE/step_calls.py" 100 2>&1 | tail -27
for r in $(seq "$ROUNDS"); do
	a=$(timeout 90 python3 "$HERE/torch_step_bench.py" 300 1 30 2>&1 | grep -o 'median=[0-9.]*')
	b=$(GPUBPF_HOME=$WORK/none LD_PRELOAD="$SHIM" timeout 90 python3 "$HERE/torch_step_bench.py" 300 1 30 2>&1 | grep -o 'median=[0-9.]*')
	echo "round $r: no shim $a ms/step; shim without registry $b ms/step"
done
