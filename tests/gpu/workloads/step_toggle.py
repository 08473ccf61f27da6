"""The training-step overhead of quota + trace inside ONE process (issue #13 point 5, same
process, interleaved): the MLP of torch_step_bench.py runs BLOCKS blocks of STEPS steps
under the shim; quota.o and trace.o are loaded (`gpubpf load --wait`: applied in this
process before the block starts) before each block with policies and unloaded before each
block without that follows one with. The blocks come in ABBA order (nothing, policies,
policies, nothing, nothing, policies, …; STEP_ORDER=abab alternates them, as every run
before 2026-12-07 16:00 UTC did: with nothing toggled the odd blocks read 0.5–1 % faster
twice that day, an effect of the block's parity that alternation charges to the
policies). Prints the blocks and `TOGGLE step policies_ms=… none_ms=… added=…% paired=…ms
(…%)`: `added` compares the medians of the two kinds of block, `paired` is the median over
the policy blocks of each one's difference from the mean of its nearest blocks without
policies on either side, which cancels the machine's drifts.
`cpu=…` is the same paired figure over the main thread's CPU time per step
(`time.thread_time`: time the thread spent descheduled is not in it), a diagnostic only: the
forward pass and the optimizer launch from this thread, the backward pass from autograd's
own device thread, which it does not count (on the H100 of 2026-12-07 the main thread used
0.64 ms of a 1.0 ms step). The process's CPU time is no better: threads spinning in a
synchronisation make it follow the wall clock (1.07 of 1.09 ms, and as noisy).
`median_steps=…` is the same paired figure over each block's median step: the time between
consecutive steps' returns (no synchronisation inside a block; the step is bound by its
launches' CPU cost, so the GPU keeps up), which leaves out the steps that a burst of the
host's other work stretched (the block means of 2026-12-07 moved by 10-30 % between
neighbouring blocks, and the main thread's CPU time with them). `policed calls per step`
gives, per attach point, the calls the shim counted (`gpubpf ps`) over the first policy
block: what the policies' cost per call is multiplied by.

`±…` after a paired figure is its standard error (a bootstrap over the policy blocks' own
differences): the spread a repetition of the toggle would show.

Diagnostics: STEP_POLICIES="quota" or "trace" toggles one of the two alone, "none" loads
nothing at all (every block alike: the instrument's zero and spread), "count_launch" or
"pass_launch" (DIST's launch objects, on cuLaunchKernel) toggles a policy whose per-call
cost the launch interleave measures: what the step adds beyond 25 × that cost is the
policies' indirect cost (caches and TLB the step's own work then misses), and
STEP_TRACE_SET="emit_events=false" passes a `--set` to trace (both default to the check's
own setting: quota and trace, trace as built). STEP_BATCH and STEP_WIDTH size the MLP
(default 256 and 1024: a step bound by its launches' CPU cost, the check's worst case);
step_sizes.sh runs the toggle over larger models, where the GPU's work bounds the step.
STEP_DUMP=FILE writes every timed step's duration (ms), one block per line after its kind
(`P` policies, `N` nothing), for offline analysis of the machine's noise (step_noise.sh).

  step_toggle.py DIST [BLOCKS=16] [STEPS=300]   (GPUBPF_HOME: a scratch registry)"""
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import block_kinds, dump_line, paired, paired_se, point, ps_entry  # noqa: E402

dist = sys.argv[1]
blocks = int(sys.argv[2]) if len(sys.argv) > 2 else 16
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 300
G = os.path.join(dist, "gpubpf")
common.GPUBPF = G
env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
policies = os.environ.get("STEP_POLICIES", "quota trace").split()
if policies == ["none"]:
    policies = []
elif not policies or set(policies) - {"quota", "trace", "count_launch", "pass_launch"}:
    sys.exit(f"STEP_POLICIES: quota, trace, count_launch or pass_launch, or none, not {policies}")
dump = os.environ.get("STEP_DUMP")
order = os.environ.get("STEP_ORDER", "abba")
if order not in ("abab", "abba"):
    sys.exit(f"STEP_ORDER: abab or abba, not {order}")
kinds = block_kinds(blocks, order)
trace_set = [a for kv in os.environ.get("STEP_TRACE_SET", "").split() for a in ("--set", kv)]


def gpubpf(*args):
    subprocess.run([G, *args], check=True, env=env, stdout=subprocess.DEVNULL)


