"""The serial schedule's compute as windows (codesign/cycles.py, and what the head engine's RTL runs,
codesign/rtl/head_control.py): the array and the softmax unit overlap one step apart, in lockstep.

A head's steps s = 0..S−1 are its (query tile, key block) pairs in order, tile after tile. Step s needs QKᵀ on the
array (qk_s cycles), then the softmax unit's max and exp passes (me_s) and, after a tile's first block, its rescale
pass (rs_s), then P·V on the array (pv_s). The rescale multiplies the output accumulators A, so it must come after
step s − 1's P·V has added its partials and before step s's adds. Both units run in windows:

    window −1   the array: QKᵀ of step 0                                               qk_0           (the fill)
    window s    the array: P·V of step s − 1, then QKᵀ of step s + 1;                  W_s
                the softmax unit: step s's max and exp passes, then its rescale once
                step s − 1's P·V has added its last partials
    window S    the array: P·V of step S − 1                                           pv_{S−1}       (the tail)

    W_s = max(pv_{s−1} + qk_{s+1},  max(me_s, pv_{s−1}) + rs_s)     (pv_{−1} = qk_S = 0; rs_s = 0 in a tile's first
                                                                     block, whose window has no such wait)

A window ends when both units are done, and the next begins in that cycle. The softmax unit reads step s's scores
from a copy of the array's sums taken as window s begins (a second score store), and writes step s's P while the
array reads step s − 1's (two P buffers). The divider bank takes a tile at the end of the window in which its last
P·V ran (the first window of the next tile's first step, or the tail), so tile t's divisions run beside the windows
from the next tile's second window up to and including the window after it (`divider_windows`).

Per tile this is a closed form: a tile of v blocks has its first window, v − 3 identical middle windows (full blocks
on both sides) and at most two more, each from the pv and qk of its neighbours (the previous tile's last block, the
next tile's first). A plain loop over every window (tests/rtl) checks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from codesign.datapath import Datapath
from codesign.gemm import gemm


@dataclass(frozen=True)
class Windows:
    """The serial schedule's compute: per tile the sum of its steps' windows and its first window; the fill
    (window −1, the first QKᵀ) and the tail (window S, the last P·V)."""

    per_tile: np.ndarray  # (tiles,) Σ W_s over the tile's steps
    first: np.ndarray  # (tiles,) W of the tile's first step
    fill: int
    tail: int

    def divider_windows(self, tile_time: np.ndarray) -> np.ndarray:
        """Per tile t ≥ 1, the cycles between the bank's take of tile t − 1 and of tile t when nothing holds: tile
        t's time without its first window, plus the next tile's first window (the tail after the last tile); entry 0
        is unused. `tile_time` is per_tile, stretched by DRAM where it stalls."""
        return tile_time - self.first + np.append(self.first[1:], self.tail)


def serial_windows(dp: Datapath, dim: int, seq: int, bc: int, rows: np.ndarray, visited: np.ndarray,
                   softmax: Callable[[int, int, bool], int]) -> Windows:
    """The windows of the tiles of `rows` rows visiting `visited` blocks of `bc` keys of seq (block b has min(bc,
    seq − b·bc) keys); `softmax(rows, keys, first_block)` is a step's softmax-unit cycles."""
    cache: dict = {}

    def once(key, make):
        if key not in cache:
            cache[key] = make()
        return cache[key]

    def qk(r: int, k: int) -> int:
        return once(("qk", r, k), lambda: gemm(r, k, dim, dp.rows, dp.cols, dp.dataflow).cycles)

    def pv(r: int, k: int) -> int:
        return once(("pv", r, k), lambda: gemm(r, dim, k, dp.rows, dp.cols, dp.dataflow).cycles)

    def me(r: int, k: int) -> int:  # the max and exp passes: a first block's softmax has nothing else
        return once(("me", r, k), lambda: softmax(r, k, True))

    def rs(r: int, k: int) -> int:  # the rescale pass
        return once(("rs", r, k), lambda: softmax(r, k, False) - softmax(r, k, True))

    def keys(b: int) -> int:
        return min(bc, seq - b * bc)

    def later(r: int, b: int, v: int, q_out: int) -> int:
        """W of block b ≥ 1 of a tile of r rows and v blocks (q_out: the next tile's first QKᵀ, or 0)."""
        prev = pv(r, keys(b - 1))
        after = qk(r, keys(b + 1)) if b + 1 < v else q_out
        return max(prev + after, max(me(r, keys(b)), prev) + rs(r, keys(b)))

    tiles = len(rows)
    r_of, v_of = [int(x) for x in rows], [int(x) for x in visited]
    per_tile = np.zeros(tiles, dtype=np.int64)
    first = np.zeros(tiles, dtype=np.int64)
    for t in range(tiles):
        r, v = r_of[t], v_of[t]
        p_in = pv(r_of[t - 1], keys(v_of[t - 1] - 1)) if t > 0 else 0
        q_out = qk(r_of[t + 1], keys(0)) if t + 1 < tiles else 0
        w0 = max(p_in + (qk(r, keys(1)) if v > 1 else q_out), me(r, keys(0)))
        total = w0 + sum(later(r, b, v, q_out) for b in range(max(1, v - 2), v))
        if v > 3:  # blocks 1..v−3: full blocks before, at and after them
            total += (v - 3) * later(r, 1, v, q_out)
        per_tile[t], first[t] = total, w0
    return Windows(per_tile, first, qk(r_of[0], keys(0)), pv(r_of[-1], keys(v_of[-1] - 1)))
