#!/bin/sh
# Init container of the gpubpf DaemonSet: installs the CLI, the shim and the SDK headers on
# the node (HOST_ROOT, a hostPath of the node's /opt/gpubpf), prepares the registry's parent
# directory for the user the workloads run as, and, with NODE_PRELOAD=1, lists the shim in
# the node's /etc/ld.so.preload (mounted at HOST_ETC) so every process on the node gets it
# (NODE_PRELOAD=true or 1).
set -eu
: "${HOST_ROOT:=/host/opt/gpubpf}"
: "${HOST_STATE:=/host/run/gpubpf}"
: "${REGISTRY_UID:?the uid the workloads run as}"
: "${REGISTRY_GID:=$REGISTRY_UID}"
mkdir -p "$HOST_ROOT/bin" "$HOST_ROOT/lib" "$HOST_ROOT/include"
# Copy then rename: a process mapping the old shim keeps its (unlinked) file.
cp /usr/local/bin/gpubpf "$HOST_ROOT/bin/.gpubpf.new"
mv -f "$HOST_ROOT/bin/.gpubpf.new" "$HOST_ROOT/bin/gpubpf"
cp /usr/local/lib/gpubpf/libgpubpf.so "$HOST_ROOT/lib/.libgpubpf.so.new"
mv -f "$HOST_ROOT/lib/.libgpubpf.so.new" "$HOST_ROOT/lib/libgpubpf.so"
rm -rf "$HOST_ROOT/include/gpubpf"
cp -R /usr/local/include/gpubpf "$HOST_ROOT/include/gpubpf"
chmod 0755 "$HOST_ROOT/bin/gpubpf" "$HOST_ROOT/lib/libgpubpf.so"
# The registry itself is created private (0700) by the first `gpubpf load`, run as
# REGISTRY_UID by the policy container; its parent belongs to that user too.
mkdir -p "$HOST_STATE"
chown "$REGISTRY_UID:$REGISTRY_GID" "$HOST_STATE"
chmod 0755 "$HOST_STATE"
case "${NODE_PRELOAD:-false}" in 1 | true) preload=1 ;; *) preload=0 ;; esac
if [ "$preload" = 1 ]; then
    : "${HOST_ETC:=/host/etc}"
    lib=/opt/gpubpf/lib/libgpubpf.so
    touch "$HOST_ETC/ld.so.preload"
    grep -qxF "$lib" "$HOST_ETC/ld.so.preload" || echo "$lib" >>"$HOST_ETC/ld.so.preload"
fi
echo "gpubpf-install: $(/usr/local/bin/gpubpf --version) installed under $HOST_ROOT"
