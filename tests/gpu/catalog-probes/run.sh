#!/bin/sh
# Runs the alias probe on a machine with an NVIDIA GPU and driver. Expects the binaries and
# libraries built by build.sh in $1 (default .probe); writes <dir>/alias_probe_{static,shared}.tsv
# or into $OUT when set.
set -u
dir=${1:-.probe}
out=${OUT:-$dir}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
for mode in static shared; do
	echo "== $mode cudart"
	LD_LIBRARY_PATH="$dir" "$dir/probe_$mode" "$out/alias_probe_$mode.tsv"
	echo "exit $?"
done
