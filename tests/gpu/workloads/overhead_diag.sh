#!/usr/bin/env bash
# Where the per-launch and per-step overhead of issue #13 point 5 goes, in one device call
# (diagnostic, not a pass/fail check; run from the repository root):
#   1. benches/cold_cache/time.sh on this host's CPU: a cold mock launch with count_launch.o
#      and with trace.o (policy vs nothing attached, native TSC timing);
#   2. launch_ab.sh: count_launch.o vs pass_launch.o (an entry program that does nothing),
#      REPS toggles each, on the real driver;
#   3. step_toggle.py with quota + trace (the check), quota alone, trace alone, and trace
#      with emit_events=false (statistics only, no ring-buffer event per call).
#   tests/gpu/workloads/overhead_diag.sh DIST [REPS=3] [BLOCKS=24]
set -u
DIST=$(realpath "$1")
REPS=${2:-3}
BLOCKS=${3:-24}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
echo "overhead_diag $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
nvcc -O2 -arch=sm_90 -o "$WORK/launch_bench" "$HERE/launch_bench.cu" || exit 1
for p in count_launch trace; do
	timeout 150 benches/cold_cache/time.sh "$DIST/$p.o" 50000 5 "$DIST" 2>&1 | tail -2
done
timeout 300 "$HERE/launch_ab.sh" "$DIST:count_launch" "$DIST:pass_launch" "$WORK/launch_bench" "$REPS" 40 100000
step() { # LABEL, then env assignments
	local label=$1
	shift
	echo "step [$label] $(env "$@" GPUBPF_HOME="$WORK/reg-$label" LD_PRELOAD="$DIST/libgpubpf.so" \
		timeout 150 python3 "$HERE/step_toggle.py" "$DIST" "$BLOCKS" 300 2>&1 | grep '^TOGGLE')"
}
step quota+trace STEP_POLICIES="quota trace"
step quota STEP_POLICIES=quota
step trace STEP_POLICIES=trace
step trace-no-events STEP_POLICIES=trace STEP_TRACE_SET=emit_events=false
