"""cuBLAS / cuBLASLt / Triton launches seen by the policies (issue #13 point 3).

run.sh loads, before starting this under the shim:
  count_launch.o --name launches --attach cuLaunchKernel,cuLaunchKernelEx   (one counter,
                                                      map `launches.launches`, key 0)
  count_launch.o --name other --attach cuLaunchCooperativeKernel,cuGraphLaunch  (diagnostic)
  trace.o --name trace --set emit_events=0            (per-API stats, map `trace.stats`)

For each loop (N iterations after a warm-up) the counter's increase must equal the number of
kernels torch.profiler (ProfilerActivity.CUDA, CUPTI) saw in the same loop. The counters are
read with `gpubpf -j maps dump` around the loop, after torch.cuda.synchronize(). `gpubpf -j ps`
gives the split between cuLaunchKernel and cuLaunchKernelEx (the shim's own call counts)."""
import collections
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import counter, point, ps_entry, result, stats_calls  # noqa: E402

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

N = int(os.environ.get("WL_LOOPS", "20"))
COUNT_MAP = os.environ.get("WL_COUNT_MAP", "launches.launches")
TRACE_MAP = os.environ.get("WL_TRACE_MAP", "trace.stats")
TMP = tempfile.mkdtemp(prefix="wl-prof-")
APIS = ("cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", "cuGraphLaunch")


def prefer(lib):
    try:
        torch.backends.cuda.preferred_blas_library(lib)
        return str(torch.backends.cuda.preferred_blas_library())
    except Exception as e:  # noqa: BLE001
        return f"(preferred_blas_library unavailable: {e})"


def profiled_kernels(prof, tag):
    """(kernels, names Counter, launch-API events) of a finished profile."""
    path = os.path.join(TMP, f"{tag}.json")
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            tr = json.load(f)
        evs = tr.get("traceEvents", []) if isinstance(tr, dict) else tr
        ks = [e for e in evs if isinstance(e, dict) and e.get("ph") == "X"
              and str(e.get("cat", "")).lower() == "kernel"]
        api = collections.Counter(
            e.get("name", "") for e in evs if isinstance(e, dict) and e.get("ph") == "X"
            and str(e.get("cat", "")).lower() in ("cuda_runtime", "cuda_driver")
            and "aunch" in e.get("name", ""))
        return len(ks), collections.Counter(e.get("name", "?") for e in ks), dict(api)
    except Exception as e:  # noqa: BLE001 (fall back to the event list)
        print(f"{tag}: chrome trace unusable ({e}); counting prof.events()")
        ks = [e for e in prof.events()
              if str(getattr(e, "device_type", "")).endswith("CUDA")
              and not e.name.startswith(("Memcpy", "Memset"))]
        return len(ks), collections.Counter(e.name for e in ks), {}


def snapshot():
    e = ps_entry()
    pts = {a: point(e, a) for a in APIS}
    trace = None
    if pts["cuLaunchKernel"]["api_id"] is not None:
        trace = stats_calls(TRACE_MAP, pts["cuLaunchKernel"]["api_id"])
    return counter(COUNT_MAP), pts, trace


def measure(check, label, fn, n=N, expect=None, extra_ok=True):
    try:
        fn()
        torch.cuda.synchronize()
        c0, p0, t0 = snapshot()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
        c1, p1, t1 = snapshot()
        k, names, api = profiled_kernels(prof, check)
    except Exception as e:  # noqa: BLE001
        result(check, False, f"{label}: {type(e).__name__}: {e}")
        return
    d = {a: p1[a]["calls"] - p0[a]["calls"] for a in APIS}
    dt = None if t0 is None or t1 is None else t1 - t0
    top = ", ".join(f"{nm[:48]} x{c}" for nm, c in names.most_common(3))
    ok = c1 - c0 == k and k > 0 and extra_ok and (expect is None or c1 - c0 == expect)
    result(check, ok,
           f"{label} x{n}: policy counted {c1 - c0} launches (ps: cuLaunchKernel "
           f"{d['cuLaunchKernel']}, cuLaunchKernelEx {d['cuLaunchKernelEx']}, cooperative "
           f"{d['cuLaunchCooperativeKernel']}, graph {d['cuGraphLaunch']}; trace.o "
           f"cuLaunchKernel {dt}), profiler {k} kernels; launch APIs {api}; kernels: {top}")


torch.manual_seed(0)
dev = "cuda"
# Warm the profiler itself up once (CUPTI initialisation) before anything is measured.
with profile(activities=[ProfilerActivity.CUDA]):
    torch.ones(16, device=dev).sum()
    torch.cuda.synchronize()

a32, b32 = torch.randn(1024, 1024, device=dev), torch.randn(1024, 1024, device=dev)
a16 = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
b16 = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
x16 = torch.randn(512, 1024, device=dev, dtype=torch.bfloat16)
w16 = torch.randn(4096, 1024, device=dev, dtype=torch.bfloat16)
bias16 = torch.randn(4096, device=dev, dtype=torch.bfloat16)
ba = torch.randn(8, 512, 512, device=dev, dtype=torch.bfloat16)
bb = torch.randn(8, 512, 512, device=dev, dtype=torch.bfloat16)

print("preferred:", prefer("cublas"))
measure("launches-cublas-fp32", "cuBLAS fp32 mm 1024^3", lambda: torch.mm(a32, b32))
measure("launches-cublas-bf16", "cuBLAS bf16 mm 2048^3", lambda: torch.mm(a16, b16))
measure("launches-cublas-bf16-bmm", "cuBLAS bf16 bmm 8x512^3", lambda: torch.bmm(ba, bb))
print("preferred:", prefer("cublaslt"))
measure("launches-cublaslt-fp32", "cuBLASLt fp32 mm 1024^3", lambda: torch.mm(a32, b32))
measure("launches-cublaslt-bf16-bias", "cuBLASLt bf16 linear+bias 512x1024x4096",
        lambda: torch.nn.functional.linear(x16, w16, bias16))
prefer("cublas")

model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(),
                            torch.nn.Linear(1024, 10)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
xm = torch.randn(256, 512, device=dev)
ym = torch.randint(0, 10, (256,), device=dev)


def train_step():
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(xm), ym)
    loss.backward()
    opt.step()


measure("launches-mlp-train", "MLP train step (fwd+bwd+AdamW)", train_step)

# Triton: a @triton.jit vector add launches through the shim.
try:
    import triton
    import triton.language as tl
except Exception as e:  # noqa: BLE001
    result("triton-launches-counted", None, f"triton import failed: {type(e).__name__}: {e}")
    sys.exit(0)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


tx = torch.randn(1 << 20, device=dev)
ty = torch.randn(1 << 20, device=dev)
tout = torch.empty_like(tx)


def triton_add():
    grid = (triton.cdiv(tx.numel(), 1024),)
    add_kernel[grid](tx, ty, tout, tx.numel(), BLOCK=1024)


print("triton", getattr(triton, "__version__", "?"))
try:
    triton_add()
    torch.cuda.synchronize()
    right = bool(torch.allclose(tout, tx + ty))
except Exception as e:  # noqa: BLE001
    result("triton-launches-counted", False, f"triton kernel under the shim: "
           f"{type(e).__name__}: {e}")
    sys.exit(0)
print(f"triton result correct: {right}")
measure("triton-launches-counted", f"Triton vector add (result correct: {right})", triton_add,
        n=50, expect=50, extra_ok=right)