batch = int(os.environ.get("STEP_BATCH", "256"))
width = int(os.environ.get("STEP_WIDTH", "1024"))
torch.manual_seed(0)
layers = []
for i in range(3):
    layers += [torch.nn.Linear(width if i else 512, width), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(batch, 512, device="cuda")
y = torch.randint(0, 10, (batch,), device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


for _ in range(30):
    step()
torch.cuda.synchronize()
ms = []
cpu = []
med = []
# Policed calls per step at each attach point, counted by the shim (`gpubpf ps`) over the
# first policy block: what the policies' cost per call is multiplied by.
per_step = {}
durations = []
for b in range(blocks):
    was = b > 0 and kinds[b - 1]
    if kinds[b] and not was:
        if "quota" in policies:
            gpubpf("load", os.path.join(dist, "quota.o"), "--name", "quota",
                   "--set", "limit_bytes=8GiB", "--wait=30s")
        if "trace" in policies:
            gpubpf("load", os.path.join(dist, "trace.o"), "--name", "trace", *trace_set,
                   "--wait=30s")
        for name in {"count_launch", "pass_launch"} & set(policies):
            gpubpf("load", os.path.join(dist, f"{name}.o"), "--name", name, "--wait=30s")
    elif was and not kinds[b]:
        for name in policies:
            gpubpf("prog", "unload", name, "--wait=30s")
    # Untimed steps after a change: a changed chain starts on the interpreter and the
    # shim's watcher compiles it within milliseconds (docs/shim.md, "Native code as points
    # are called"); the block times native code.
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    before = ps_entry() if b == 1 else None
    if b == 1 and policies and before is None:
        # A process that found no registry when it started is policed only once its shim
        # has seen the registry appear (every 500 ms since 2026-12-07; never before), and
        # `load --wait` cannot wait for it: its first blocks would time nothing.
        # step_noise.sh's first version did that.
        sys.exit("step_toggle: this process is not in `gpubpf ps`: it runs unpoliced. Make "
                 "the registry before starting it (load and unload a scratch object in "
                 "GPUBPF_HOME, as run.sh does)")
    t0, c0 = time.perf_counter(), time.thread_time()
    marks = [t0]
    for _ in range(steps):
        loss = step()
        marks.append(time.perf_counter())
    torch.cuda.synchronize()
    ms.append(1000 * (time.perf_counter() - t0) / steps)
    cpu.append(1000 * (time.thread_time() - c0) / steps)
    durations.append([1000 * (b - a) for a, b in zip(marks, marks[1:])])
    med.append(statistics.median(durations[-1]))
    if before is not None:
        after = ps_entry()
        names = [a.get("attach_point") for a in (after or {}).get("attach_points", []) or []]
        per_step = {a: (point(after, a)["calls"] - point(before, a)["calls"]) / steps
                    for a in names}
        per_step = {a: n for a, n in sorted(per_step.items()) if n > 0}
if dump:
    with open(dump, "w") as f:
        for d, k in zip(durations, kinds):
            f.write(dump_line(k, d))
none = [v for v, k in zip(ms, kinds) if not k]
pol = [v for v, k in zip(ms, kinds) if k]
a, p = statistics.median(none), statistics.median(pol)
d, sd = paired(ms, kinds), paired_se(ms, kinds=kinds)
dc, ac = paired(cpu, kinds), statistics.median(v for v, k in zip(cpu, kinds) if not k)
dm, sm = paired(med, kinds), paired_se(med, kinds=kinds)
am = statistics.median(v for v, k in zip(med, kinds) if not k)
print("blocks " + ",".join(f"{v:.4f}" for v in ms) + f" loss={loss.item():.6f}")
print("cpu " + ",".join(f"{v:.4f}" for v in cpu))
print("median_steps " + ",".join(f"{v:.4f}" for v in med))
print("policed calls per step: " + (", ".join(f"{a} {n:.2f}" for a, n in per_step.items())
                                    or "unknown (gpubpf ps gave no entry)"))
print(f"TOGGLE step policies_ms={p:.4f} none_ms={a:.4f} added={100 * (p / a - 1):+.2f}% "
      f"paired={d:+.4f}ms ({100 * d / a:+.2f}% ±{100 * sd / a:.2f}) "
      f"cpu={dc:+.4f}ms ({100 * dc / ac:+.2f}% of {ac:.4f}) "
      f"median_steps={dm:+.4f}ms ({100 * dm / am:+.2f}% ±{100 * sm / am:.2f} of {am:.4f}) "
      f"(one process, {blocks} blocks of {steps} steps {'in ABBA order' if order == 'abba' else 'alternating'}; MLP batch {batch} "
      f"width {width}; toggling {'+'.join(policies) or 'nothing'}"
      f"{' with trace ' + ' '.join(trace_set[1::2]) if trace_set and 'trace' in policies else ''})")
