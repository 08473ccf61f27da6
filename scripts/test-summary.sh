#!/usr/bin/env bash
# The closing lines of scripts/test.sh, from cargo test output:
#   scripts/test-summary.sh TEST_LOG [CONFORMANCE_LOG]
# prints the conformance counts (the lines the conformance tests print, found in
# CONFORMANCE_LOG, a run with --show-output; TEST_LOG when not given) and, last, one total
# over every `test result:` line of TEST_LOG: `total: N passed, N failed, N skipped`
# (skipped = ignored tests).
set -euo pipefail
log=$1
conf=${2:-$1}

counts=$(grep -hE '^(conformance \([a-z, ]+\): [0-9]+/[0-9]+ passed|negative cases rejected: [0-9]+/[0-9]+)$' "$conf" | sort -u || true)
if [ -n "$counts" ]; then
    echo "$counts"
elif grep -q 'skipped: bpf_conformance not found' "$conf"; then
    echo "conformance: skipped (bpf_conformance not found; set GPUBPF_CONFORMANCE_DIR)"
else
    echo "conformance: no counts found in the test output"
fi
awk '
/^test result: / {
    for (i = 2; i <= NF; i++) {
        if ($i ~ /^passed;?$/) p += $(i - 1)
        if ($i ~ /^failed;?$/) f += $(i - 1)
        if ($i ~ /^ignored;?$/) s += $(i - 1)
    }
}
END { printf "total: %d passed, %d failed, %d skipped\n", p, f, s }
' "$log"
