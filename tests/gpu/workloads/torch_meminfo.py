"""torch.cuda.mem_get_info() under quota.o + meminfo.o (issue #13 point 2): total is the
quota, free is the quota minus what the process holds (proc_usage, which follows the caching
allocator's reserved bytes).

run.sh starts it with the shim preloaded, quota.o (limit_bytes = argv[1] bytes) and meminfo.o
loaded."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MiB, GiB, result, usage_of  # noqa: E402

import torch  # noqa: E402

QUOTA = int(sys.argv[1]) if len(sys.argv) > 1 else 2 * GiB
pid = os.getpid()
torch.cuda.init()


def view():
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    u = usage_of("proc_usage", pid)
    return free, total, u, torch.cuda.memory_reserved()


samples = []
f0, t0, u0, r0 = view()
samples.append(("start", f0, t0, u0, r0))
a = torch.empty(512 * MiB, dtype=torch.uint8, device="cuda")
f1, t1, u1, r1 = view()
samples.append(("512MiB", f1, t1, u1, r1))
b = torch.empty(300 * MiB, dtype=torch.uint8, device="cuda")
f2, t2, u2, r2 = view()
samples.append(("812MiB", f2, t2, u2, r2))
del a, b
torch.cuda.empty_cache()
f3, t3, u3, r3 = view()
samples.append(("freed", f3, t3, u3, r3))
for s in samples:
    print(f"{s[0]}: free={s[1]} total={s[2]} proc_usage={s[3]} reserved={s[4]}")
props = torch.cuda.get_device_properties(0).total_memory
print(f"get_device_properties(0).total_memory={props} (informative: cudart may cache it)")

ok = all(s[2] == QUOTA for s in samples)
result("meminfo-total-is-quota", ok,
       "totals " + ",".join(str(s[2]) for s in samples) + f" (quota {QUOTA})")
exact = all(s[1] == QUOTA - s[3]["bytes"] for s in samples)
tracks = all(abs(s[3]["bytes"] - s[4]) <= 8 * MiB for s in samples)
result("meminfo-free-is-quota-minus-usage", exact and tracks,
       "; ".join(f"{s[0]}: free={s[1]} quota-usage={QUOTA - s[3]['bytes']} "
                 f"quota-reserved={QUOTA - s[4]}" for s in samples))
