"""The step toggle's spread by block length, from step_toggle.py's STEP_DUMP files (one
block per line, every timed step's duration in ms): splits each block into sub-blocks of
LEN steps (keeping their order), treats the resulting sequence as alternating blocks as
step_toggle.py does, and prints, per LEN, the paired figure and its standard error (over
the sub-blocks' means and over their medians) in % of the median step. On a dump where
nothing was toggled (STEP_POLICIES=none) every paired figure is the instrument's zero, and
the standard errors say how far a toggle with blocks of LEN steps can be trusted; on a
toggled dump only LEN = the block length (and its divisors that keep whole blocks'
alternation: none) is a real toggle, the rest mixes both kinds of step.

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
from common import paired, paired_se  # noqa: E402


def sub_blocks(blocks, n):
    out = []
    for b in blocks:
        out += [b[i:i + n] for i in range(0, len(b) - n + 1, n)]
    return out


def read_dump(path):
    """A STEP_DUMP file: one list of step durations (ms) per block."""
    with open(path) as f:
        return [[float(v) for v in line.split(",")] for line in f if line.strip()]


def profile(path, every):
    blocks = read_dump(path)
    none, pol = blocks[0::2], blocks[1::2]
    n = min(len(b) for b in blocks)
    diff = []
    print(f"{os.path.basename(path)}: by position in {len(blocks)} alternating blocks "
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
    if sys.argv[1] == "--profile":
        profile(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 3)
        return
    path = sys.argv[1]
    lens = [int(x) for x in sys.argv[2:]] or [300, 150, 75, 30, 10]
    blocks = read_dump(path)
    step = statistics.median(v for b in blocks for v in b)
    print(f"{os.path.basename(path)}: {len(blocks)} blocks of {len(blocks[0])} steps, "
          f"median step {step:.4f} ms")
    for n in lens:
        subs = sub_blocks(blocks, n)
        if len(subs) < 4:
            continue
        means = [statistics.fmean(s) for s in subs]
        meds = [statistics.median(s) for s in subs]
        print(f"  blocks of {n:4d} ({len(subs):5d}): means {100 * paired(means) / step:+.2f} % "
              f"±{100 * paired_se(means) / step:.2f}, medians "
              f"{100 * paired(meds) / step:+.2f} % ±{100 * paired_se(meds) / step:.2f}")


if __name__ == "__main__":
    main()
