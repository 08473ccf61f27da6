#!/usr/bin/env bash
# `gpubpf record` on the real driver (issue #15 point 2), on the GPU machine, with the
# artefacts of tests/gpu/shim/build-dist.sh in DIST: records tests/gpu/shim/app.cu (static
# cudart) allocating 8 x 64 MiB under quota at 256 MiB, replays the record offline through
# the same quota and checks that the replay refuses exactly the calls the live run refused
# (and nothing at 1 GiB). The record is written to OUTDIR/quota_h200.jsonl for
# tests/data/record/. Prints `PASS|FAIL name: detail` lines.
#   tests/gpu/record/run.sh [DIST] [OUTDIR]
set -u
DIST=$(realpath "${1:-target/gpu-dist}")
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
OUTDIR=$(realpath "${2:-$WORK}")
export GPUBPF_HOME="$WORK/registry"
G="$DIST/gpubpf"
pass=0
fail=0
result() { # name ok detail
	if [ "$2" = 1 ]; then echo "PASS $1: $3"; pass=$((pass + 1)); else echo "FAIL $1: $3"; fail=$((fail + 1)); fi
}
date -u +%FT%TZ
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc -O2 -arch=sm_90 -o "$WORK/app" "$HERE/../shim/app.cu" || { echo "FAIL build: nvcc"; exit 1; }
REC="$OUTDIR/quota_h200.jsonl"
"$G" record -o "$REC" --policy "$DIST/quota.o" --set limit_bytes=256MiB --set log_denials=0 \
	-- "$WORK/app" alloc 8 64 >"$WORK/live.txt" 2>"$WORK/live.err"
echo "live run (exit $?):"
cat "$WORK/live.txt"
ok=0; grep -q "alloc ok=4 of 8 x 64 MiB, first_error=2" "$WORK/live.txt" && ok=1
result live-quota $ok "$(head -1 "$WORK/live.txt")"
echo "record: $(wc -l <"$REC") calls, $(wc -c <"$REC") bytes"
for limit in 256MiB 1GiB; do
	"$G" -j replay "$REC" --policy "$DIST/quota.o" --set "limit_bytes=$limit" --set log_denials=0 \
		>"$WORK/replay-$limit.json" 2>"$WORK/replay-$limit.err"
done
python3 - "$REC" "$WORK/replay-256MiB.json" "$WORK/replay-1GiB.json" <<'PY' >"$WORK/compare.txt"
import json, sys
rec = [json.loads(l) for l in open(sys.argv[1])]
live = [i for i, c in enumerate(rec) if c["refused"]]
def denied(path):
    v = json.load(open(path))
    return [c["index"] for c in v["calls"] if c["verdict"] != 0]
same = denied(sys.argv[2])
high = denied(sys.argv[3])
apis = sorted({c["api"] for c in rec})
print(f"live_refused={live} replay_256MiB={same} replay_1GiB={high}")
print(f"apis={len(apis)}: {','.join(apis)}")
print("match=1" if live and same == live and not high else "match=0")
PY
cat "$WORK/compare.txt"
ok=0; grep -q "^match=1$" "$WORK/compare.txt" && ok=1
result replay-matches-live $ok "$(head -1 "$WORK/compare.txt")"
echo "TOTAL pass=$pass fail=$fail"
