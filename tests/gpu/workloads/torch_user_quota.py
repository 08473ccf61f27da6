"""Two PyTorch processes of one user share quota.o's per-user limit (issue #13 point 4).

run.sh loads quota.o with limit_bytes=0 and user_limit_bytes=1GiB, then starts, under the
shim and at the same time:
  torch_user_quota.py holder DIR   holds 700 MiB, writes DIR/held; after DIR/refused frees it
                                   (empty_cache) and writes DIR/freed; exits after DIR/done
  torch_user_quota.py asker DIR    after DIR/held: 500 MiB must raise OutOfMemoryError, 200 MiB
                                   must fit beside the holder's 700 MiB; writes DIR/refused;
                                   after DIR/freed: 500 MiB must fit; writes DIR/done
The asker prints the RESULT lines."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import MiB, oom_error, result, touch, usage_of, wait_file  # noqa: E402

import torch  # noqa: E402

role, d = sys.argv[1], sys.argv[2]
f = lambda name: os.path.join(d, name)  # noqa: E731
OOM = oom_error()
uid = os.getuid()


def try_alloc(mib):
    try:
        t = torch.empty(mib * MiB, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        return t, "ok"
    except OOM:
        return None, "OutOfMemoryError"
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {e}"


torch.cuda.init()
if role == "holder":
    t, r = try_alloc(700)
    print(f"holder pid {os.getpid()}: 700 MiB -> {r}; user_usage={usage_of('user_usage', uid)}")
    touch(f("held"), r)
    if not wait_file(f("refused"), 120):
        print("holder: no DIR/refused within 120 s")
    del t
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    print(f"holder: freed; user_usage={usage_of('user_usage', uid)}")
    touch(f("freed"))
    wait_file(f("done"), 120)
    sys.exit(0)

# asker
if not wait_file(f("held"), 120):
    result("user-quota-shared", False, "the holder never wrote DIR/held")
    result("user-quota-credited-across", False, "not reached")
    sys.exit(1)
held = open(f("held")).read().strip()
u_before = usage_of("user_usage", uid)
big, r_big = try_alloc(500)
del big
small, r_small = try_alloc(200)
del small
torch.cuda.empty_cache()
torch.cuda.synchronize()
u_after = usage_of("user_usage", uid)
print(f"asker pid {os.getpid()}: holder 700 MiB -> {held}; user_usage before={u_before}; "
      f"500 MiB -> {r_big}; 200 MiB -> {r_small}; user_usage after={u_after}")
ok = held == "ok" and r_big == "OutOfMemoryError" and r_small == "ok"
result("user-quota-shared", ok,
       f"holder 700 MiB {held}; asker 500 MiB -> {r_big}, 200 MiB -> {r_small}; "
       f"user_usage.bytes={u_before['bytes']} denied={u_after['denied']}")
touch(f("refused"))
if not wait_file(f("freed"), 120):
    result("user-quota-credited-across", False, "the holder never wrote DIR/freed")
    touch(f("done"))
    sys.exit(1)
again, r_again = try_alloc(500)
u_end = usage_of("user_usage", uid)
del again
touch(f("done"))
result("user-quota-credited-across", r_again == "ok",
       f"after the holder freed: asker 500 MiB -> {r_again}; user_usage.bytes={u_end['bytes']}")
