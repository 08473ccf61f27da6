#!/usr/bin/env bash
# The training-step overhead of quota + trace (step_toggle.py: one process, blocks with and
# without the policies alternating) over MLPs of growing size, from the check's own model
# (batch 256, width 1024: the step is bound by its ~480 launches' CPU cost, so every
# nanosecond a policed launch adds shows) to models whose GPU work bounds the step (the
# launches are queued ahead of the GPU and their CPU cost hides behind it). Prints each
# TOGGLE line and one `SIZE batch=B width=W step_ms=… added=…%` line per model.
#   tests/gpu/workloads/step_sizes.sh DIST [BLOCKS=16] ["B:W:STEPS …"]
set -u
DIST=$(realpath "$1")
BLOCKS=${2:-16}
SIZES=${3:-"256:1024:300 1024:2048:200 4096:2048:100 8192:4096:30"}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
for s in $SIZES; do
	IFS=: read -r b w n <<<"$s"
	# A registry per model: quota's pinned counters outlive the processes that charged them.
	# It exists before the process starts (the shim then watches it for the toggles).
	export GPUBPF_HOME="$WORK/registry.$b.$w"
	"$DIST/gpubpf" load "$DIST/trace.o" --name scratch >/dev/null &&
		"$DIST/gpubpf" prog unload scratch >/dev/null || exit 1
	STEP_BATCH=$b STEP_WIDTH=$w LD_PRELOAD="$DIST/libgpubpf.so" \
		timeout 300 python3 "$HERE/step_toggle.py" "$DIST" "$BLOCKS" "$n" >"$WORK/t.$b.$w" 2>&1
	line=$(grep '^TOGGLE' "$WORK/t.$b.$w")
	if [ -z "$line" ]; then
		echo "SIZE batch=$b width=$w FAILED:"
		tail -5 "$WORK/t.$b.$w"
		continue
	fi
	echo "$line"
	echo "$line" | python3 -c '
import re, sys
line = sys.stdin.read()
m = re.search(r"none_ms=([0-9.]+).*paired=([-+0-9.]+)ms \(([-+0-9.]+)%[^)]*\)", line)
print(f"SIZE batch='"$b"' width='"$w"' step_ms={float(m.group(1)):.3f} added={m.group(2)} ms ({m.group(3)}%)")'
done
rm -rf "$WORK"
