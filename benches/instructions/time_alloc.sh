#!/usr/bin/env bash
# The quota pair timed natively on this machine's CPU, warm (a cross-check of
# `cargo bench --bench shim -- cuMemAlloc/` that runs where there is no Rust toolchain,
# e.g. the GPU machine): benches/instructions/loop.c on the mock driver, ROUNDS rounds of
# 4 096 cuMemAlloc_v2 of 256 bytes each (frees untimed), in processes that alternate REPS times
# between calling the mock directly (no shim) and under the shim with policies/quota.bpf.c
# (limit 1 TiB, no refusal logging), each after the same one-second pause; prints each run
# and the median of the per-pair differences (quota − direct) of the per-call medians.
# The loop is linked with DT_RPATH (build_loop, --disable-new-dtags), read before
# LD_LIBRARY_PATH: on the GPU machine LD_LIBRARY_PATH names the real driver, and with
# DT_RUNPATH the "direct" runs called it (refused without a context, ~815 ns) while the
# shim's runs called the mock; loop.c also stops when its first allocation is refused.
#
#   benches/instructions/time_alloc.sh [REPS=7] [ROUNDS=200] [SHIM_DIR=target/release]
# SHIM_DIR holds `gpubpf`, `libgpubpf.so` and, when it is not target/release, `quota.o`
# (tests/gpu/shim/build-dist.sh's directory).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
REPS=${1:-7}
ROUNDS=${2:-200}
SHIM_DIR=${3:-target/release}
case $SHIM_DIR in /*) ;; *) SHIM_DIR=$ROOT/$SHIM_DIR ;; esac
G=$SHIM_DIR/gpubpf
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
if [ "$SHIM_DIR" = "$ROOT/target/release" ]; then
	cargo build --release --locked -q -p gpubpf-shim -p gpubpf-loader-cli
	"$G" build policies/quota.bpf.c -o "$W/quota.o" >/dev/null
else
	cp "$SHIM_DIR/quota.o" "$W/quota.o"
fi
. benches/cold_cache/probe.sh
build_mock "$W"
build_loop "$W"
export GPUBPF_HOME=$W/reg GPUBPF_CUDA_LIBRARY=$W/libcuda.so.1
"$G" load "$W/quota.o" --set limit_bytes=1TiB --set log_denials=0 >/dev/null
for r in $(seq "$REPS"); do
	echo "direct $("$W/loop" 1 "$ROUNDS")"
	echo "quota  $(LD_PRELOAD="$SHIM_DIR/libgpubpf.so" "$W/loop" 1 "$ROUNDS")"
done | tee "$W/log"
python3 - "$W/log" <<'PY'
import re, statistics, sys
rows = [(l.split()[0], float(re.search(r"median=([0-9.]+)", l).group(1))) for l in open(sys.argv[1])]
direct = [v for k, v in rows if k == "direct"]
quota = [v for k, v in rows if k == "quota"]
d = [q - x for x, q in zip(direct, quota)]
print(f"ALLOCTIME cuMemAlloc: direct {statistics.median(direct):.1f} ns, quota {statistics.median(quota):.1f} ns, "
      f"added {statistics.median(d):+.1f} ns (pairs {', '.join(f'{x:+.1f}' for x in d)})")
PY
