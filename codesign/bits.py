"""The datapath's int16 outputs, computed through its own steps: array GEMMs in accumulators of the chosen width,
the score unit, the softmax unit's block max, EXP2 and online rescale, the 48-bit output accumulators, the divider.

One head runs key block by key block (Bc = the array's columns, increasing key order, as docs/q15.md §7 requires);
within a block every query tile that reaches it is processed at once (tiles are independent on the datapath, so
batching them changes no bit). A causal head starts each block at the first tile that can see it: fully masked tiles
are skipped, as the datapath skips them. At an accumulator width that holds the contract's sums (`exact_width`) the
outputs are host/q15.py's at Bc = C, bit for bit; narrower accumulators wrap or saturate where the hardware would.

An accumulator adds one product per cycle in increasing reduction index in every dataflow (os in the cell; ws and is
down a column and then across row folds in the accumulator buffer, which has the same width), so a saturating sum
depends on that order and the model keeps it; a wrapping sum is the exact sum modulo 2^width, in any order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from codesign.datapath import OUTPUT_ACC_BITS, Datapath
from host.errors import SpecError
from host.q15 import INT32_MAX, INT32_MIN, Q15Params, divide_q15, exp2_q15, round_shift

#: Operand elements the saturating path copies per pass (two int64 arrays of this many: 32 MiB each).
SATURATE_CHUNK = 1 << 22


@dataclass(frozen=True)
class HeadBits:
    """One head through the datapath: the int16 output (N, d) in V's scale and what the arithmetic went through."""

    out: np.ndarray
    rescales: int  # output rows rescaled (α applied to l and d accumulators) over the head
    overflows: int  # accumulator results that left the width (wrapped or saturated); 0 when the width holds the sums


def exact_width(terms: int, max_product: int) -> int:
    """Bits of a signed accumulator that holds every sum of `terms` products of magnitude ≤ `max_product` exactly.

    The largest sum, terms·max_product, needs bit_length(terms·max_product) magnitude bits and a sign. For Q15
    operands max_product = 2³⁰ (only −32768·−32768 reaches it), so QKᵀ over d needs 32 + ⌊log₂ d⌋ bits (36 at d 16,
    38 at d 64, 39 at d 128, 40 at d 256) and P·V over a block of Bc keys, with p ≤ 32767, Bc·32767·32768 needs
    31 + ⌈log₂ Bc⌉ bits (36 at Bc 32)."""
    return (terms * max_product).bit_length() + 1


