"""Helpers shared by the workload scripts (issue #13): read gpubpf maps and `gpubpf ps` from
inside a process that runs under the shim, wait for handshake files, print result lines.

The CLI is `$GPUBPF` (run.sh sets it to DIST/gpubpf) and works on `$GPUBPF_HOME`; it is run
without LD_PRELOAD (the caller's shim has no business in it).

Result lines, read by run.sh:  RESULT <name> <1|0|SKIP> <detail>
Figures, copied by run.sh:     FIGURE <name>: <text>
"""
import json
import os
import random
import re
import statistics
import struct
import subprocess
import sys
import time

GPUBPF = os.environ.get("GPUBPF", "gpubpf")


def ab_summary(log, a, b, unit):
    """The `AB` lines of launch_ab.sh and step_ab.sh: `log` holds one `NAME rep=R TOGGLE …
    paired=X<unit> (P%)` line per run; prints, for sides `a` and `b`, the median of their
    runs' paired figures and every run's."""
    digits = 0 if unit == "ns" else 4
    runs = {a: [], b: []}
    pattern = re.compile(r"(\S+) rep=\d+ TOGGLE .* paired=([-+0-9.]+)" + re.escape(unit)
                         + r" \(([-+0-9.]+)%[^)]*\)")
    for line in open(log):
        m = pattern.match(line)
        if m and m.group(1) in runs:
            runs[m.group(1)].append((float(m.group(2)), float(m.group(3))))
    for k in (a, b):
        if not runs[k]:
            print(f"AB {k}: no toggle line")
            continue
        value = statistics.median(x for x, _ in runs[k])
        pc = statistics.median(y for _, y in runs[k])
        each = ", ".join(f"{x:+.{digits}f} {unit} ({y:+.2f}%)" for x, y in runs[k])
        print(f"AB {k}: paired median {value:+.{digits}f} {unit} ({pc:+.2f}%; runs {each})")


