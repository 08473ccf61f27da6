#!/usr/bin/env bash
# Compiles every policies/*.bpf.c to policies/build/<name>.o with clang and the SDK headers.
#
#   policies/build.sh                  # clang from PATH, output in policies/build/
#   CLANG=clang-19 OUT=/tmp/p19 policies/build.sh
#
# Environment: CLANG (compiler, default `clang`), OUT (output directory, default
# policies/build), EXTRA_CFLAGS (appended). The flags are those of `gpubpf build`
# (gpubpf_runtime::sdk::CLANG_FLAGS). Exits non-zero when any policy fails to compile.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
clang="${CLANG:-clang}"
out="${OUT:-$here/build}"
if ! command -v "$clang" >/dev/null 2>&1; then
    echo "error: $clang not found (install clang or set CLANG=/path/to/clang)" >&2
    exit 127
fi
mkdir -p "$out"
status=0
for src in "$here"/*.bpf.c; do
    [ -e "$src" ] || continue
    name="$(basename "$src" .bpf.c)"
    echo "  CC $name.o ($clang)"
    # shellcheck disable=SC2086
    if ! "$clang" -O2 -g -target bpf -mcpu=v3 -Wall -Werror -I "$here/include" \
        ${EXTRA_CFLAGS:-} -c "$src" -o "$out/$name.o"; then
        echo "error: $src failed to compile" >&2
        status=1
    fi
done
exit "$status"
