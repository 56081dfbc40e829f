"""A reciprocal-and-multiply divider for the datapath's output stage, bit-exact with the contract's division
(host/q15.py `divide_q15`): one reciprocal per row, then d multiplies, instead of d divisions per row.

The contract divides n = |A'| + ⌊l'/2⌋ by l' (l normalised to at most 16 bits, A' shifted by g − s), rounds down,
restores the sign and saturates to int16. Every quotient that does not saturate has n < 32768 · l' ≤ 2³¹ (l' is at most
2¹⁶: rounding can carry it there). For a divisor 1 ≤ l' ≤ 2¹⁶ take ℓ = ⌈log₂ l'⌉ and the reciprocal m = ⌊2^(31+ℓ) / l'⌋
+ 1 (at most 33 bits). Then 2^(31+ℓ) < m · l' ≤ 2^(31+ℓ) + l' ≤ 2^(31+ℓ) + 2^ℓ, and by Granlund and Montgomery's theorem
("Division by invariant integers using multiplication", PLDI 1994, Theorem 4.2) ⌊n · m / 2^(31+ℓ)⌋ = ⌊n / l'⌋ for every
0 ≤ n < 2³¹. An n at or above 2³¹ has a quotient of at least 2³¹ / 2¹⁶ = 32768, which saturates: a comparator on n's bit
31 gives 32768 for it (the saturation check the iterative divider has too), so only n < 2³¹ reaches the 31 × 33-bit
multiplier, whose product is below 2⁶⁴.

`Datapath(divider="reciprocal")` runs it: codesign/bits.py divides by `divide_by_reciprocal`, codesign/divider_cycles.py
gives its cycles (a reciprocal a row on each lane, then a product a cycle) and codesign/energy.py its area and energy
from the table's primitives (a 33-bit subtract and its registers for the reciprocal, a 31 × 33-bit multiply for the
products). tests/codesign/test_codesign_reciprocal.py holds it to `divide_q15`.
"""

from __future__ import annotations

import numpy as np

from host.q15 import Q15Out, bit_length, output_shift, round_shift

#: Bits of the numerator the reciprocal is exact for (n < 2^N_BITS).
N_BITS = 31


def reciprocal(l_n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(m, shift) for each divisor 1 ≤ l_n ≤ 2¹⁶: m = ⌊2^(31+ℓ) / l_n⌋ + 1 with ℓ = ⌈log₂ l_n⌉, shift = 31 + ℓ."""
    l_n = np.asarray(l_n, dtype=np.int64)
    ceil_log = bit_length(l_n - 1)  # ⌈log₂ l⌉: 0 for 1, the bit length of l − 1 otherwise
    shift = N_BITS + ceil_log
    m = np.left_shift(np.int64(1), shift) // l_n + 1
    return m, shift


def quotient(n: np.ndarray, l_n: np.ndarray) -> np.ndarray:
    """⌊n / l_n⌋ for 0 ≤ n < 2³¹, by one multiply by the row's reciprocal and a shift (unsigned 64-bit); 32768 for
    n ≥ 2³¹, whose quotient saturates (it is at least 32768 for every l_n ≤ 2¹⁶)."""
    m, shift = reciprocal(l_n)
    n = np.asarray(n, dtype=np.int64)
    small = np.minimum(n, (1 << N_BITS) - 1).astype(np.uint64)
    q = np.right_shift(small * m.astype(np.uint64), shift.astype(np.uint64)).astype(np.int64)
    return np.where(n >= 1 << N_BITS, 32768, q)


def divide_by_reciprocal(acc: np.ndarray, l: np.ndarray) -> Q15Out:
    """host/q15.py `divide_q15` with its divisions done by `quotient`: the same row shift g, normalisation of l and
    shift of A, the magnitude ⌊(|A'| + ⌊l'/2⌋) / l'⌋ from the reciprocal, the sign restored, saturated to int16."""
    g = output_shift(acc, l)
    s = np.maximum(bit_length(l) - 16, 0)
    l_n = round_shift(l, s)
    t = s - g
    acc_n = np.where(t >= 0, round_shift(acc, np.maximum(t, 0)), np.left_shift(acc, np.maximum(-t, 0)))
    mag = quotient(np.abs(acc_n) + (l_n >> 1), np.broadcast_to(l_n, acc_n.shape))
    o = np.clip(np.where(acc_n < 0, -mag, mag), -32768, 32767).astype(np.int16)
    return Q15Out(o, g[..., 0].astype(np.uint8))
