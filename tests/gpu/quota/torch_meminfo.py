"""PyTorch under quota.o + meminfo.o (issue #13, part 2): torch.cuda.mem_get_info() reports the
quota as total and quota - usage as free (usage read from the registry's proc_usage), a
tensor that crosses the quota raises torch.OutOfMemoryError, the process goes on working,
and with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True the memory is charged through
cuMemCreate (live allocations of kind 2 in quota_allocs). Prints `key=value` lines.
Environment: GPUBPF (the gpubpf binary), LIMIT (the quota in bytes)."""
import json
import os
import subprocess

import torch

G = os.environ["GPUBPF"]
LIMIT = int(os.environ["LIMIT"])
PID = os.getpid()


def gpubpf(*args):
    out = subprocess.run([G, "-j", *args], capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else None


def formatted(entry):
    """`(key, value)` of a map entry: bpftool-style JSON keeps the typed view in `formatted`."""
    f = entry.get("formatted", entry)
    return f["key"], f["value"]


def usage():
    v = gpubpf("maps", "lookup", "proc_usage", "--key", str(PID))
    return formatted(v)[1]["bytes"] if v else 0


def kinds():
    live = [formatted(e) for e in gpubpf("maps", "dump", "quota_allocs") or []]
    mine = [k["kind"] for k, _ in live if k["pid"] == PID]
    return {k: mine.count(k) for k in sorted(set(mine))}


free, total = torch.cuda.mem_get_info()
print(f"start_total={total} start_free={free} start_usage={usage()} limit={LIMIT}")
x = torch.ones(256 << 20, dtype=torch.uint8, device="cuda")
free, total = torch.cuda.mem_get_info()
u = usage()
print(f"after_256mib_total={total} free={free} usage={u} expect_free={LIMIT - u}")
print(f"live_kinds={json.dumps(kinds())}")
try:
    big = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    print("oom=none")
    del big
except torch.OutOfMemoryError:
    print("oom=OutOfMemoryError")
del x
torch.cuda.empty_cache()
z = torch.ones(64 << 20, dtype=torch.uint8, device="cuda")
print(f"after_oom_sum={int(z.sum().item())}")
del z
torch.cuda.empty_cache()
free, total = torch.cuda.mem_get_info()
u = usage()
print(f"end_total={total} free={free} usage={u} expect_free={LIMIT - u}")
