"""Pages of one policed launch in a lackey trace (benches/pages/run.sh).

count.py TRACE MAPS MARKER_OFFSET POLICY: splits the trace at the instruction fetches of
`marker` (app.c calls it before each launch), takes the launch whose page count is the
median, and prints its code and data pages, each named by its mapping.
"""
import statistics
import sys


def mappings(path):
    out = []
    for line in open(path):
        parts = line.split()
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        name = parts[5] if len(parts) > 5 else "[anon]"
        out.append((lo, hi, name.rsplit("/", 1)[-1]))
    return out


def name_of(maps, page):
    a = page << 12
    for lo, hi, name in maps:
        if lo <= a < hi:
            return name
    return "?"


def main():
    trace, maps_path, marker_off, policy = sys.argv[1:5]
    maps = mappings(maps_path)
    app_base = min(lo for lo, _, n in maps if n == "app")
    marker = app_base + int(marker_off, 16)
    launches, cur = [], None
    for line in open(trace):
        kind = line[:2].strip()
        if kind not in ("I", "L", "S", "M"):
            continue
        try:
            addr = int(line[3:].split(",")[0], 16)
        except ValueError:
            continue
        if kind == "I" and addr == marker:
            cur = ({}, {})
            launches.append(cur)
            continue
        if cur is not None:
            side = cur[0] if kind == "I" else cur[1]
            side[addr >> 12] = side.get(addr >> 12, 0) + 1
    # The last split ends at the marker(-1) call after the loop: 20 launches.
    launches = launches[:-1] if len(launches) > 20 else launches
    if not launches:
        sys.exit("no launch found in the trace (was `marker` called?)")
    totals = [len(c) + len(d) for c, d in launches]
    med = statistics.median_low(totals)
    code, data = launches[totals.index(med)]
    print(f"PAGES {policy}: one policed launch touches {len(code)} code pages and "
          f"{len(data)} data pages (median launch of {len(launches)})")
    for label, pages in (("code", code), ("data", data)):
        by = {}
        for p in pages:
            by.setdefault(name_of(maps, p), []).append(p)
        for name, ps in sorted(by.items(), key=lambda kv: -len(kv[1])):
            print(f"  {label} {len(ps):2d} {name}: " + " ".join(hex(p << 12) for p in sorted(ps)))


main()
