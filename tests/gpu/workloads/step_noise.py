"""The step toggle's spread by block length, from step_toggle.py's STEP_DUMP files (one
block per line, every timed step's duration in ms): splits each block into sub-blocks of
LEN steps (keeping their order), treats the resulting sequence as alternating blocks as
step_toggle.py does, and prints, per LEN, the paired figure and its standard error (over
the sub-blocks' means and over their medians) in % of the median step. On a dump where
nothing was toggled (STEP_POLICIES=none) every paired figure is the instrument's zero, and
the standard errors say how far a toggle with blocks of LEN steps can be trusted; on a
toggled dump only LEN = the block length (and its divisors that keep whole blocks'
alternation: none) is a real toggle, the rest mixes both kinds of step.

  step_noise.py DUMP [LEN…]   (default LEN: 300 150 75 30 10)"""
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


def main():
    path = sys.argv[1]
    lens = [int(x) for x in sys.argv[2:]] or [300, 150, 75, 30, 10]
    with open(path) as f:
        blocks = [[float(v) for v in line.split(",")] for line in f if line.strip()]
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
