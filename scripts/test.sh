#!/usr/bin/env bash
# The whole test suite: the README's test command, also run by CI (.ci/run).
# Installs what it needs (clang 14 and 19 from Debian packages) when missing, then runs
# rustfmt, clippy and every test of the workspace.
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
cargo test --workspace --locked --no-fail-fast
