#!/usr/bin/env bash
# Instructions per policed call on the mock driver, counted with callgrind (deterministic:
# this VM's timings move by tens of percent between runs, instruction counts do not). A loop
# application (benches/instructions/loop.c) makes 16 384 cuMemAlloc_v2 of 4 KiB, then the
# frees, then 4 096 cuLaunchKernel; callgrind counts each loop's function alone
# (--toggle-collect), after a sleep that lets the shim's watcher JIT-compile the programs.
# Prints, per loop, instructions per call without the shim and under it with the policy:
#   cuMemAlloc and cuMemFree with policies/quota.bpf.c (limit 1 TiB, no refusal logging),
#   cuLaunchKernel with tests/shim/count_launch.bpf.c;
#   an allocation + launch pair (mixed_loop) with both loaded: each call changes the
#   thread's last attach point, which the one-API loops never do.
#   benches/instructions/run.sh   (needs cc, clang and valgrind)
# SHIM_SO (default target/release/libgpubpf.so) counts another build of the shim.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }
cargo build --release --locked -q -p gpubpf-shim -p gpubpf-loader-cli
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
G=$ROOT/target/release/gpubpf
. benches/cold_cache/probe.sh
build_mock "$W"
build_loop "$W"
"$G" build policies/quota.bpf.c -o "$W/quota.o" >/dev/null
"$G" build tests/shim/count_launch.bpf.c -o "$W/count.o" >/dev/null
GPUBPF_HOME="$W/quota" "$G" load "$W/quota.o" --set limit_bytes=1TiB --set log_denials=0 >/dev/null
GPUBPF_HOME="$W/count" "$G" load "$W/count.o" >/dev/null
GPUBPF_HOME="$W/mixed" "$G" load "$W/quota.o" --set limit_bytes=1TiB --set log_denials=0 >/dev/null
GPUBPF_HOME="$W/mixed" "$G" load "$W/count.o" >/dev/null
export GPUBPF_CUDA_LIBRARY="$W/libcuda.so.1"
count() { # HOME FUNCTION CALLS [PRELOAD]: instructions per call of FUNCTION's loop
	GPUBPF_HOME=$1 LD_PRELOAD=${4:-} valgrind --tool=callgrind --toggle-collect="$2" \
		--callgrind-out-file="$W/cg.out" "$W/loop" 3 >/dev/null 2>"$W/vg.err" ||
		{ cat "$W/vg.err" >&2; exit 1; }
	grep -o 'refs: *[0-9,]*' "$W/vg.err" | tr -d ', ' | cut -d: -f2 | awk -v n="$3" '{printf "%.1f", $1 / n}'
}
SHIM=$(realpath "${SHIM_SO:-$ROOT/target/release/libgpubpf.so}")
for spec in "quota alloc_loop 16384 cuMemAlloc quota.o" "quota free_loop 16384 cuMemFree quota.o" \
	"count launch_loop 4096 cuLaunchKernel count_launch.o" \
	"mixed mixed_loop 4096 cuMemAlloc+cuLaunchKernel quota.o+count_launch.o"; do
	read -r home fn n name policy <<<"$spec"
	direct=$(count "$W/$home" "$fn" "$n")
	policed=$(count "$W/$home" "$fn" "$n" "$SHIM")
	echo "INSTR $name: direct $direct, under the shim with $policy $policed instructions per call"
done
