#!/usr/bin/env bash
# Two shim builds side by side on the training-step goal (issue #13 point 5): runs
# step_toggle.py (one process, quota + trace loaded and unloaded between blocks) under A
# and B alternately, REPS times each, so that both meet the same machine state. A and B are
# DISTs (tests/gpu/shim/build-dist.sh; each with its own quota.o and trace.o), each run on a
# fresh registry of its own. Prints each toggle's line prefixed with its DIST, then one `AB`
# line per side with the median of its runs' paired figures.
#   tests/gpu/workloads/step_ab.sh A B [REPS=2] [BLOCKS=24] [STEPS=300]
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
A=$(realpath "$1") B=$(realpath "$2")
REPS=${3:-2} BLOCKS=${4:-24} STEPS=${5:-300}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
LOG=$WORK/log
for r in $(seq "$REPS"); do
	for side in "$A" "$B"; do
		home=$(mktemp -d "$WORK/reg.XXXX")
		# The registry exists before the process starts (its shim watches it from the
		# first call).
		GPUBPF_HOME=$home "$side/gpubpf" load "$side/trace.o" --name scratch >/dev/null 2>&1 &&
			GPUBPF_HOME=$home "$side/gpubpf" prog unload scratch >/dev/null 2>&1
		line=$(GPUBPF_HOME=$home LD_PRELOAD="$side/libgpubpf.so" timeout 200 \
			python3 "$HERE/step_toggle.py" "$side" "$BLOCKS" "$STEPS" 2>&1 | grep '^TOGGLE')
		echo "$(basename "$side") rep=$r ${line:-TOGGLE missing}" | tee -a "$LOG"
	done
done
PYTHONPATH=$HERE python3 -c 'import sys; from common import ab_summary; ab_summary(*sys.argv[1:4], "ms")' \
	"$LOG" "$(basename "$A")" "$(basename "$B")"
