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
    seq − b·bc) keys); `softmax(rows, keys, first_block)` is a step's softmax-unit cycles. Evaluated over the tiles
    as arrays: every tile but the last has the same height and every block but the last is full, so each figure is
    one of four numbers."""
    cache: dict = {}

    def figure(name: str, r: int, k: int) -> int:
        if (name, r, k) not in cache:
            if name == "qk":
                value = gemm(r, k, dim, dp.rows, dp.cols, dp.dataflow).cycles
            elif name == "pv":
                value = gemm(r, dim, k, dp.rows, dp.cols, dp.dataflow).cycles
            elif name == "me":  # the max and exp passes: a first block's softmax has nothing else
                value = softmax(r, k, True)
            else:  # "rs", the rescale pass
                value = softmax(r, k, False) - softmax(r, k, True)
            cache[name, r, k] = value
        return cache[name, r, k]

    v = np.asarray(visited, dtype=np.int64)
    tiles, blocks = len(v), -(-seq // bc)
    height, last_height, last_keys = int(rows[0]), int(rows[-1]), seq - (blocks - 1) * bc
    last_tile = np.arange(tiles) == tiles - 1

    heights: dict = {}

    def of(name: str, k: int):
        """The figure of a block of k keys per tile (a number when every tile has the same height)."""
        if (name, k) not in heights:
            ours, last = figure(name, height, k), figure(name, last_height, k)
            heights[name, k] = ours if ours == last else np.where(last_tile, last, ours)
        return heights[name, k]

    def per_tile(name: str, b: np.ndarray, where) -> np.ndarray:
        """The figure of block b of each tile where `where` (0 elsewhere)."""
        if blocks == 1:  # every block is the head's only one
            value = of(name, last_keys) + np.zeros(tiles, dtype=np.int64)
        else:
            value = np.where(b == blocks - 1, of(name, last_keys), of(name, bc))
        return value if where is True else np.where(where, value, 0)

    everywhere = True
    zero = np.zeros_like(v)
    last_pv = per_tile("pv", v - 1, everywhere)  # each tile's last P·V
    p_in = np.concatenate(([0], last_pv[:-1]))  # the P·V before a tile's first window
    q_out = np.append(per_tile("qk", zero, everywhere)[1:], 0)  # the QKᵀ after its last (the next tile's first)
    first = np.maximum(p_in + np.where(v > 1, per_tile("qk", zero + 1, v > 1), q_out),
                       per_tile("me", zero, everywhere))

    def later(b: np.ndarray, where: np.ndarray) -> np.ndarray:
        """W of block b ≥ 1 of each tile where `where` (0 elsewhere)."""
        before = per_tile("pv", b - 1, where)
        after = np.where(b + 1 < v, per_tile("qk", b + 1, where & (b + 1 < v)), q_out)
        w = np.maximum(before + after, np.maximum(per_tile("me", b, where), before) + per_tile("rs", b, where))
        return np.where(where, w, 0)

    # blocks 1..v−3 have full blocks before, at and after them; then blocks v − 2 and v − 1
    total = first + np.maximum(v - 3, 0) * later(zero + 1, v > 3) + later(v - 2, v > 2) + later(v - 1, v > 1)
    return Windows(total, first, figure("qk", height, min(bc, seq)), int(last_pv[-1]))
