#!/usr/bin/env bash
# Usage: scripts/ensure-packages.sh PACKAGE…
# Installs each Debian package whose command of the same name is missing (`prometheus`,
# `tmux`), as scripts/ensure-clang.sh does for clang. Exits non-zero when a command is still
# missing afterwards. Used by tests/exporter_prometheus.rs and tests/top_tmux.rs, which skip
# when it fails.
need=()
for p in "$@"; do
    command -v "$p" >/dev/null 2>&1 || need+=("$p")
done
if ((${#need[@]})); then
    echo "==> installing ${need[*]} (Debian packages)" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        "${need[@]}" >/dev/null
fi
for p in "$@"; do
    command -v "$p" >/dev/null 2>&1 || { echo "$p is not installed" >&2; exit 1; }
done
