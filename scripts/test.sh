#!/usr/bin/env bash
# The whole test suite: the README's test command, also run by CI (.ci/run).
# Installs what it needs (clang 14 and 19 from Debian packages) when missing, then runs
# rustfmt, clippy and every test of the workspace; ends with the conformance counts and one
# total line (`total: N passed, N failed, N skipped`), and exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/ensure-clang.sh

export GPUBPF_CONFORMANCE_DIR="${GPUBPF_CONFORMANCE_DIR:-$PWD/../shared/conformance/bpf_conformance}"
export GPUBPF_SHARED_DIR="${GPUBPF_SHARED_DIR:-$PWD/../shared}"
if [ ! -d "$GPUBPF_CONFORMANCE_DIR" ]; then
    echo "note: $GPUBPF_CONFORMANCE_DIR not found; conformance tests will report that they skipped"
fi

echo "==> cargo fmt --check"
cargo fmt --all -- --check
echo "==> cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "==> cargo build (binaries and the shim the end-to-end tests run)"
cargo build --workspace --bins --locked
cargo build -p gpubpf-shim --locked
echo "==> cargo test"
log=$(mktemp)
conf=$(mktemp)
trap 'rm -f "$log" "$conf"' EXIT
status=0
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log" || status=$?
# The conformance tests print their counts; a second run of those alone shows them.
conf_status=0
cargo test --locked --test conformance --test jit_conformance --test conformance_plugin \
    -- --show-output >"$conf" 2>&1 || conf_status=$?
if [ "$conf_status" -ne 0 ]; then
    cat "$conf"
    status=$conf_status
fi

echo "==> summary"
if [ "$status" -ne 0 ] && ! grep -qE '^test result: FAILED' "$log" "$conf"; then
    echo "cargo test failed without a failing test (a build error or a test binary that crashed): see above"
fi
scripts/test-summary.sh "$log" "$conf"
exit "$status"
