#!/usr/bin/env bash
# An experiment kept for repetition, not the shipped build: libgpubpf.so built with
# profile-guided optimisation (rustc's -Cprofile-generate / -Cprofile-use). An instrumented
# shim runs a training workload on the mock driver (benches/instructions/loop.c:
# allocations, frees and launches under quota + count_launch and under quota + trace),
# then the release shim is built again with that profile, fresh from the source being
# built. Measured on 2026-12-06 (docs/shim.md, "Profile-guided build"): on the mock it
# cuts a cold launch's code-line misses (`SHIM_SO=target/pgo/libgpubpf.so
# benches/cold_cache/run.sh [POLICY]` against the plain build: count_launch 34 -> 28,
# trace 47.7 -> 34.6) and quota's instructions per allocation (1 757 -> 1 602), but on the
# H100 neither the launch overhead nor the training step moved beyond the machine's noise
# (tests/gpu/workloads/results/2026-12-06-h100-1-pgo-ab-06b3352.txt), so the release
# build does not use it. Needs cc, clang and the toolchain's llvm-profdata
# (`rustup component add llvm-tools`).
#   benches/pgo/build.sh [OUT=target/pgo/libgpubpf.so]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${1:-target/pgo/libgpubpf.so}
sysroot=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
PROFDATA=$sysroot/lib/rustlib/$host/bin/llvm-profdata
if [ ! -x "$PROFDATA" ]; then
	echo "llvm-profdata not found at $PROFDATA: run \`rustup component add llvm-tools\`" >&2
	exit 1
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
# The instrumented and the optimised shim each build in a target directory of their own:
# different RUSTFLAGS would otherwise rebuild target/release's crates every time.
cargo build --release --locked -q -p gpubpf-loader-cli --bin gpubpf
RUSTFLAGS="-Cprofile-generate=$W/build-prof" \
	cargo build --release --locked -q -p gpubpf-shim --target-dir target/pgo-generate
G=$ROOT/target/release/gpubpf
. benches/cold_cache/probe.sh
build_mock "$W"
build_loop "$W"
"$G" build policies/quota.bpf.c -o "$W/quota.o" >/dev/null
"$G" build policies/trace.bpf.c -o "$W/trace.o" >/dev/null
"$G" build tests/shim/count_launch.bpf.c -o "$W/count_launch.o" >/dev/null
export GPUBPF_CUDA_LIBRARY=$W/libcuda.so.1
for second in count_launch trace; do
	home=$W/reg-$second
	GPUBPF_HOME=$home "$G" load "$W/quota.o" --set limit_bytes=1TiB --set log_denials=0 >/dev/null
	GPUBPF_HOME=$home "$G" load "$W/$second.o" >/dev/null
	# The loop sleeps 2 s first, so that the watcher has JIT-compiled the programs.
	GPUBPF_HOME=$home LLVM_PROFILE_FILE="$W/run-$second-%p.profraw" \
		LD_PRELOAD="$ROOT/target/pgo-generate/release/libgpubpf.so" "$W/loop" 2
done
"$PROFDATA" merge -o "$W/shim.profdata" "$W"/run-*.profraw
RUSTFLAGS="-Cprofile-use=$W/shim.profdata" \
	cargo build --release --locked -q -p gpubpf-shim --target-dir target/pgo-use
mkdir -p "$(dirname "$OUT")"
cp target/pgo-use/release/libgpubpf.so "$OUT"
echo "built $OUT (profile-guided)"
