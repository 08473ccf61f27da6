#!/usr/bin/env bash
# Installs clang 14 (`clang`), clang 19 (`clang-19`) and llvm from Debian packages when any is
# missing. Sourced by scripts/test.sh and scripts/demo.sh.
need=()
command -v clang >/dev/null 2>&1 || need+=(clang)
command -v clang-19 >/dev/null 2>&1 || need+=(clang-19)
command -v llvm-objdump >/dev/null 2>&1 || need+=(llvm)
if ((${#need[@]})); then
    echo "==> installing ${need[*]} (Debian packages)"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
