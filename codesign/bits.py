"""The datapath's outputs (host.q15.Q15Out: int16 values and each row's output shift), computed through its own
steps: array GEMMs in accumulators of the chosen width, the score unit, the softmax unit's block max, EXP2 and online
rescale, the 48-bit output accumulators, the divider (the row's peak |A|, its shift g, the divisions, by the contract's
division or, on a reciprocal divider, by codesign/reciprocal.py's multiply).

One head runs key block by key block: blocks of the contract's Bc keys (params.bc, host.q15.BC = 64 unless a tool
asks for another), in increasing key order, as docs/q15.md §7 requires, whatever the array's R×C. Within a block
every query tile that reaches it is processed at once (tiles are independent on the datapath, so batching them
changes no bit). A causal head starts each block at the first tile that can see it: fully masked tiles are skipped,
as the datapath skips them. At an accumulator width that holds the contract's sums (`exact_width`) the outputs are
host/q15.py's at the same Bc, bit for bit, for every array shape; narrower accumulators wrap or saturate where the
hardware would.

How a block of Bc keys meets C columns (docs/codesign.md "Key block and array width"): QKᵀ puts keys on the
columns, so a block takes ⌈Bc/C⌉ column folds of C keys (the last one partly filled; with C > Bc one fold uses Bc
columns and the rest idle); each score sums d products over the reduction, whatever column it is on. P·V puts the
output's d columns on the array's columns and streams the block's Bc keys as its reduction: a partial is the sum
over the block's keys in increasing key order, in one accumulator of the array's width (os: in the cell, Bc
cycles; ws and is: down a column, then across row folds in the accumulator buffer, which has the same width, so
again in increasing key order), then added into the 48-bit output accumulator A once per block. So the order of
every saturating sum is the reduction index's increasing order, which the model keeps; a wrapping sum is the exact
sum modulo 2^width, in any order.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from threadpoolctl import ThreadpoolController

from codesign.datapath import OUTPUT_ACC_BITS, Datapath
from codesign.reciprocal import divide_by_reciprocal
from host.errors import SpecError
from host.q15 import INT32_MAX, INT32_MIN, MODEL_BC_MAX, Q15Out, Q15Params, divide_q15, exp2_q15, round_shift

#: Operand elements the saturating path copies per pass (two int64 arrays of this many: 32 MiB each).
SATURATE_CHUNK = 1 << 22
#: Query rows run_head takes through the key blocks at a time (rounded to whole tiles of the array's R rows): a
#: block's (rows, Bc) int64 temporaries then stay in the caches (reports/issue-32/asic/profile.md).
ROWS_PER_PASS = 128


@dataclass(frozen=True)
class HeadBits:
    """One head through the datapath: its output (values (N, d) int16, row shifts (N,) uint8) and what the arithmetic
    went through."""

    out: Q15Out
    rescales: int  # output rows rescaled (α applied to l and d accumulators) over the head
    overflows: int  # accumulator results that left the width (wrapped or saturated); 0 when the width holds the sums


def exact_width(terms: int, max_product: int) -> int:
    """Bits of a signed accumulator that holds every sum of `terms` products of magnitude ≤ `max_product` exactly.

    The largest sum, terms·max_product, needs bit_length(terms·max_product) magnitude bits and a sign. For Q15
    operands max_product = 2³⁰ (only −32768·−32768 reaches it), so QKᵀ over d needs 32 + ⌊log₂ d⌋ bits (36 at d 16,
    38 at d 64, 39 at d 128, 40 at d 256) and P·V over a block of Bc keys, with p ≤ 32767, Bc·32767·32768 needs
    31 + ⌈log₂ Bc⌉ bits (36 at Bc 32, 37 at the contract's Bc 64)."""
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


def run_head(q: np.ndarray, k: np.ndarray, v: np.ndarray, params: Q15Params, datapath: Datapath,
             row0: int = 0) -> HeadBits:
    """One head on `datapath`, in key blocks of params.bc (1..MODEL_BC_MAX) for any array: q (rows, d) int16, the
    contract's query rows row0 .. row0 + rows − 1 (a decode head's q_len queries are rows seq − q_len .. seq − 1:
    host.q15.Quantized.row0), against k, v (seq, d) int16. The rows are the array's M: tiles of R of them, so q_len
    rows fill ⌈q_len/R⌉ tiles (one query row of a decode step uses one of R array rows)."""
    if not 1 <= params.bc <= MODEL_BC_MAX:
        raise SpecError(f"bc={params.bc} is outside the datapath model's key blocks; allowed: 1..{MODEL_BC_MAX}")
    seq, dim, rows = params.seq, params.dim, datapath.rows
    for name, array, want in (("q", q, None), ("k", k, seq), ("v", v, seq)):
        if array.dtype != np.int16 or array.ndim != 2 or array.shape[1] != dim or (
                want is not None and array.shape[0] != want):
            raise SpecError(f"{name} is {array.dtype} {array.shape}; allowed: int16 "
                            f"({want if want is not None else 'rows'}, {dim})")
    nrows = q.shape[0]
    if nrows < 1 or row0 < 0 or row0 + nrows > seq:
        raise SpecError(f"query rows {row0}..{row0 + nrows - 1} are outside 0..{seq - 1} (seq={seq})")
    # whole tiles at a time (tiles are independent: the same bits), so that a pass's arrays stay in the caches; BLAS
    # on one thread: these GEMMs are small, and a second thread only waits (on a loaded machine, 4.7x longer)
    chunk = max(1, ROWS_PER_PASS // rows) * rows
    with _blas().limit(limits=1, user_api="blas"):
        parts = [_rows(q[start:start + chunk], k, v, params, datapath, row0 + start)
                 for start in range(0, nrows, chunk)]
    out = Q15Out(np.concatenate([part.out.o for part in parts]), np.concatenate([part.out.shift for part in parts]))
    return HeadBits(out, sum(part.rescales for part in parts), sum(part.overflows for part in parts))


@functools.lru_cache(maxsize=None)
def _blas() -> ThreadpoolController:
    return ThreadpoolController()


def _rows(q: np.ndarray, k: np.ndarray, v: np.ndarray, params: Q15Params, datapath: Datapath, row0: int) -> HeadBits:
    """run_head on some whole tiles of query rows (rows row0 .. row0 + len(q) − 1), checked by the caller."""
    seq, dim, rows, bc = params.seq, params.dim, datapath.rows, params.bc
    nrows = q.shape[0]
    m = np.full((nrows, 1), INT32_MIN, dtype=np.int64)  # running max of z per query row, Q15.16
    l = np.zeros((nrows, 1), dtype=np.int64)  # running sum of p, Q15 units (< 2³⁰: never overflows its 32 bits)
    acc = np.zeros((nrows, dim), dtype=np.int64)  # the 48-bit output accumulators A
    rescales = overflows = 0
    query = np.arange(row0, row0 + nrows)[:, None]  # (rows, 1) each row's position among the keys
    key_end = row0 + nrows if params.causal else seq  # keys past the last row's own position are masked for all
    for j0 in range(0, key_end, bc):
        j1 = min(j0 + bc, key_end)
        # first row of the first tile that sees key j0 (tiles of R rows from the head's first query)
        first = (max(j0 - row0, 0) // rows) * rows if params.causal else 0
        live = slice(first, nrows)
        # QKᵀ on the array: (rows, d) @ (d, keys) per tile, the tiles side by side, the keys in ⌈Bc/C⌉ column folds
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
        # P·V on the array (the block's keys as the reduction, in increasing order), then added into A
        partial, spilled = accumulate(p, v[j0:j1], datapath.acc_bits, datapath.overflow)
        overflows += spilled
        acc[live], spilled = _clamp(acc[live] + partial, OUTPUT_ACC_BITS, datapath.overflow)
        overflows += spilled
    # divider: each row's peak |A| and shift g, then its d divisions (host/q15.py's arithmetic, docs/q15.md §6), or
    # on reciprocal lanes one reciprocal a row and d multiplies (codesign/reciprocal.py: the same quotients)
    divide = divide_by_reciprocal if datapath.divider == "reciprocal" else divide_q15
    return HeadBits(divide(acc, l), rescales, overflows)
