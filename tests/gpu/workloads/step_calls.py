"""Which driver calls one PyTorch training step makes, and how often (a diagnostic for the
training-step overhead): run under the shim with a counting program attached to every
attach point (step_diag.sh loads it), STEPS steps of the same MLP as torch_step_bench.py,
then this process's `gpubpf ps` entry: calls per attach point, per step.

  step_calls.py [STEPS=100]"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ps_entry  # noqa: E402

import torch  # noqa: E402

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
torch.manual_seed(0)
layers = []
for i in range(3):
    layers += [torch.nn.Linear(1024 if i else 512, 1024), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers, torch.nn.Linear(1024, 10)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(256, 512, device="cuda")
y = torch.randint(0, 10, (256,), device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()


for _ in range(30):
    step()
torch.cuda.synchronize()
before = {a["attach_point"]: a["calls"] for a in (ps_entry() or {}).get("attach_points", [])}
for _ in range(steps):
    step()
torch.cuda.synchronize()
after = (ps_entry() or {}).get("attach_points", [])
rows = sorted(((a["calls"] - before.get(a["attach_point"], 0), a["attach_point"]) for a in after),
              reverse=True)
total = sum(n for n, _ in rows)
print(f"driver calls per step: {total / steps:.1f} over {len(rows)} attach points with programs")
for n, name in rows[:25]:
    if n:
        print(f"  {name:<36} {n / steps:8.2f} per step")
