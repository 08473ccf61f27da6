"""PyTorch's caching allocator with expandable_segments:True under quota.o (issue #13 point 2):
the cuMemCreate family is policed and frees (cuMemRelease) are credited.

run.sh starts it with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, the shim preloaded
and quota.o loaded with limit_bytes=1GiB (argv[1], bytes)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MiB, GiB, oom_error, point, ps_entry, result, usage_of  # noqa: E402

import torch  # noqa: E402

LIMIT = int(sys.argv[1]) if len(sys.argv) > 1 else GiB
OOM = oom_error()
pid = os.getpid()
print("PYTORCH_CUDA_ALLOC_CONF=" + os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))


def used():
    torch.cuda.synchronize()
    return usage_of("proc_usage", pid)


def driver_used():
    """Device memory in use as the driver sees it (total - free; quota alone is loaded, so
    cudaMemGetInfo is not narrowed). The process is alone on the GPU: its changes are ours."""
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return total - free


# Baselines after CUDA initialisation: the context's own memory is not an allocation.
torch.zeros(1, device="cuda")
u0, d0 = used(), driver_used()
print(f"baseline: proc_usage={u0} driver_used={d0}")


# A few training steps below the limit.
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(512, 256, device="cuda")
y = torch.randint(0, 10, (512,), device="cuda")
for _ in range(10):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
print(f"loss={loss.item():.6f}")

# 512 MiB fits; the usage the policy counts follows what the allocator has mapped.
a = torch.empty(512 * MiB, dtype=torch.uint8, device="cuda")
u1 = used()
r1 = torch.cuda.memory_reserved()
d1 = driver_used()
print(f"after 512 MiB: proc_usage={u1} reserved={r1} driver_used={d1}")
# What the policy charged since the baseline is what the driver handed out (cuBLAS and the
# allocator's own segments included, which memory_reserved() does not count).
grew = u1["bytes"] - u0["bytes"]
result("expandable-usage-tracks-reserved", r1 >= 512 * MiB and abs(grew - (d1 - d0)) <= 8 * MiB,
       f"proc_usage grew {grew} B, driver used grew {d1 - d0} B (tolerance 8 MiB); "
       f"memory_reserved={r1}")

# 768 MiB more crosses the limit: the allocator's cuMemCreate is refused, torch raises.
before = point(ps_entry(), "cuMemCreate")
oom = "none"
try:
    b = torch.empty(768 * MiB, dtype=torch.uint8, device="cuda")
    del b
except OOM as e:
    oom = "OutOfMemoryError"
    print("oom message:", str(e).splitlines()[0][:300])
except Exception as e:  # noqa: BLE001 (report whatever else surfaced)
    oom = f"{type(e).__name__}: {e}"
entry = ps_entry()
create = point(entry, "cuMemCreate")
alloc = point(entry, "cuMemAlloc")
print(f"ps cuMemCreate before={before} after={create}; cuMemAlloc={alloc}")
ok = oom == "OutOfMemoryError" and create["calls"] > 0 and create["denied"] > before["denied"]
result("expandable-cumemcreate-policed", ok,
       f"768 MiB over {LIMIT} -> {oom}; cuMemCreate calls={create['calls']} "
       f"denied={create['denied']} (was {before['denied']}); cuMemAlloc calls={alloc['calls']}")

# Free everything, empty the cache: the released handles are credited.
del a, model, opt, x, y, loss
clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
if clear:
    clear()
torch.cuda.empty_cache()
u2 = used()
r2 = torch.cuda.memory_reserved()
d2 = driver_used()
print(f"after empty_cache: proc_usage={u2} reserved={r2} driver_used={d2}")
# Everything the driver took back was credited: usage and driver view move together.
ok = (u2["frees"] > 0 and u2["bytes"] < u1["bytes"]
      and abs((u2["bytes"] - u0["bytes"]) - (d2 - d0)) <= 8 * MiB)
result("expandable-frees-credited", ok,
       f"after empty_cache proc_usage.bytes={u2['bytes']} (grew {u2['bytes'] - u0['bytes']} B "
       f"since the baseline, driver {d2 - d0} B; reserved {r2}) frees={u2['frees']} "
       f"allocs={u2['allocs']} denied={u2['denied']}")

# The same 768 MiB now fits.
try:
    c = torch.ones(768 * MiB, dtype=torch.uint8, device="cuda")
    # A slice: summing all of a uint8 tensor materialises it as int64 (6 GiB, over the quota).
    s = int(c[-MiB:].sum().item())
    ok, detail = s == MiB and c.numel() == 768 * MiB, f"768 MiB tensor, last MiB sums to {s}"
    del c
except Exception as e:  # noqa: BLE001
    ok, detail = False, f"768 MiB after freeing: {type(e).__name__}: {e}"
u3 = used()
result("expandable-works-after-free", ok, f"{detail}; proc_usage.bytes={u3['bytes']}")
