#!/usr/bin/env bash
# The README's main job: gpubpf on an unmodified CUDA application, on the mock CUDA driver
# of tests/shim/ (host memory stands in for device memory; no GPU needed).
#
#  1. builds gpubpf, libgpubpf.so (release), the mock driver and the application
#     (tests/shim/train.c, plain driver API linked with -lcuda);
#  2. starts the application under `gpubpf run` with policies/quota.bpf.c at 256 MiB per
#     process: its allocations are refused with CUDA_ERROR_OUT_OF_MEMORY at the limit;
#  3. while it runs, raises the limit to 1 GiB with `gpubpf load --replace … --wait`:
#     the same process gets its next allocations;
#  4. ends with `gpubpf ps` and `gpubpf maps dump proc_usage`.
#
# Installs clang when missing (it builds the policy). GPUBPF_DEMO_BIN=DIR uses the gpubpf
# and libgpubpf.so already in DIR instead of building (the tests do). Everything it creates
# lives in a temporary directory, registry included, removed at the end (GPUBPF_DEMO_KEEP=1
# keeps it). On a machine with a GPU the same commands police a real CUDA program: see
# README.md ("On a GPU").
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
source scripts/ensure-clang.sh

if [ -n "${GPUBPF_DEMO_BIN:-}" ]; then
    bin=$(cd "$GPUBPF_DEMO_BIN" && pwd)
else
    echo "building gpubpf and libgpubpf.so (release)…"
    cargo build --quiet --release -p gpubpf-loader-cli --bin gpubpf
    cargo build --quiet --release -p gpubpf-shim
    bin=$repo/target/release
fi
cc=${CC:-cc}
command -v "$cc" >/dev/null 2>&1 || cc=clang

work=$(mktemp -d "${TMPDIR:-/tmp}/gpubpf-demo.XXXXXX")
# The registry on tmpfs, where gpubpf keeps one by default (maps are shared file mappings).
regs=$work
[ -d /dev/shm ] && regs=$(mktemp -d /dev/shm/gpubpf-demo.XXXXXX)
app_pid=
cleanup() {
    rm -f "$work/go"
    if [ -n "$app_pid" ]; then
        kill "$app_pid" 2>/dev/null || true
        wait "$app_pid" 2>/dev/null || true
    fi
    if [ "${GPUBPF_DEMO_KEEP:-}" = 1 ]; then
        echo "kept $work (registry $regs/registry)"
    else
        rm -rf "$work" "$regs"
    fi
}
trap cleanup EXIT

export GPUBPF_HOME=$regs/registry
export PATH=$bin:$PATH
# The mock driver stands in for libcuda.so.1: the shim loads it from here, and the
# application finds it through its DT_RPATH (--disable-new-dtags: read before an
# LD_LIBRARY_PATH that names a real driver, as on a GPU machine).
export GPUBPF_CUDA_LIBRARY=$work/libcuda.so.1
"$cc" -O2 -shared -fPIC -Wl,-Bsymbolic -Wl,-soname,libcuda.so.1 \
    -o "$work/libcuda.so.1" tests/shim/mock_cuda.c
"$cc" -O2 -o "$work/train" tests/shim/train.c -L"$work" -l:libcuda.so.1 -Wl,--disable-new-dtags,-rpath,"$work"

step() { printf '\n== %s\n' "$*"; }
# Prints a command, runs it, and shows its output with the temporary directory as $DEMO.
show() {
    printf '$ %s\n' "$*" | sed "s#$work/#\$DEMO/#g"
    "$@" 2>&1 | sed -u "s#$work/#\$DEMO/#g"
}

step "1. Build the quota policy (restricted C, clang -target bpf, the SDK headers)"
show gpubpf build policies/quota.bpf.c -o "$work/quota.o"

step "2. Start an unmodified CUDA application under the shim, 256 MiB per process"
echo "   (train: one 64 MiB cuMemAlloc per step, kept; it pauses after step 5)"
show gpubpf run --policy "$work/quota.o" --set limit_bytes=256MiB --set log_denials=0 -- \
    "$work/train" 8 64 5 "$work/paused" "$work/go" "$work/done" &
app_pid=$!
for _ in $(seq 6000); do
    [ -e "$work/paused" ] && break
    kill -0 "$app_pid" 2>/dev/null || { echo "the application exited early" >&2; exit 1; }
    sleep 0.01
done
[ -e "$work/paused" ] || { echo "the application never paused" >&2; exit 1; }

step "3. While it runs: the operator raises the limit to 1 GiB, without a restart"
echo "   (--replace swaps the object atomically and keeps its maps; --wait returns once"
echo "    every process running the shim has applied the change)"
show gpubpf load "$work/quota.o" --replace quota --set limit_bytes=1GiB --set log_denials=0 --wait
touch "$work/go"
for _ in $(seq 6000); do
    [ -e "$work/done" ] && break
    kill -0 "$app_pid" 2>/dev/null || { echo "the application exited early" >&2; exit 1; }
    sleep 0.01
done

step "4. What the shim did in the running process, and the policy's counters"
echo "   (ps: calls seen and refused per hooked function; proc_usage: bytes held per"
echo "    process id, from shared memory, while the application still holds them)"
show gpubpf ps
show gpubpf maps dump proc_usage
rm -f "$work/go"
status=0
wait "$app_pid" || status=$?
app_pid=
step "The application exited with status $status; gpubpf run passes it on."
exit "$status"
