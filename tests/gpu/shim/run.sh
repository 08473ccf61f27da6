#!/usr/bin/env bash
# The shim on the real driver (issue #13, part 1), on the GPU machine. Takes the artefacts
# built on the development machine (tests/gpu/shim/build-dist.sh puts them in DIST):
# gpubpf, libgpubpf.so, quota.o, trace.o, kernel_guard.o. Builds tests/gpu/shim/app.cu with nvcc (static
# cudart, the default) and prints one `PASS|FAIL name: detail` line per check, then the
# raw outputs. Usage: tests/gpu/shim/run.sh [DIST] (default target/gpu-dist).
set -u
DIST=$(realpath "${1:-target/gpu-dist}")
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
export GPUBPF_HOME="$WORK/registry"
G="$DIST/gpubpf"
SHIM="$DIST/libgpubpf.so"
pass=0
fail=0
result() { # name ok detail
	if [ "$2" = 1 ]; then echo "PASS $1: $3"; pass=$((pass + 1)); else echo "FAIL $1: $3"; fail=$((fail + 1)); fi
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc --version | tail -1
nvcc -O2 -arch=sm_90 -o "$WORK/app" "$HERE/app.cu" || { echo "FAIL build: nvcc"; exit 1; }
ldd "$WORK/app" | grep -q cudart && echo "note: app links cudart dynamically" || echo "app: static cudart"

# 1. Unpoliced: same output with and without the shim.
"$WORK/app" compute >"$WORK/base.txt" 2>&1; rb=$?
LD_PRELOAD="$SHIM" "$WORK/app" compute >"$WORK/shim.txt" 2>"$WORK/shim.err"; rs=$?
same=0; cmp -s "$WORK/base.txt" "$WORK/shim.txt" && [ $rb = 0 ] && [ $rs = 0 ] && same=1
result unpoliced-identical $same "$(cat "$WORK/shim.txt")"

# 2. Quota 256 MiB: four 64 MiB allocations, the fifth denied with cudaErrorMemoryAllocation.
"$G" load "$DIST/quota.o" --name quota --set limit_bytes=256MiB >/dev/null
LD_PRELOAD="$SHIM" "$WORK/app" alloc 8 64 >"$WORK/quota.txt" 2>"$WORK/quota.err"
ok=0; grep -q "alloc ok=4 of 8 x 64 MiB, first_error=2 (cudaErrorMemoryAllocation)" "$WORK/quota.txt" && ok=1
result quota-denies-fifth $ok "$(head -1 "$WORK/quota.txt")"
ok=0; grep -q "after freeing: cudaMalloc 64 MiB -> 0 (cudaSuccess)" "$WORK/quota.txt" && ok=1
result quota-works-after-free $ok "$(tail -1 "$WORK/quota.txt")"
"$G" maps dump proc_usage >"$WORK/proc_usage.txt" 2>&1
"$G" prog unload quota >/dev/null

# 3. Trace: the policy's per-API call counts equal the program's own counts.
"$G" load "$DIST/trace.o" --name trace --set emit_events=0 >/dev/null
LD_PRELOAD="$SHIM" "$WORK/app" compute >"$WORK/trace.txt" 2>"$WORK/trace.err"
"$G" maps dump stats -j >"$WORK/stats.json" 2>&1
"$G" attach-points -j >"$WORK/points.json" 2>/dev/null
python3 - "$WORK/trace.txt" "$WORK/stats.json" "$WORK/points.json" <<'PY' >"$WORK/trace-check.txt"
import json, re, sys
app = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", open(sys.argv[1]).read())}
stats = json.load(open(sys.argv[2]))
ids = {}
try:
    for p in json.load(open(sys.argv[3])):
        ids[int(p.get("id", -1))] = p.get("name")
except Exception:
    pass
seen = {}
for e in stats if isinstance(stats, list) else stats.get("entries", []):
    # bpftool's JSON: raw "0x.." byte arrays in key/value, BTF-decoded ones in "formatted".
    f = e.get("formatted", {})
    k = f.get("key")
    if not isinstance(k, int):
        k = int.from_bytes(bytes(int(b, 16) for b in e["key"][:4]), "little")
    v = f.get("value")
    calls = v.get("calls") if isinstance(v, dict) else None
    seen[ids.get(k, k)] = calls
print("policy:", seen)
want = {"cuMemAlloc": app.get("allocs"), "cuMemFree": app.get("frees"),
        "cuLaunchKernel": app.get("launches"), "cuCtxSynchronize": app.get("syncs")}
print("program:", want)
print("OK" if all(v is not None and seen.get(k) == v for k, v in want.items()) else "MISMATCH")
PY
ok=0; grep -q '^OK$' "$WORK/trace-check.txt" && ok=1
result trace-counts-match $ok "$(tr '\n' ' ' <"$WORK/trace-check.txt")"

# 4. Graphs and stream-ordered allocation work under the shim with the trace policy (and
#    the launch count includes the captured launches, which reach cuLaunchKernel).
LD_PRELOAD="$SHIM" "$WORK/app" graph >"$WORK/graph.txt" 2>"$WORK/graph.err"; rg=$?
ok=0; [ $rg = 0 ] && grep -q "async_allocs=4 wrong=0" "$WORK/graph.txt" && ok=1
result graph-and-async $ok "$(cat "$WORK/graph.txt")"
"$G" maps dump stats -j >"$WORK/stats-graph.json" 2>&1

# 5. Trace events on the real driver: one event per launch, each naming its kernel
#    (gpubpf_get_kernel_name through the driver's cuFuncGetName, or cuKernelGetName for the
#    library kernel static cudart launches): axpy's mangled name.
"$G" prog unload trace >/dev/null
"$G" load "$DIST/trace.o" --name trace >/dev/null
LD_PRELOAD="$SHIM" "$WORK/app" compute >"$WORK/events-app.txt" 2>"$WORK/events.err"
"$G" events trace.events >"$WORK/events.jsonl" 2>>"$WORK/events.err"
python3 - "$WORK/events-app.txt" "$WORK/events.jsonl" <<'PY' >"$WORK/events-check.txt"
import json, re, sys
app = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", open(sys.argv[1]).read())}
events = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
launches = [e for e in events if e.get("api") == "cuLaunchKernel"]
names = sorted({e.get("kernel") for e in launches})
print(f"events={len(events)} launch_events={len(launches)} app_launches={app.get('launches')} "
      f"kernels={names}")
print("OK" if len(launches) == app.get("launches") and names == ["_Z4axpyfPKfPfi"] else "MISMATCH")
PY
ok=0; grep -q '^OK$' "$WORK/events-check.txt" && ok=1
result trace-events-name-kernels $ok "$(tr '\n' ' ' <"$WORK/events-check.txt")"

# 5b. kernel_guard refuses a static-cudart kernel by its name: axpy on the deny-list, every
#     launch of `app compute` is refused and counted under that name in kernel_denied.
"$G" load "$DIST/kernel_guard.o" --name kguard --set log_denials=0 >/dev/null
"$G" maps update kernel_list --key _Z4axpyfPKfPfi --value 0 >/dev/null
LD_PRELOAD="$SHIM" "$WORK/app" compute >"$WORK/guard-app.txt" 2>&1
"$G" -j maps dump kernel_denied >"$WORK/guard-denied.json" 2>&1
python3 - "$WORK/guard-denied.json" <<'PY' >"$WORK/guard-check.txt"
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except ValueError:
    rows = []
denied = {r.get("formatted", {}).get("key"): r.get("formatted", {}).get("value") for r in rows}
print(f"kernel_denied={denied}")
n = denied.get("_Z4axpyfPKfPfi")
print("OK" if isinstance(n, int) and n >= 1 else "MISMATCH")
PY
ok=0; grep -q '^OK$' "$WORK/guard-check.txt" && ok=1
result kernel-guard-denies-by-name $ok "$(tr '\n' ' ' <"$WORK/guard-check.txt") app: $(head -c 200 "$WORK/guard-app.txt" | tr '\n' ' ')"
"$G" prog unload kguard >/dev/null
"$G" maps delete kernel_list --key _Z4axpyfPKfPfi >/dev/null 2>&1

# 6. PyTorch with quota.o at 1 GiB: same loss as without the shim, a 2 GiB tensor raises
#    torch.OutOfMemoryError, and the process goes on working.
if python3 -c "import torch" 2>/dev/null; then
	python3 "$HERE/torch_quota.py" >"$WORK/torch-base.txt" 2>&1
	"$G" load "$DIST/quota.o" --name quota --set limit_bytes=1GiB >/dev/null
	LD_PRELOAD="$SHIM" python3 "$HERE/torch_quota.py" >"$WORK/torch.txt" 2>"$WORK/torch.err"
	"$G" maps dump proc_usage >>"$WORK/torch.txt" 2>&1
	"$G" prog unload quota >/dev/null
	bl=$(grep '^loss=' "$WORK/torch-base.txt"); sl=$(grep '^loss=' "$WORK/torch.txt")
	ok=0; [ -n "$bl" ] && [ "$bl" = "$sl" ] && ok=1
	result torch-same-loss $ok "without: $bl, with: $sl"
	ok=0; grep -q '^oom=OutOfMemoryError' "$WORK/torch.txt" && ok=1
	result torch-oom-at-quota $ok "$(grep '^oom=' "$WORK/torch.txt")"
	ok=0; grep -q "^after_oom_sum=$((64 << 20))" "$WORK/torch.txt" && ok=1
	result torch-works-after-oom $ok "$(grep '^after_oom' "$WORK/torch.txt")"
	# PyTorch's kernels have mangled names longer than trace's 64-byte field: every launch
	# event names its kernel, the long names truncated to 63 bytes.
	"$G" events trace.events >/dev/null 2>&1 # consumes what torch_quota.py left
	LD_PRELOAD="$SHIM" python3 -c "import torch; a = torch.randn(256, 256, device='cuda'); b = torch.relu(a @ a).sum(); torch.cuda.synchronize(); print('sum', float(b))" \
		>"$WORK/torch-events-app.txt" 2>&1
	"$G" events trace.events >"$WORK/torch-events.jsonl" 2>>"$WORK/events.err"
	python3 - "$WORK/torch-events.jsonl" <<'PY' >"$WORK/torch-events-check.txt"
import json, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
launches = [e for e in events if e.get("api") == "cuLaunchKernel"]
names = {e.get("kernel", "") for e in launches}
longest = max((len(n) for n in names), default=0)
named = all(n and n.isprintable() for n in names)
print(f"launch_events={len(launches)} kernels={len(names)} longest={longest} e.g. {sorted(names)[:3]}")
print("OK" if launches and named and longest == 63 else "MISMATCH")
PY
	ok=0; grep -q '^OK$' "$WORK/torch-events-check.txt" && ok=1
	result torch-kernel-names $ok "$(tr '\n' ' ' <"$WORK/torch-events-check.txt")"
fi

echo "== $pass passed, $fail failed"
for f in base.txt shim.err quota.txt quota.err proc_usage.txt trace.err stats.json graph.err stats-graph.json events.err torch-base.txt torch.txt torch.err torch-events-app.txt; do
	echo "--- $f"; head -c 4000 "$WORK/$f"; echo
done
[ -n "${OUT:-}" ] && cp -r "$WORK"/*.txt "$WORK"/*.json "$WORK"/*.err "$OUT/" 2>/dev/null
exit $((fail != 0))
