#!/usr/bin/env bash
# policies/quota.bpf.c and policies/meminfo.bpf.c on the real driver, on the GPU machine.
# Takes the artefacts of tests/gpu/shim/build-dist.sh (DIST: gpubpf, libgpubpf.so, quota.o,
# meminfo.o). Builds tests/gpu/quota/families.cu with nvcc and prints one
# `PASS|FAIL name: detail` line per check, then the raw outputs.
# Usage: tests/gpu/quota/run.sh [DIST] (default target/gpu-dist).
set -u
DIST=$(realpath "${1:-target/gpu-dist}")
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
export GPUBPF_HOME="$WORK/registry"
G="$DIST/gpubpf"
SHIM="$DIST/libgpubpf.so"
MIB=$((1 << 20))
pass=0
fail=0
result() { # name ok detail
	if [ "$2" = 1 ]; then echo "PASS $1: $3"; pass=$((pass + 1)); else echo "FAIL $1: $3"; fail=$((fail + 1)); fi
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc --version | tail -1
nvcc -O2 -arch=sm_90 -o "$WORK/app" "$HERE/families.cu" -lcuda || { echo "FAIL build: nvcc"; exit 1; }

# 1. Every family under a 224 MiB quota: three 64 MiB allocations, the fourth refused with
#    cudaErrorMemoryAllocation (2); after freeing them all one more succeeds.
"$WORK/app" families 64 6 >"$WORK/families-base.txt" 2>&1
"$G" load "$DIST/quota.o" --name quota --set limit_bytes=224MiB --set log_denials=0 >/dev/null
LD_PRELOAD="$SHIM" "$WORK/app" families 64 6 >"$WORK/families.txt" 2>"$WORK/families.err"
for f in malloc pitch managed async pool create array array3d mipmap; do
	line=$(grep "^$f " "$WORK/families.txt")
	ok=0; [ "$line" = "$f ok=3 first_error=2 (cudaErrorMemoryAllocation) after_free=0" ] && ok=1
	result "family-$f" $ok "$line"
done
"$G" maps dump proc_usage >"$WORK/proc_usage.txt" 2>&1
"$G" maps dump quota_allocs >>"$WORK/proc_usage.txt" 2>&1
# Field by field: the order of the printed fields is the struct's declaration order.
ok=1; for kv in '"bytes":0' '"allocs":36' '"frees":36' '"denied":9'; do
	grep -q "$kv" "$WORK/proc_usage.txt" || ok=0
done
result families-usage-credited $ok "$(head -1 "$WORK/proc_usage.txt")"
"$G" prog unload quota >/dev/null

# 2. meminfo with a 1 GiB quota: cudaMemGetInfo and cuDeviceTotalMem report it.
"$G" load "$DIST/meminfo.o" --name meminfo >/dev/null
"$G" load "$DIST/quota.o" --name quota --set limit_bytes=1GiB --set log_denials=0 >/dev/null
LD_PRELOAD="$SHIM" "$WORK/app" meminfo 100 >"$WORK/meminfo.txt" 2>"$WORK/meminfo.err"
want="getinfo free=$((1024 * MIB)) total=$((1024 * MIB))
malloc 0
getinfo free=$((924 * MIB)) total=$((1024 * MIB))
totalmem 0 bytes=$((1024 * MIB))
getinfo free=$((1024 * MIB)) total=$((1024 * MIB))"
ok=0; [ "$(cat "$WORK/meminfo.txt")" = "$want" ] && ok=1
result meminfo-reports-quota $ok "$(tr '\n' ' ' <"$WORK/meminfo.txt")"

# 3. PyTorch with both, with and without expandable segments (cuMemCreate).
if python3 -c "import torch" 2>/dev/null; then
	for conf in default expandable; do
		env=(); [ $conf = expandable ] && env=(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
		env "${env[@]}" GPUBPF="$G" LIMIT=$((1024 * MIB)) LD_PRELOAD="$SHIM" \
			python3 "$HERE/torch_meminfo.py" >"$WORK/torch-$conf.txt" 2>"$WORK/torch-$conf.err"
		t="$WORK/torch-$conf.txt"
		ok=0; grep -q "^start_total=$((1024 * MIB)) start_free=$((1024 * MIB)) " "$t" && ok=1
		result "torch-$conf-mem-get-info-start" $ok "$(grep '^start' "$t")"
		l=$(grep '^after_256mib' "$t")
		ok=0; [[ "$l" =~ total=$((1024 * MIB))\ free=([0-9]+)\ usage=([0-9]+)\ expect_free=([0-9]+) ]] &&
			[ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[3]}" ] && [ "${BASH_REMATCH[2]}" -ge $((256 * MIB)) ] && ok=1
		result "torch-$conf-mem-get-info-quota-minus-usage" $ok "$l"
		ok=0; grep -q '^oom=OutOfMemoryError' "$t" && ok=1
		result "torch-$conf-oom-at-quota" $ok "$(grep '^oom=' "$t")"
		ok=0; grep -q "^after_oom_sum=$((64 * MIB))" "$t" && ok=1
		result "torch-$conf-works-after-oom" $ok "$(grep '^after_oom' "$t")"
		if [ $conf = expandable ]; then
			ok=0; grep -q '^live_kinds={"2":' "$t" && ok=1
			result torch-expandable-charged-through-cuMemCreate $ok "$(grep '^live_kinds' "$t")"
		fi
	done
fi

echo "== $pass passed, $fail failed"
for f in families-base.txt families.txt families.err proc_usage.txt meminfo.txt meminfo.err torch-default.txt torch-default.err torch-expandable.txt torch-expandable.err; do
	echo "--- $f"; head -c 4000 "$WORK/$f" 2>/dev/null; echo
done
[ -n "${OUT:-}" ] && cp -r "$WORK"/*.txt "$WORK"/*.err "$OUT/" 2>/dev/null
exit $((fail != 0))
