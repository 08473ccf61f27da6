"""Turns the raw outputs of run.sh's measured sections into RESULT and FIGURE lines.

  summarize.py launch  WORK   empty-kernel launch loop: launch-{A,B,C}-{1,2,3}.txt,
                              launch-count.json (count_launch's counter after the C runs)
                              and launch-toggle.txt (launch_toggle.sh: the < 1 % goal)
  summarize.py step    WORK   PyTorch training step: step-{A,B,C}-{1,2,3}.txt and
                              step-toggle.txt (step_toggle.py: the < 1 % goal)
  summarize.py startup WORK   startup-{base,shim}.txt (spawn.py parallel), startup-serial-
                              {base,shim}-{1,2}.txt (spawn.py serial), startup-proc_usage.json
Configurations: A no shim, B shim with an empty registry, C shim with the policies."""
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import entries, figure, result, u64, usage  # noqa: E402

REPS = range(1, int(os.environ.get("WL_ROUNDS", "3")) + 1)


def kv_line(path, prefix):
    """The `k=v` fields of the first line of `path` starting with `prefix`, or None."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(prefix):
                    return dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
    except OSError:
        pass
    return None


def pct(x, base):
    return f"{100 * (x / base - 1):+.2f} %" if base else "n/a"


def med(v):
    return statistics.median(v) if v else None


def fmt(v, digits=1):
    return "[" + ", ".join(f"{x:.{digits}f}" for x in v) + "]"


def interleaved(work, stem, prefix, key):
    vals, extra, missing = {}, {}, []
    for c in "ABC":
        vals[c], extra[c] = [], []
        for r in REPS:
            kv = kv_line(os.path.join(work, f"{stem}-{c}-{r}.txt"), prefix)
            if kv and key in kv:
                vals[c].append(float(kv[key]))
                extra[c].append(kv)
            else:
                missing.append(f"{stem}-{c}-{r}")
    return vals, extra, missing


def launch(work):
    vals, extra, missing = interleaved(work, "launch", "launch_ns ", "median")
    m = {c: med(vals[c]) for c in "ABC"}
    if m["A"] and m["B"] and m["C"]:
        figure("launch-overhead",
               f"empty-kernel launch: no shim {m['A']:.1f} ns/launch; shim, no policy "
               f"{m['B']:.1f} ns ({pct(m['B'], m['A'])}); shim + count_launch {m['C']:.1f} ns "
               f"({pct(m['C'], m['A'])}) [medians of {len(REPS)} interleaved processes x 3 loops of "
               f"200000; per process A {fmt(vals['A'])} B {fmt(vals['B'])} C {fmt(vals['C'])}]")
    result("launch-overhead-measured", not missing,
           f"missing {missing}" if missing
           else f"{3 * len(REPS)} runs ({len(REPS)} x no shim / shim / shim+count_launch)")
    interleaved_goal("launch-overhead-under-1pct", os.path.join(work, "launch-interleave.txt"))
    made = sum(int(kv.get("launches", 0)) for kv in extra["C"])
    try:
        with open(os.path.join(work, "launch-count.json")) as f:
            counted = sum(u64(v) for _, v in entries(json.load(f)))
    except (OSError, ValueError) as e:
        counted = f"unreadable ({e})"
    result("launch-count-exact", counted == made and made > 0,
           f"count_launch counted {counted}, the {len(extra['C'])} runs with it made {made}")


def step(work):
    vals, extra, missing = interleaved(work, "step", "step_ms ", "median")
    m = {c: med(vals[c]) for c in "ABC"}
    losses = sorted({kv.get("loss") for c in "ABC" for kv in extra[c]})
    if m["A"] and m["B"] and m["C"]:
        figure("torch-step-overhead",
               f"MLP training step: no shim {m['A']:.4f} ms/step; shim, no policy {m['B']:.4f} ms "
               f"({pct(m['B'], m['A'])}); shim + quota + trace {m['C']:.4f} ms "
               f"({pct(m['C'], m['A'])}) [medians of {len(REPS)} interleaved processes x 3 blocks "
               f"of 500 steps; per process A {fmt(vals['A'], 4)} B {fmt(vals['B'], 4)} C {fmt(vals['C'], 4)}]")
    result("torch-step-overhead-measured", not missing,
           (f"missing {missing}" if missing
            else f"{3 * len(REPS)} runs ({len(REPS)} x no shim / shim / shim+quota+trace)")
           + f"; final losses {losses}")
    across = (f"; across processes C vs A {pct(m['C'], m['A'])}, which vary by as much"
              if m["A"] and m["C"] else "")
    under_1pct("torch-step-overhead-under-1pct", os.path.join(work, "step-toggle.txt"),
               "quota+trace", "step", across)
    derived_step(os.path.join(work, "step-toggle.txt"),
                 os.path.join(work, "launch-interleave.txt"))


def derived_step(toggle, interleave):
    """What quota + trace should add to a step by their per-call cost: the step's policed
    calls (step_toggle.py's `policed calls per step`, counted by the shim) times what a
    traced launch adds in launch_interleave.sh (one process, batches alternating: steady
    where the step's toggle is not), over the step without policies: with a reader draining
    trace's ring (`trace+reader`: every launch writes its event, as in the toggle's blocks,
    whose fresh ring never fills) where the run has it, else with the ring full (no event
    written: a lower bound). Only cuLaunchKernel
    has a per-call figure; another point called at least once per 20 steps leaves the
    figure out."""
    try:
        with open(toggle) as f:
            text = f.read()
        with open(interleave) as f:
            goals = f.read()
    except OSError:
        return
    calls = re.search(r"^policed calls per step: (.*)$", text, re.M)
    base = re.search(r"none_ms=([0-9.]+)", text)
    ns = re.search(r"^GOAL shim-trace\+reader: added ([-+0-9.]+) ns", goals, re.M)
    how = "its ring drained by a reader: every launch writes its event"
    if not ns:
        ns = re.search(r"^GOAL shim-trace: added ([-+0-9.]+) ns", goals, re.M)
        how = "its ring full: no event written"
    if not (calls and base and ns):
        return
    per_point = {}
    for part in calls.group(1).split(","):
        name, _, n = part.strip().rpartition(" ")
        try:
            per_point[name] = float(n)
        except ValueError:
            return
    # The block's closing synchronisation is one cuCtxSynchronize per block, not per step.
    others = {k: v for k, v in per_point.items() if k != "cuLaunchKernel" and v >= 0.05}
    if others:
        return
    n = per_point.get("cuLaunchKernel", 0.0)
    added_us = n * float(ns.group(1)) / 1000
    step_ms = float(base.group(1))
    figure("torch-step-derived",
           f"quota+trace by their per-call cost: {n:.2f} policed cuLaunchKernel per step x "
           f"{float(ns.group(1)):+.1f} ns per traced launch (launch_interleave.sh, trace.o with "
           f"{how}) = "
           f"{added_us:+.2f} us, {100 * added_us / 1000 / step_ms:+.2f} % of a {step_ms:.4f} ms "
           f"step (quota's points: no call in a step)")


def under_1pct(name, toggle, what, per, across):
    """The goal's check, from a toggle in one process (launch_toggle.sh, step_toggle.py):
    its `paired` figure, each policy loop against its neighbours without the policy."""
    line = None
    try:
        with open(toggle) as f:
            line = next((x for x in f if x.startswith("TOGGLE")), None)
    except OSError:
        pass
    m = re.search(r"paired=([-+0-9.]+)(ns|ms) \(([-+0-9.]+)%(?: ±([0-9.]+))?\)", line or "")
    if not m:
        result(name, False, f"no paired figure in {os.path.basename(toggle)}{across}")
        return
    added = float(m.group(3))
    loops = re.search(r"\(one process, ([^;)]*)", line)
    cpu = re.search(r" cpu=([-+0-9.]+)ms \(([-+0-9.]+)%", line)
    cpu = f"; main thread's CPU time per {per} {cpu.group(2)} %" if cpu else ""
    steps = re.search(r" median_steps=([-+0-9.]+)ms \(([-+0-9.]+)%", line)
    cpu += f"; blocks' median {per} {steps.group(2)} %" if steps else ""
    result(name, added < 1.0,
           f"{what} adds {added:+.2f} %{f' ± {m.group(4)} % (standard error)' if m.group(4) else ''} "
           f"per {per} ({m.group(1)} {m.group(2)}, one process, "
           f"{loops.group(1) if loops else 'alternating'}; goal < 1 %){cpu}{across}")


def interleaved_goal(name, path):
    """The launch goal's check, from launch_interleave.sh: in one process, batches through
    the driver's own cuLaunchKernel and the shim's alternate; its GOAL lines give the
    median per-pair difference without the shim (the instrument's zero), under the shim
    with nothing attached and with count_launch.o."""
    goals = {}
    try:
        with open(path) as f:
            for line in f:
                m = re.match(r"GOAL (\S+): added ([-+0-9.]+) ns per launch \(([-+0-9.]+)% of", line)
                if m:
                    goals[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    except OSError:
        pass
    if "shim-count_launch" not in goals:
        result(name, False, f"no count_launch figure in {os.path.basename(path)}")
        return
    ns, pc = goals["shim-count_launch"]
    rest = "; ".join(f"{k} {v[0]:+.1f} ns ({v[1]:+.2f} %)" for k, v in goals.items()
                     if k != "shim-count_launch")
    result(name, pc < 1.0,
           f"count_launch adds {pc:+.2f} % per launch ({ns:+.1f} ns; one process, batches "
           f"through the driver's own cuLaunchKernel and the shim's alternating; {rest}; "
           f"goal < 1 %)")


def spawn_summary(path):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("SPAWN "):
                    return json.loads(line[6:])
    except (OSError, ValueError):
        pass
    return None


def startup(work):
    p = os.path.join
    base, shim = spawn_summary(p(work, "startup-base.txt")), spawn_summary(p(work, "startup-shim.txt"))
    serial = {k: [spawn_summary(p(work, f"startup-serial-{k}-{r}.txt")) for r in (1, 2)]
              for k in ("base", "shim")}
    n = (shim or {}).get("n", 200)
    ok = bool(shim) and shim["ok"] == n and bool(base) and base["ok"] == n
    result("startup-200-all-finish", ok,
           f"shim (quota+trace): {shim and shim['ok']}/{n} finished, no shim: "
           f"{base and base['ok']}/{n}; errors {(shim or {}).get('errors')} "
           f"{(base or {}).get('errors')}")
    if base and shim:
        ok = shim["wall_s"] <= 1.5 * base["wall_s"] + 2.0
        result("startup-200-not-serialised", ok,
               f"{n} at once: {shim['wall_s']} s with the shim vs {base['wall_s']} s without "
               f"(limit 1.5x + 2 s)")
    else:
        result("startup-200-not-serialised", False, "missing spawn output")

    def serial_med(k):
        v = [s["proc_wall_ms_median"] for s in serial[k] if s and s.get("proc_wall_ms_median")]
        return round(med(v), 2) if v else None

    sb, ss = serial_med("base"), serial_med("shim")
    inner = lambda s, k: (s or {}).get("inner_ms_median", {}).get(k)  # noqa: E731
    if base and shim:
        added = f"{ss - sb:+.1f} ms" if sb is not None and ss is not None else "n/a"
        figure("startup",
               f"{n} processes (cuInit + cuDeviceTotalMem, no context: 200 contexts do not fit "
               f"on one GPU) started at once: no shim {base['wall_s']} s wall (per process median "
               f"{base['proc_wall_ms_median']} ms, p90 {base['proc_wall_ms_p90']} ms), shim with "
               f"quota+trace {shim['wall_s']} s (median {shim['proc_wall_ms_median']} ms, p90 "
               f"{shim['proc_wall_ms_p90']} ms); one at a time (with a context and a 1 MiB "
               f"allocation): {sb} ms vs {ss} ms per process "
               f"({added} start-up cost); in-process median cuInit {inner(base, 'init_ms')} vs "
               f"{inner(shim, 'init_ms')} ms, total {inner(base, 'total_ms')} vs "
               f"{inner(shim, 'total_ms')} ms")
    # One at a time without a context (alternating rounds): the shim's initialisation alone.
    noctx = {k: [spawn_summary(p(work, f"startup-noctx-{k}-{r}.txt")) for r in (1, 2, 3, 4)]
             for k in ("base", "shim")}

    def noctx_med(k, field):
        v = [s["inner_ms_median"][field] for s in noctx[k]
             if s and s.get("inner_ms_median", {}).get(field) is not None]
        return round(med(v), 3) if v else None

    def noctx_wall(k):
        v = [s["proc_wall_ms_median"] for s in noctx[k] if s and s.get("proc_wall_ms_median")]
        return round(med(v), 2) if v else None

    nb, ns = noctx_med("base", "total_ms"), noctx_med("shim", "total_ms")
    wb, ws = noctx_wall("base"), noctx_wall("shim")
    if None not in (nb, ns, wb, ws):
        figure("startup-noctx",
               f"one at a time without a context (cuInit + cuDeviceTotalMem, 4 alternating "
               f"rounds of 10): in-process {nb} ms vs {ns} ms with the shim (quota+trace) "
               f"({ns - nb:+.2f} ms: the shim's initialisation on the first driver call); "
               f"spawn to exit {wb} vs {ws} ms ({ws - wb:+.2f} ms)")
    # The processes started at once make one policed call each (cuDeviceTotalMem, counted by
    # count_launch.o attached there); the ones started one at a time allocate and free under
    # quota.
    at_once = (shim or {}).get("ok", 0)
    one_by_one = sum((s or {}).get("ok", 0) for s in serial["shim"])
    try:
        with open(p(work, "startup-calls.json")) as f:
            counted = sum(u64(v) for _, v in entries(json.load(f)))
        with open(p(work, "startup-proc_usage.json")) as f:
            us = [usage(v) for _, v in entries(json.load(f))]
        allocs, frees = sum(u["allocs"] for u in us), sum(u["frees"] for u in us)
        held = sum(u["bytes"] for u in us)
        ok = (counted == at_once and at_once > 0 and allocs == one_by_one
              and frees == one_by_one and held == 0 and one_by_one > 0)
        detail = (f"{counted} policed cuDeviceTotalMem calls from {at_once} processes started at "
                  f"once; proc_usage: {allocs} allocations, {frees} frees, {held} bytes held from "
                  f"{one_by_one} processes started one at a time")
    except (OSError, ValueError, TypeError) as e:
        ok, detail = False, f"counters unreadable: {e}"
    result("startup-200-policed", ok, detail)


if __name__ == "__main__":
    {"launch": launch, "step": step, "startup": startup}[sys.argv[1]](sys.argv[2])
