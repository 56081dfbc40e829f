"""The reciprocal-and-multiply divider (codesign/reciprocal.py) against the contract's division: every divisor the
output stage can see (1 ..= 2¹⁶) at the numerators where a truncating reciprocal errs first (just below and at each
multiple of the divisor, up to the largest non-saturating one), random ones, and whole outputs against host/q15.py
`divide_q15` on random and extreme accumulators."""

from __future__ import annotations

import numpy as np

from codesign.reciprocal import divide_by_reciprocal, quotient, reciprocal
from host.q15 import divide_q15


def test_every_divisor_at_the_multiples_where_a_reciprocal_errs_first():
    l_n = np.arange(1, (1 << 16) + 1, dtype=np.int64)
    m, shift = reciprocal(l_n)
    assert (m < (1 << 33) + 2).all() and shift.max() == 31 + 16
    rng = np.random.default_rng(5)
    for k in (1, 2, 3, 1000, 32767, 32768, *rng.integers(1, 32768, 12).tolist()):
        for n in (k * l_n - 1, k * l_n, k * l_n + l_n // 2):
            n = np.minimum(n, (1 << 31) - 1)
            assert (quotient(n, l_n) == n // l_n).all(), k
    n = rng.integers(0, 1 << 31, l_n.size)
    assert (quotient(n, l_n) == n // l_n).all()
    big = rng.integers(1 << 31, 1 << 47, l_n.size)  # saturating numerators: at least 32768 either way
    assert (quotient(big, l_n) == 32768).all() and (big // l_n >= 32768).all()


def test_whole_outputs_equal_the_contracts_division():
    rng = np.random.default_rng(6)
    for scale in (1, 1 << 10, 1 << 20, 1 << 30, 1 << 45):
        acc = rng.integers(-scale, scale + 1, (64, 48), dtype=np.int64)
        acc[0] = 0  # a row of zeros
        acc[1, 0] = -(1 << 45)  # extremes of the 48-bit accumulator
        l = rng.integers(1, 1 << 30, (64, 1), dtype=np.int64)
        l[2] = 1
        l[3] = (1 << 17) - 1  # normalises, rounding up to 2^16
        ours, theirs = divide_by_reciprocal(acc, l), divide_q15(acc, l)
        assert ours.same_bits(theirs), scale
