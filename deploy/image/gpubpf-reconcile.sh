#!/bin/sh
# Policy container of the gpubpf DaemonSet: keeps the node's registry in step with the
# mounted ConfigMap (POLICY_DIR). The ConfigMap holds compiled objects (NAME.o, binaryData)
# and `policies.conf`, one line per policy: `NAME OBJECT [LOAD ARGS…]`, e.g.
#   quota quota.o --set limit_bytes=8GiB
# Every INTERVAL seconds each line whose object or arguments changed since it was last applied
# is loaded: `gpubpf load OBJECT --replace NAME … --wait=WAIT` once NAME is loaded (one
# registry generation, maps and counters kept), `gpubpf load OBJECT --name NAME …` the first
# time after the container starts (which replaces NAME too when it was loaded before).
# A failed load (verifier, bad object) is logged; the policy in force stays. A failed update
# is retried at the next change of the ConfigMap, a failed first load every INTERVAL.
set -u
: "${POLICY_DIR:=/etc/gpubpf/policies}"
: "${INTERVAL:=10}"
: "${WAIT:=30s}"
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
while :; do
    if [ -f "$POLICY_DIR/policies.conf" ]; then
        grep -v '^[[:space:]]*\(#\|$\)' "$POLICY_DIR/policies.conf" |
        while read -r name obj args; do
            sum=$( (cat "$POLICY_DIR/$obj" 2>/dev/null; echo "$args") | sha256sum | cut -d' ' -f1)
            [ "$(cat "$state/$name" 2>/dev/null)" = "$sum" ] && continue
            if [ -f "$state/$name" ]; then how="--replace $name"; else how="--name $name"; fi
            # shellcheck disable=SC2086 # args and how are word lists
            if gpubpf load "$POLICY_DIR/$obj" $how $args --wait="$WAIT"; then
                echo "$sum" >"$state/$name"
                echo "gpubpf-reconcile: applied $name: gpubpf load $obj $how $args --wait=$WAIT"
            else
                echo "gpubpf-reconcile: $name: gpubpf load $obj $how $args failed; the loaded one stays" >&2
                # Remember the failure so it is not retried every INTERVAL, only on change;
                # keep '--replace' semantics for the next change once NAME was loaded.
                [ -f "$state/$name" ] && echo "$sum" >"$state/$name"
            fi
        done
    fi
    sleep "$INTERVAL"
done
