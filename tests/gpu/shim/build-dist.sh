#!/usr/bin/env bash
# On the development machine: builds what tests/gpu/shim/run.sh needs on the GPU machine
# (which has no Rust toolchain or clang) into DIST (default target/gpu-dist): release
# `gpubpf` and `libgpubpf.so`, stripped, and the policy objects.
set -euo pipefail
cd "$(dirname "$0")/../../.."
DIST=${1:-target/gpu-dist}
cargo build --release --locked -p gpubpf-loader-cli --bin gpubpf
cargo build --release --locked -p gpubpf-shim
mkdir -p "$DIST"
cp target/release/gpubpf target/release/libgpubpf.so "$DIST/"
strip "$DIST/gpubpf" "$DIST/libgpubpf.so"
for p in quota meminfo trace kernel_guard; do
	"$DIST/gpubpf" build "policies/$p.bpf.c" -o "$DIST/$p.o" >/dev/null
done
# The shim benchmarks' launch policies (tests/gpu/workloads overhead runs): counting, and an
# entry program that does nothing (what running any policy costs), and an entry and an exit
# program that do nothing (benches/cold_cache/ladder.sh's rung for a policy of both phases).
for p in count_launch pass_launch pass_pair; do
	"$DIST/gpubpf" build "tests/shim/$p.bpf.c" -o "$DIST/$p.o" >/dev/null
done
ls -l "$DIST"