def accumulate(a: np.ndarray, b: np.ndarray, bits: int, overflow: str) -> tuple[np.ndarray, int]:
    """(M, K) @ (K, N) in signed `bits`-wide accumulators that add the products in increasing k; (int64 result,
    number of results that overflowed).

    The exact sum comes from a float64 matmul (every partial sum of Q15 products is an integer below 2⁵³, so it is
    exact in any order). Wrap: the exact sum modulo 2^bits. Saturate: a result whose Σ|products| stays in range is
    exact; the others are re-run in k order with a clamp after every add (vectorised over those results)."""
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.int64)
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if bits >= 63 or a.shape[-1] * _peak(a) * _peak(b) <= high:  # no partial sum can leave the range
        return exact, 0
    if overflow == "wrap":
        return _clamp(exact, bits, overflow)
    reach = np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))  # Σ|a·b|, exact
    risky = np.nonzero(reach > high)
    if not risky[0].size:
        return exact, 0
    total = np.empty(risky[0].size, dtype=np.int64)
    chunk = max(1, SATURATE_CHUNK // a.shape[-1])  # results per pass: bounds the (n, K) operand copies' memory
    for start in range(0, total.size, chunk):
        part = slice(start, start + chunk)
        rows = a[risky[0][part]].astype(np.int64)  # (n, K): the a row of each risky result
        cols = b[:, risky[1][part]].T.astype(np.int64)  # (n, K): its b column
        running = np.zeros(rows.shape[0], dtype=np.int64)
        for step in range(rows.shape[1]):
            running = np.clip(running + rows[:, step] * cols[:, step], low, high)
        total[part] = running
    result = exact.copy()
    result[risky] = total
    return result, int(np.count_nonzero(total != exact[risky]))


def _peak(x: np.ndarray) -> int:
    """max |x| as a Python int (0 for an empty array)."""
    return max(-int(x.min()), int(x.max())) if x.size else 0


def _clamp(values: np.ndarray, bits: int, overflow: str) -> tuple[np.ndarray, int]:
    """A register of `bits` signed bits receiving `values`: wrapped or saturated, with the count that overflowed."""
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if _peak(values) <= high:
        return values, 0
    fitted = ((values - low) & ((1 << bits) - 1)) + low if overflow == "wrap" else np.clip(values, low, high)
    return fitted, int(np.count_nonzero(fitted != values))


def run_head(q: np.ndarray, k: np.ndarray, v: np.ndarray, params: Q15Params, datapath: Datapath) -> HeadBits:
    """One head (q, k, v: (N, d) int16) on `datapath`; params.bc must be the array's width (datapath.cols)."""
    if params.bc != datapath.cols:
        raise SpecError(f"bc={params.bc} differs from the array's width {datapath.cols}; the datapath's key block "
                        "is its columns")
    seq, dim, rows = params.seq, params.dim, datapath.rows
    for name, array in (("q", q), ("k", k), ("v", v)):
        if array.dtype != np.int16 or array.shape != (seq, dim):
            raise SpecError(f"{name} is {array.dtype} {array.shape}; allowed: int16 ({seq}, {dim})")
    m = np.full((seq, 1), INT32_MIN, dtype=np.int64)  # running max of z per query row, Q15.16
    l = np.zeros((seq, 1), dtype=np.int64)  # running sum of p, Q15 units (< 2³⁰: never overflows its 32 bits)
    acc = np.zeros((seq, dim), dtype=np.int64)  # the 48-bit output accumulators A
    rescales = overflows = 0
    query = np.arange(seq)[:, None]
    for j0 in range(0, seq, datapath.cols):
        j1 = min(j0 + datapath.cols, seq)
        first = (j0 // rows) * rows if params.causal else 0  # first row of the first tile that sees key j0
        live = slice(first, seq)
        # QKᵀ on the array: (rows, d) @ (d, keys) per tile, the tiles side by side
        scores, spilled = accumulate(q[live], k[j0:j1].T, datapath.acc_bits, datapath.overflow)
        overflows += spilled
        # score unit: multiply by M, round-shift by r, saturate to 32 bits
        z = np.clip(round_shift(scores * params.score_mult, params.score_shift), INT32_MIN, INT32_MAX)
        keys = np.arange(j0, j1)[None, :]
        valid = keys <= query[live] if params.causal else np.ones(z.shape, dtype=bool)
        # softmax unit: block max, α for rows whose max grew, rescale of l and A, then the block's p
        seen = valid.any(axis=1, keepdims=True)
        block_max = np.where(valid, z, INT32_MIN).max(axis=1, keepdims=True)
        grow = seen & (block_max > m[live])
        alpha = np.where(grow, exp2_q15(np.where(grow, block_max - m[live], 0)), 0)
        rescales += int(np.count_nonzero(grow[:, 0] & (l[live, 0] > 0)))
        l[live] = np.where(grow, round_shift(l[live] * alpha, 15), l[live])
        acc[live] = np.where(grow, round_shift(acc[live] * alpha, 15), acc[live])
        m[live] = np.where(grow, block_max, m[live])
        p = np.where(valid, exp2_q15(np.where(valid, m[live] - z, 0)), 0)  # (rows, keys) Q15
        l[live] += p.sum(axis=1, keepdims=True)
        # P·V on the array, then added into the output accumulators
        partial, spilled = accumulate(p, v[j0:j1], datapath.acc_bits, datapath.overflow)
        overflows += spilled
        acc[live], spilled = _clamp(acc[live] + partial, OUTPUT_ACC_BITS, datapath.overflow)
        overflows += spilled
    return HeadBits(divide_q15(acc, l), rescales, overflows)
