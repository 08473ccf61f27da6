"""The step toggle's spread by block length, from step_toggle.py's STEP_DUMP files (one
block per line, every timed step's duration in ms, after the block's kind since
2026-12-07: `P` policies, `N` nothing; a dump without kinds alternates them): splits each
block into sub-blocks of LEN steps (keeping their order), and prints, per LEN, the paired figure and its standard error (over
the sub-blocks' means and over their medians) in % of the median step. On a dump where
nothing was toggled (STEP_POLICIES=none) every paired figure is the instrument's zero, and
the standard errors say how far a toggle with blocks of LEN steps can be trusted. For LEN
equal to the block length the blocks keep their kinds (ABBA or alternating, as run); for a
shorter LEN the sub-blocks are taken as alternating, a toggle that never ran. So on a
toggled dump only LEN = the block length is a real toggle, the rest mixes both kinds of
step.

`--profile` reads a toggled dump by position instead: for each step of a block, the median
over the blocks with policies and over those without, and their difference; a cost that
decays through the block (a transient after each load: compilation, first touches) shows
as a falling difference, a steady cost per call as a flat one.

  step_noise.py DUMP [LEN…]   (default LEN: 300 150 75 30 10)
  step_noise.py --profile DUMP [EVERY=3]"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import block_kinds, paired, paired_se  # noqa: E402


def sub_blocks(blocks, n):
    out = []
    for b in blocks:
        out += [b[i:i + n] for i in range(0, len(b) - n + 1, n)]
    return out


def read_dump(path):
    """A STEP_DUMP file: one list of step durations (ms) per block, and whether each block
    ran the policies (from its `P`/`N` field; alternating in a dump without them)."""
    blocks, kinds = [], []
    with open(path) as f:
        for line in f:
            fields = line.strip().split(",")
            if fields == [""]:
                continue
            if fields[0] in ("P", "N"):
                kinds.append(fields[0] == "P")
                fields = fields[1:]
            blocks.append([float(v) for v in fields])
    if len(kinds) != len(blocks):
        kinds = block_kinds(len(blocks))
    return blocks, kinds


def profile(path, every):
    blocks, kinds = read_dump(path)
    none = [b for b, k in zip(blocks, kinds) if not k]
    pol = [b for b, k in zip(blocks, kinds) if k]
    n = min(len(b) for b in blocks)
    diff = []
    print(f"{os.path.basename(path)}: by position in {len(blocks)} blocks "
          f"(medians over {len(pol)} with policies, {len(none)} without)")
    for i in range(n):
        a = statistics.median(b[i] for b in none)
        p = statistics.median(b[i] for b in pol)
        diff.append(100 * (p / a - 1))
        if i % every == 0:
            print(f"  step {i:3d}: without {a:.4f} ms, with {p:.4f} ms, {diff[-1]:+.2f} %")
    k = max(1, n // 3)
    print(f"  first {k} steps {statistics.fmean(diff[:k]):+.2f} %, last {k} "
          f"{statistics.fmean(diff[-k:]):+.2f} %")


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        asked = len(sys.argv) > 1
        print(__doc__, file=sys.stdout if asked else sys.stderr)
        sys.exit(0 if asked else 2)
    if sys.argv[1] == "--profile":
        profile(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 3)
        return
    path = sys.argv[1]
    lens = [int(x) for x in sys.argv[2:]] or [300, 150, 75, 30, 10]
    blocks, kinds = read_dump(path)
    step = statistics.median(v for b in blocks for v in b)
    print(f"{os.path.basename(path)}: {len(blocks)} blocks of {len(blocks[0])} steps, "
          f"median step {step:.4f} ms")
    for n in lens:
        subs = sub_blocks(blocks, n)
        if len(subs) < 4:
            continue
        means = [statistics.fmean(s) for s in subs]
        meds = [statistics.median(s) for s in subs]
        k = kinds if len(subs) == len(blocks) else None
        print(f"  blocks of {n:4d} ({len(subs):5d}): means {100 * paired(means, k) / step:+.2f} % "
              f"±{100 * paired_se(means, kinds=k) / step:.2f}, medians "
              f"{100 * paired(meds, k) / step:+.2f} % ±{100 * paired_se(meds, kinds=k) / step:.2f}")


if __name__ == "__main__":
    main()
