"""A policy loaded into a running training loop with `gpubpf load … --wait` takes effect
within 100 ms, and `gpubpf ps` lists the process up to date (issue #13 point 4).

Handshake with run.sh through files in DIR (argv[1]):
  this script  trains; every iteration also allocates 256 MiB (then frees it and empties the
               cache, so that the next one reaches cuMemAlloc again); writes DIR/ready
  run.sh       writes DIR/load_start (time.time()), runs `gpubpf -j load quota.o
               --set limit_bytes=128MiB --set log_denials=0 --wait` > DIR/load.json, writes
               DIR/load_return,
               then DIR/stop
  this script  records the wall-clock time of the first refused 256 MiB allocation, stops at
               DIR/stop, then checks its own `gpubpf -j ps` entry."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MiB, oom_error, ps_entry, result, touch  # noqa: E402

import torch  # noqa: E402

d = sys.argv[1]
f = lambda name: os.path.join(d, name)  # noqa: E731
OOM = oom_error()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(256, 256, device="cuda")
y = torch.randint(0, 10, (256,), device="cuda")

events = []  # (time.time(), ok)
deadline = time.monotonic() + 90
ready = False
while time.monotonic() < deadline and not os.path.exists(f("stop")):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    try:
        t = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
        events.append((time.time(), True))
        del t
    except OOM:
        events.append((time.time(), False))
    torch.cuda.empty_cache()
    if not ready and len(events) >= 20:
        touch(f("ready"))
        ready = True
torch.cuda.synchronize()


def read_time(name):
    try:
        return float(open(f(name)).read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


t_start, t_ret = read_time("load_start"), read_time("load_return")
if t_start is None or t_ret is None:
    result("hotload-within-100ms", False, f"no load times from run.sh ({len(events)} iterations)")
    result("hotload-ps-up-to-date", False, "not reached")
    sys.exit(1)
first_oom = next((t for t, ok in events if not ok), None)
early = sum(1 for t, ok in events if not ok and t < t_start)
ok_before = sum(1 for t, ok in events if ok and t < t_start)
ok_after = sum(1 for t, ok in events if ok and first_oom is not None and t > first_oom)
iters = len(events)
span = events[-1][0] - events[0][0] if iters > 1 else 0
per_iter_ms = 1000 * span / max(1, iters - 1)
if first_oom is None:
    result("hotload-within-100ms", False,
           f"no refusal in {iters} iterations (load took {1000 * (t_ret - t_start):.1f} ms)")
else:
    lag = 1000 * (first_oom - t_ret)
    ok = early == 0 and lag <= 100 and ok_after == 0 and ok_before > 0
    result("hotload-within-100ms", ok,
           f"first refusal {lag:+.1f} ms after `load --wait` returned "
           f"({1000 * (first_oom - t_start):+.1f} ms after it started; the load took "
           f"{1000 * (t_ret - t_start):.1f} ms); {ok_before} grants before, {early} refusals "
           f"before, {ok_after} grants after the first refusal; {per_iter_ms:.2f} ms/iteration")

try:
    load = json.load(open(f("load.json")))
except (OSError, ValueError):
    load = {}
gen = load.get("generation")
acked = load.get("acknowledged_by")
try:
    e = ps_entry()
except Exception as ex:  # noqa: BLE001
    e, err = None, f"{type(ex).__name__}: {ex}"
else:
    err = ""
if e is None:
    result("hotload-ps-up-to-date", False, f"pid {os.getpid()} not in `gpubpf -j ps` {err}")
else:
    applied = e.get("applied_generation")
    progs = sorted({p.get("object") for p in e.get("programs", []) or []})
    ok = e.get("up_to_date") is True and gen is not None and applied is not None \
        and applied >= gen and (acked or 0) >= 1
    result("hotload-ps-up-to-date", ok,
           f"ps: pid {e.get('pid')} up_to_date={e.get('up_to_date')} "
           f"applied_generation={applied} (load generation {gen}, acknowledged_by {acked}); "
           f"objects {progs}; failed {e.get('failed_objects')}")
