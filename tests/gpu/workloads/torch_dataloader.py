"""A DataLoader with num_workers=2 forked workers trains to completion under the shim (issue
#13 point 4). CUDA is initialised in the parent before the workers are forked (the usual
case, and the one where the shim's atfork handling matters); pin_memory adds the pinning
thread. run.sh starts it with `gpubpf run --policy quota.o --policy trace.o -- python3 …`."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import result  # noqa: E402

import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset, get_worker_info  # noqa: E402


class Synthetic(Dataset):
    def __len__(self):
        return 2048

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(128, generator=g)
        return x, int(x.sum() > 0), os.getpid() if get_worker_info() else 0


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(),
                            torch.nn.Linear(256, 2)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
loader = DataLoader(Synthetic(), batch_size=64, shuffle=True, num_workers=2, pin_memory=True,
                    multiprocessing_context="fork")
batches, workers, loss = 0, set(), None
try:
    for epoch in range(2):
        for x, y, wpid in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            workers.update(int(p) for p in wpid.tolist())
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            batches += 1
    torch.cuda.synchronize()
    # Workers are not persistent: each epoch forks two new ones.
    ok = batches == 64 and len(workers) == 4 and loss is not None and bool(torch.isfinite(loss))
    result("dataloader-forked-workers", ok,
           f"2 epochs, {batches} batches (want 64) from {len(workers)} forked worker(s) (want 4) "
           f"(parent {os.getpid()}), final loss {loss.item():.4f}")
except Exception as e:  # noqa: BLE001
    result("dataloader-forked-workers", False,
           f"after {batches} batches: {type(e).__name__}: {e}")
