"""Starts N copies of a command at once (`parallel`) or one after another (`serial`) and
reports their timings (issue #13 point 4: 200 processes starting under the shim).

  spawn.py parallel|serial N [--preload LIB] [--deadline S] -- CMD ARGS…

--preload sets LD_PRELOAD for the children only. Children still running S seconds (default
150) after the start are killed and reported, so that a summary is always printed. Each child's `startup k=v…` line (from
startup.c) is parsed. Prints one `SPAWN {json}` line: mode, n, ok (exit 0 with a startup
line), wall_s (first spawn to last exit), per-process wall medians/p90/max (spawn to exit, ms),
medians of the children's own init/ctx/alloc/total times, and the first error seen."""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    mode, n = sys.argv[1], int(sys.argv[2])
    rest = sys.argv[3:]
    preload, deadline = None, 150.0
    while rest[:1] in (["--preload"], ["--deadline"]):
        if rest[0] == "--preload":
            preload = rest[1]
        else:
            deadline = float(rest[1])
        rest = rest[2:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
    walls, inner, errors = [], {}, []
    ok = 0
    outs = {}  # pid -> the file holding the child's output (no pipe can fill up)
    tmp = tempfile.TemporaryDirectory(prefix="spawn-")

    def start():
        f = tempfile.TemporaryFile(dir=tmp.name)
        p = subprocess.Popen(rest, stdout=f, stderr=subprocess.STDOUT, env=env)
        outs[p.pid] = f
        return p

    def finish(p, t_spawn, t_end, status):
        nonlocal ok
        f = outs.pop(p.pid)
        f.seek(0)
        out = f.read().decode(errors="replace")
        f.close()
        walls.append(1000 * (t_end - t_spawn))
        fields = {}
        for line in out.splitlines():
            if line.startswith("startup "):
                for kv in line.split()[1:]:
                    k, _, v = kv.partition("=")
                    try:
                        fields[k] = float(v)
                    except ValueError:
                        pass
        if status == 0 and fields:
            ok += 1
            for k, v in fields.items():
                inner.setdefault(k, []).append(v)
        elif len(errors) < 3:
            errors.append(f"status {status}: {out.strip()[:300]}")

    t0 = time.monotonic()
    end = t0 + deadline
    if mode == "serial":
        for _ in range(n):
            if time.monotonic() >= end:
                errors.append("deadline reached before all were started")
                break
            ts = time.monotonic()
            p = start()
            try:
                p.wait(timeout=max(0.1, end - ts))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                errors.append(f"pid {p.pid} killed at the deadline")
            finish(p, ts, time.monotonic(), p.returncode)
    else:
        procs = {}
        for _ in range(n):
            p = start()
            procs[p.pid] = (p, time.monotonic())
        spawned = time.monotonic()
        killed = False
        while procs:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                if not killed and time.monotonic() >= end:
                    errors.insert(0, f"{len(procs)} still running at the deadline: killed")
                    for p, _ in procs.values():
                        p.kill()
                    killed = True
                time.sleep(0.002)
                continue
            t = time.monotonic()
            if pid in procs:
                p, ts = procs.pop(pid)
                p.returncode = os.waitstatus_to_exitcode(status)
                finish(p, ts, t, p.returncode)
        for p, ts in procs.values():  # not reaped (should not happen)
            errors.append(f"pid {p.pid} not reaped")
    wall = time.monotonic() - t0
    walls.sort()

    def med(v):
        return round(statistics.median(v), 3) if v else None

    summary = {
        "mode": mode, "n": n, "ok": ok, "wall_s": round(wall, 3),
        "proc_wall_ms_median": med(walls),
        "proc_wall_ms_p90": round(walls[int(0.9 * (len(walls) - 1))], 3) if walls else None,
        "proc_wall_ms_max": round(walls[-1], 3) if walls else None,
        "inner_ms_median": {k: med(v) for k, v in sorted(inner.items())},
        "errors": errors,
    }
    if mode != "serial":
        summary["spawn_s"] = round(spawned - t0, 3)
    print("SPAWN " + json.dumps(summary), flush=True)
    tmp.cleanup()


if __name__ == "__main__":
    main()