def block_kinds(n, order="abab"):
    """Which of `n` blocks run the policy: "abab" alternates (nothing, policy, nothing, …);
    "abba" pairs them (nothing, policy, policy, nothing, nothing, policy, …), so that an
    effect with the period of two blocks (the aa runs of 2026-12-07 read the blocks at odd
    positions 0.5–1 % faster with nothing toggled) falls on both kinds alike, and a linear
    drift cancels within each group of four."""
    if order == "abba":
        return [((b + 1) // 2) % 2 == 1 for b in range(n)]
    if order == "abab":
        return [b % 2 == 1 for b in range(n)]
    raise ValueError(f"block order: abab or abba, not {order!r}")


def dump_line(policy, durations):
    """One block of a STEP_DUMP file (step_toggle.py; read by step_noise.py's `read_dump`):
    its kind (`P` policies, `N` nothing), then its steps' durations in ms."""
    return ("P," if policy else "N,") + ",".join(f"{v:.4f}" for v in durations) + "\n"


def paired(values, kinds=None):
    """The in-process toggles' figure (launch_toggle.sh, step_toggle.py): the median over
    the policy's entries of each one's difference from the mean of its nearest entries
    without it on either side (`kinds`, default alternating: nothing attached at even
    indices, the policy at odd ones), which cancels the machine's slow drift. NaN without
    a policy entry."""
    diffs = paired_diffs(values, kinds)
    return statistics.median(diffs) if diffs else float("nan")


def paired_diffs(values, kinds=None):
    """Each policy entry's difference from the mean of the nearest entries without the
    policy before and after it (`kinds`: as in `paired`)."""
    if kinds is None:
        kinds = block_kinds(len(values))
    diffs = []
    for i, policy in enumerate(kinds):
        if not policy:
            continue
        before = next((j for j in range(i - 1, -1, -1) if not kinds[j]), None)
        after = next((j for j in range(i + 1, len(values)) if not kinds[j]), None)
        around = [values[j] for j in (before, after) if j is not None]
        if around:
            diffs.append(values[i] - sum(around) / len(around))
    return diffs


def paired_se(values, rounds=2000, kinds=None):
    """The standard error of `paired(values, kinds)`: the spread of the median over
    bootstrap resamples of the policy entries' differences from their neighbours (seeded,
    so a printed figure can be recomputed). NaN with fewer than two policy entries."""
    diffs = paired_diffs(values, kinds)
    if len(diffs) < 2:
        return float("nan")
    rng = random.Random(0)
    meds = [statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(rounds)]
    return statistics.stdev(meds)


def result(name, ok, detail):
    status = "SKIP" if ok is None else ("1" if ok else "0")
    detail = " ".join(str(detail).split())
    print(f"RESULT {name} {status} {detail}", flush=True)


def figure(name, text):
    print(f"FIGURE {name}: {text}", flush=True)


def cli(*args, timeout=30):
    """Runs `gpubpf -j ARGS`: the parsed JSON (None for empty output); raises on failure."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    r = subprocess.run([GPUBPF, "-j", *args], capture_output=True, text=True, env=env,
                       timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"gpubpf {' '.join(args)}: rc={r.returncode}: {r.stderr.strip()}")
    out = r.stdout.strip()
    return json.loads(out) if out else None


def _bytes_of(x):
    """A list of bytes as JSON gives them (ints or "0x12" strings), or None."""
    if not isinstance(x, list) or not x:
        return None
    try:
        return bytes(int(b, 16) if isinstance(b, str) else int(b) for b in x)
    except (TypeError, ValueError):
        return None


def _int(x):
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        return int(x)
    if isinstance(x, str):
        try:
            return int(x, 0)
        except ValueError:
            return None
    b = _bytes_of(x)
    if b is not None and len(b) <= 8:
        return int.from_bytes(b, "little")
    if isinstance(x, dict) and len(x) == 1:
        return _int(next(iter(x.values())))
    return None


def entries(data):
    """(key, value) pairs of a `maps dump` JSON answer, whichever form it takes: plain
    `{key, value}` with formatted numbers/objects, or bpftool-style raw bytes with a
    `formatted` sub-object."""
    if isinstance(data, dict):
        for k in ("entries", "elements", "data"):
            if isinstance(data.get(k), list):
                data = data[k]
                break
        else:
            data = [data]
    out = []
    for e in data if isinstance(data, list) else []:
        if not isinstance(e, dict):
            continue
        f = e.get("formatted")
        if isinstance(f, dict) and ("key" in f or "value" in f):
            k, v = f.get("key", e.get("key")), f.get("value", e.get("value"))
        else:
            k, v = e.get("key"), e.get("value")
        ki = _int(k)
        out.append((ki if ki is not None else k, v))
    return out


def dump(name):
    return entries(cli("maps", "dump", name))


def u64(v):
    n = _int(v)
    return 0 if n is None else n


USAGE_FIELDS = ("bytes", "allocs", "frees", "denied")


def usage(v):
    """struct usage {bytes, allocs, frees, denied} from a formatted object or raw bytes."""
    if isinstance(v, dict):
        return {k: u64(v.get(k, 0)) for k in USAGE_FIELDS}
    b = _bytes_of(v)
    if b is not None and len(b) >= 32:
        return dict(zip(USAGE_FIELDS, struct.unpack("<4Q", b[:32])))
    return {k: 0 for k in USAGE_FIELDS}


def usage_of(map_name, key):
    """The `usage` entry `key` of `map_name` (proc_usage by pid, user_usage by uid), or
    zeros when absent."""
    for k, v in dump(map_name):
        if k == key:
            return usage(v)
    return {k: 0 for k in USAGE_FIELDS}


def counter(map_name, key=0):
    for k, v in dump(map_name):
        if k == key:
            return u64(v)
    return 0


def stats_calls(map_name, api_id):
    """`calls` of trace.bpf.c's `stats` entry for an attach-point id."""
    for k, v in dump(map_name):
        if k == api_id:
            if isinstance(v, dict):
                return u64(v.get("calls", 0))
            b = _bytes_of(v)
            return struct.unpack("<Q", b[:8])[0] if b and len(b) >= 8 else 0
    return 0


def ps_entry(pid=None):
    """This process's entry of `gpubpf -j ps` (or pid's), or None (also when ps fails)."""
    pid = os.getpid() if pid is None else pid
    try:
        data = cli("ps")
    except Exception as e:  # noqa: BLE001
        log(f"gpubpf ps: {e}")
        return None
    if isinstance(data, dict):
        data = data.get("processes", [])
    for p in data or []:
        if isinstance(p, dict) and _int(p.get("pid")) == pid:
            return p
    return None


def point(entry, name):
    """{calls, denied, api_id} of attach point `name` in a ps entry (zeros if absent)."""
    for a in (entry or {}).get("attach_points", []) or []:
        if a.get("attach_point") == name:
            return {"calls": u64(a.get("calls", 0)), "denied": u64(a.get("denied", 0)),
                    "api_id": _int(a.get("api_id"))}
    return {"calls": 0, "denied": 0, "api_id": None}


def wait_file(path, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return True
        time.sleep(0.01)
    return False


def touch(path, text=""):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def oom_error():
    import torch
    return getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError


MiB = 1 << 20
GiB = 1 << 30


def log(*a):
    print(*a, file=sys.stderr, flush=True)
