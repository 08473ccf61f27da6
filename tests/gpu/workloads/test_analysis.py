"""Unit tests of the GPU scripts' analysis (common.py's paired figures, step_noise.py's dump
reader), on synthetic data: run by tests/gpu_analysis.rs (`python3 -B -m unittest -q
test_analysis` in this directory), no GPU or torch needed."""
import os
import random
import tempfile
import unittest

from common import block_kinds, dump_line, paired, paired_diffs
from step_noise import read_dump


def steps(kinds, effect, parity, seed=1):
    """Block times: 1.0, a drift, noise, `parity` on every odd block, `effect` on the
    policy's blocks."""
    rng = random.Random(seed)
    return [1.0 + 1e-4 * i + rng.gauss(0, 0.002) + (parity if i % 2 else 0.0)
            + (effect if k else 0.0) for i, k in enumerate(kinds)]


class PairedFigures(unittest.TestCase):
    def test_orders(self):
        self.assertEqual(block_kinds(8, "abab"), [False, True] * 4)
        self.assertEqual(block_kinds(8, "abba"),
                         [False, True, True, False, False, True, True, False])
        with self.assertRaises(ValueError):
            block_kinds(4, "aabb")

    def test_alternation_is_the_default_and_unchanged(self):
        v = [1.0, 2.0, 1.5, 3.0, 2.0]
        self.assertEqual(paired_diffs(v), [2.0 - 1.25, 3.0 - 1.75])
        self.assertEqual(paired_diffs(v), paired_diffs(v, block_kinds(5, "abab")))

    def test_abba_compares_each_policy_block_with_the_nearest_blocks_without(self):
        v = [1.0, 5.0, 6.0, 3.0, 2.0]
        self.assertEqual(paired_diffs(v, block_kinds(5, "abba")), [5.0 - 2.0, 6.0 - 2.0])

    def test_abba_cancels_an_effect_of_the_blocks_parity(self):
        for parity in (-0.01, 0.01):
            abab = block_kinds(400, "abab")
            abba = block_kinds(400, "abba")
            self.assertAlmostEqual(paired(steps(abab, 0.02, parity), abab), 0.02 + parity,
                                   delta=0.001)
            self.assertAlmostEqual(paired(steps(abba, 0.02, parity), abba), 0.02, delta=0.001)
            self.assertAlmostEqual(paired(steps(abba, 0.0, parity), abba), 0.0, delta=0.001)


class Dumps(unittest.TestCase):
    def read(self, text):
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write(text)
        try:
            return read_dump(f.name)
        finally:
            os.unlink(f.name)

    def test_kinds_are_read_from_the_lines(self):
        blocks, kinds = self.read("N,1.0,1.1\nP,2.0,2.1\nP,3.0,3.1\nN,4.0,4.1\n")
        self.assertEqual(blocks, [[1.0, 1.1], [2.0, 2.1], [3.0, 3.1], [4.0, 4.1]])
        self.assertEqual(kinds, [False, True, True, False])

    def test_what_step_toggle_writes_is_read_back(self):
        kinds = block_kinds(4, "abba")
        durations = [[1.0, 1.25], [2.0, 2.5], [3.0, 3.125], [4.0, 4.0625]]
        text = "".join(dump_line(k, d) for k, d in zip(kinds, durations))
        self.assertEqual(self.read(text), (durations, kinds))

    def test_a_dump_without_kinds_alternates(self):
        blocks, kinds = self.read("1.0,1.1\n2.0,2.1\n\n3.0\n")
        self.assertEqual(blocks, [[1.0, 1.1], [2.0, 2.1], [3.0]])
        self.assertEqual(kinds, [False, True, False])


if __name__ == "__main__":
    unittest.main()
