#!/bin/sh
# Init container of the gpubpf DaemonSet: installs the CLI, the shim and the SDK headers on
# the node (HOST_ROOT, a hostPath of the node's /opt/gpubpf), creates the node's system
# registry (HOST_STATE, a hostPath of the node's /run/gpubpf: owned by root, obeyed by every
# user's processes, changed only by root; docs/security.md), and, with NODE_PRELOAD=1, lists the shim in
# the node's /etc/ld.so.preload (mounted at HOST_ETC) so every process on the node gets it
# (NODE_PRELOAD=true or 1).
set -eu
: "${HOST_ROOT:=/host/opt/gpubpf}"
# Where the image keeps what is installed (overridden by tests/deploy_manifests.rs).
: "${IMAGE_BIN:=/usr/local/bin/gpubpf}"
: "${IMAGE_LIB:=/usr/local/lib/gpubpf/libgpubpf.so}"
: "${IMAGE_INCLUDE:=/usr/local/include/gpubpf}"
: "${HOST_STATE:=/host/run/gpubpf}"
mkdir -p "$HOST_ROOT/bin" "$HOST_ROOT/lib" "$HOST_ROOT/include"
# Copy then rename: a process mapping the old shim keeps its (unlinked) file.
cp "$IMAGE_BIN" "$HOST_ROOT/bin/.gpubpf.new"
mv -f "$HOST_ROOT/bin/.gpubpf.new" "$HOST_ROOT/bin/gpubpf"
cp "$IMAGE_LIB" "$HOST_ROOT/lib/.libgpubpf.so.new"
mv -f "$HOST_ROOT/lib/.libgpubpf.so.new" "$HOST_ROOT/lib/libgpubpf.so"
rm -rf "$HOST_ROOT/include/gpubpf"
cp -R "$IMAGE_INCLUDE" "$HOST_ROOT/include/gpubpf"
chmod 0755 "$HOST_ROOT/bin/gpubpf" "$HOST_ROOT/lib/libgpubpf.so"
# The system registry (completed when it exists: policies and counters survive a restart of
# the DaemonSet's pods).
"$IMAGE_BIN" registry init --system --home "$HOST_STATE"
case "${NODE_PRELOAD:-false}" in 1 | true) preload=1 ;; *) preload=0 ;; esac
if [ "$preload" = 1 ]; then
    : "${HOST_ETC:=/host/etc}"
    lib=/opt/gpubpf/lib/libgpubpf.so
    touch "$HOST_ETC/ld.so.preload"
    grep -qxF "$lib" "$HOST_ETC/ld.so.preload" || echo "$lib" >>"$HOST_ETC/ld.so.preload"
fi
echo "gpubpf-install: $("$IMAGE_BIN" --version) installed under $HOST_ROOT, system registry at $HOST_STATE"
