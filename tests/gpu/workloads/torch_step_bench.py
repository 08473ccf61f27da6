"""One PyTorch training step, timed (issue #13 point 5): a small MLP (4 Linear layers, width
1024, batch 256, fp32, AdamW), WARMUP steps, then ROUNDS blocks of STEPS steps each timed
from the first step to torch.cuda.synchronize(). run.sh runs it interleaved with and without
the shim. Prints: step_ms median=… rounds=…,… loss=…

  torch_step_bench.py [STEPS=500] [ROUNDS=3] [WARMUP=30]"""
import statistics
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 500
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
warmup = int(sys.argv[3]) if len(sys.argv) > 3 else 30

torch.manual_seed(0)
dev = "cuda"
layers = []
for i in range(3):
    layers += [torch.nn.Linear(1024 if i else 512, 1024), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers, torch.nn.Linear(1024, 10)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(256, 512, device=dev)
y = torch.randint(0, 10, (256,), device=dev)


def step():
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


for _ in range(warmup):
    step()
torch.cuda.synchronize()
ms = []
for _ in range(rounds):
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    torch.cuda.synchronize()
    ms.append(1000 * (time.perf_counter() - t0) / steps)
print(f"step_ms median={statistics.median(ms):.4f} rounds={','.join(f'{v:.4f}' for v in ms)} "
      f"loss={loss.item():.6f}")
