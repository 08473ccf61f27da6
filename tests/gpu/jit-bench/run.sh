#!/bin/sh
# Runs the JIT benchmark binary (benches/jit.rs) on a quiet machine, pinned to one core.
# The GPU machine has no Rust toolchain: build and strip the binary on the development
# machine first (tests/gpu/jit-bench/README.md), then run this there with the binary's path.
# Prints the CPU, then criterion's output; writes the raw output to $OUT/jit-bench.txt
# when OUT is set.
set -eu
bin=${1:-target/bench-bin/jit}
core=${CORE:-3}
out=${OUT:-.}
{
	date -u '+%Y-%m-%dT%H:%MZ'
	grep -m1 'model name' /proc/cpuinfo
	echo "cores: $(nproc); pinned to core $core; load: $(cut -d' ' -f1-3 /proc/loadavg)"
	taskset -c "$core" "$bin" --bench --warm-up-time 1 --measurement-time "${SECS:-3}" \
		--noplot 2>&1
} | tee "$out/jit-bench.txt"
