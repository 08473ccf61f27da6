#!/usr/bin/env bash
# The README's main job: the whole gpubpf pipeline on a mock CUDA driver (`gpubpf demo`).
# Installs clang when missing, then builds and runs the release binary. Extra arguments go
# to `gpubpf demo` (e.g. `--limit 512MiB`, `--home DIR` to keep the registry).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-clang.sh
exec cargo run --quiet --release -p gpubpf-loader-cli --bin gpubpf -- demo "$@"
