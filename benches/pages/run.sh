#!/usr/bin/env bash
# The 4 KiB pages a policed launch touches, code and data: each one an iTLB or dTLB entry,
# and in an application whose own work evicts the TLB between two calls (PyTorch between
# its launches), a page walk per page per call. Neither the development VM nor the GPU
# machine exposes hardware counters, so this counts them deterministically: valgrind's
# lackey traces every instruction fetch and data access of app.c's launches on the mock
# driver under the release shim, and the pages of one launch in the steady state (the
# median launch of 20, after the watcher compiled the chain) are named by the mapping they
# lie in (/proc/self/maps at exit).
#   benches/pages/run.sh [POLICY=tests/shim/count_launch.bpf.c]    (needs cc, clang, valgrind)
# PAGES_SET="--set VAR=VALUE…" is passed to the policy's load (e.g. trace's
# emit_events=false); SHIM_SO (default target/release/libgpubpf.so) measures another build.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }
POLICY=${1:-tests/shim/count_launch.bpf.c}
cargo build --release --locked -q -p gpubpf-shim -p gpubpf-loader-cli
W=$(mktemp -d)
trap '[ -n "${PAGES_KEEP:-}" ] || rm -rf "$W"' EXIT
echo "work dir $W" >&2
G=$ROOT/target/release/gpubpf
. benches/cold_cache/probe.sh
build_mock "$W"
cc -O2 -o "$W/app" benches/pages/app.c -L"$W" -l:libcuda.so.1 -Wl,--disable-new-dtags,-rpath,"$W"
"$G" build "$POLICY" -o "$W/policy.o" >/dev/null
# shellcheck disable=SC2086
GPUBPF_HOME="$W/reg" "$G" load "$W/policy.o" ${PAGES_SET:-} >/dev/null 2>&1
SHIM=$(realpath "${SHIM_SO:-$ROOT/target/release/libgpubpf.so}")
(cd "$W" && GPUBPF_HOME="$W/reg" GPUBPF_CUDA_LIBRARY="$W/libcuda.so.1" LD_PRELOAD="$SHIM" \
	valgrind --tool=lackey --trace-mem=yes --log-file="$W/trace.txt" ./app 2 "$W/maps.txt" \
	>/dev/null 2>"$W/err.txt") || { cat "$W/err.txt" >&2; exit 1; }
MARKER=$(nm "$W/app" | awk '$3 == "marker" { print $1 }')
python3 benches/pages/count.py "$W/trace.txt" "$W/maps.txt" "$MARKER" "$POLICY"
