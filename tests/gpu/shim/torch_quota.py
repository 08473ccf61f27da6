"""PyTorch under the shim with quota.o (issue #13, part 2, first look): a small MLP trains
below the limit, a tensor that crosses it raises torch.OutOfMemoryError, and the process
goes on working after freeing. Prints `key=value` lines for run.sh."""
import torch

torch.manual_seed(0)
dev = "cuda"
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(512, 256, device=dev)
y = torch.randint(0, 10, (512,), device=dev)
for step in range(20):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
print(f"loss={loss.item():.6f}")
try:
    big = torch.empty(2 << 30, dtype=torch.uint8, device=dev)  # 2 GiB
    print("oom=none")
    del big
except torch.OutOfMemoryError as e:
    print("oom=OutOfMemoryError")
torch.cuda.empty_cache()
z = torch.ones(64 << 20, dtype=torch.uint8, device=dev)  # 64 MiB still fits
print(f"after_oom_sum={int(z.sum().item())}")
