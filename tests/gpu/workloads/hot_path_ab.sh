#!/usr/bin/env bash
# Two shim builds side by side on what a change of the hot path is meant to move, in one
# device call so that both meet the same machine: A and B are DISTs
# (tests/gpu/shim/build-dist.sh), alternated ROUNDS times on
#   - the launch goal on the real driver: launch_interleave.sh DIST 1 PAIRS (no shim,
#     nothing attached, count_launch; its GOAL lines);
#   - one cold launch on the mock driver, timed on this host's CPU without the GPU's noise:
#     benches/cold_cache/time.sh with count_launch.o (COLDTIME line);
#   - the quota pair on the mock driver, warm: benches/instructions/time_alloc.sh
#     (ALLOCTIME line).
# Every line is prefixed with its DIST's name; read the figures pairwise (A then B in each
# round), this machine drifts between rounds.
#   tests/gpu/workloads/hot_path_ab.sh A B [ROUNDS=2] [PAIRS=500]
set -euo pipefail
cd "$(dirname "$0")/../../.."
A=${1:?usage: hot_path_ab.sh A B [ROUNDS] [PAIRS]}
B=${2:?usage: hot_path_ab.sh A B [ROUNDS] [PAIRS]}
ROUNDS=${3:-2}
PAIRS=${4:-500}
for r in $(seq "$ROUNDS"); do
	for d in "$A" "$B"; do
		name=$(basename "$d")
		tests/gpu/workloads/launch_interleave.sh "$d" 1 "$PAIRS" 2>&1 | grep -E '^GOAL' | sed "s|^|$name round=$r |"
		benches/cold_cache/time.sh "$d/count_launch.o" 100000 5 "$d" 2>&1 | grep -E '^COLDTIME' | sed "s|^|$name round=$r |"
		benches/instructions/time_alloc.sh 5 200 "$d" 2>&1 | grep -E '^ALLOCTIME' | sed "s|^|$name round=$r |"
	done
done
