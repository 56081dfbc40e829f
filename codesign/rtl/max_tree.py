"""The softmax unit's block max as RTL: one tile row's maximum over the first k of its C scores, a pipelined tree.

Level 0 is the row of the z buffer with the keys at and beyond k read as INT32_MIN (and padded with INT32_MIN to
C′, C rounded up to a power of two); each level above is a register of the pairwise maxima of the one below, so
level h holds the max of the first 2^h scores h cycles after they were stored. `level` says which level to read,
⌈log₂ k⌉ (`tree_level`): the lowest that covers k keys, so the max is ready ⌈log₂ k⌉ cycles after the last score,
the model's max-tree term. C′ − 1 comparators of 32 bits per row.
"""

from __future__ import annotations

from amaranth.hdl import Array, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from codesign.rtl.score import SCORE_BITS
from host.q15 import INT32_MIN


def tree_level(keys, cols: int):
    """⌈log₂ keys⌉ for a keys signal of 1..cols: the number of powers of two below it (the tree's read level)."""
    return sum((keys > (1 << level)) for level in range(ceil_log2(cols)))


class MaxTree(wiring.Component):
    """max(z[0..keys−1]) of a row of `cols` scores, read at tree level `level` = ⌈log₂ keys⌉."""

    def __init__(self, cols: int) -> None:
        self.cols = cols
        self.depth = ceil_log2(cols)
        super().__init__({
            "z": In(signed(SCORE_BITS)).array(cols),
            "keys": In(range(cols + 1)),
            "level": In(range(self.depth + 1)),
            "max": Out(signed(SCORE_BITS)),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        C, depth = self.cols, self.depth
        level = [Mux(j < self.keys, self.z[j], INT32_MIN) for j in range(C)] + [INT32_MIN] * ((1 << depth) - C)
        taps = [level[0]]
        for height in range(1, depth + 1):
            nxt = [Signal(signed(SCORE_BITS), name=f"max_{height}_{j}") for j in range(len(level) // 2)]
            m.d.sync += [reg.eq(Mux(level[2 * j] > level[2 * j + 1], level[2 * j], level[2 * j + 1]))
                         for j, reg in enumerate(nxt)]
            level = nxt
            taps.append(level[0])
        m.d.comb += self.max.eq(Array(taps)[self.level])
        return m
