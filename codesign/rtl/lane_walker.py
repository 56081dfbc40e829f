"""The softmax unit's lane walker as RTL: where each of its E lanes is in a pass's row-major walk.

A pass visits the elements of r rows of `width` elements each (the max pass k scores per row, the exp pass k keys
and α, the rescale pass d accumulators and l), E per cycle; lane u takes the element E·cycle + u, so a cycle's lanes
may straddle rows. The walker keeps each lane's (row, column) in registers: `restart` puts the lanes on the first E
elements of a walk of `width`, `advance` moves every lane E elements on, and `begin` shows the first E elements at
once (the `start` cycle of the max pass, which already issues). `live[u]` says lane u's element is inside the tile
(row < tile_rows); `last` says that an `advance` in this cycle issues the pass's last element.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


def walk(row, col, step: int, width):
    """The position `step` elements on from (row, col) in a row-major walk over rows of `width` elements (a lane of
    E walkers, or of D dividers, moving together): (next row, next column). One compare and subtract, no division
    of the position: col + step % width passes the row's end at most once when col < width."""
    col_on = col + step % width
    wrapped = col_on >= width
    return row + step // width + wrapped, Mux(wrapped, col_on - width, col_on)


class LaneWalker(wiring.Component):
    """The positions of `lanes` walkers over tiles of up to `rows` rows of up to `width_max` elements."""

    def __init__(self, lanes: int, rows: int, width_max: int) -> None:
        self.lanes = lanes
        super().__init__({
            "begin": In(1),
            "restart": In(1),
            "advance": In(1),
            "width": In(range(width_max + 1)),
            "tile_rows": In(range(rows + 1)),
            "row": Out(range(rows + lanes + 2)).array(lanes),
            "col": Out(range(width_max + 1)).array(lanes),
            "live": Out(1).array(lanes),
            "last": Out(1),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        E, width = self.lanes, self.width
        row_reg = [Signal.like(self.row[u], name=f"row_reg_{u}") for u in range(E)]
        col_reg = [Signal.like(self.col[u], name=f"col_reg_{u}") for u in range(E)]
        for u in range(E):
            m.d.comb += [self.row[u].eq(Mux(self.begin, u // width, row_reg[u])),
                         self.col[u].eq(Mux(self.begin, u % width, col_reg[u])),
                         self.live[u].eq(self.row[u] < self.tile_rows)]
        m.d.comb += self.last.eq(walk(self.row[0], self.col[0], E, width)[0] >= self.tile_rows)
        with m.If(self.restart):
            m.d.sync += [reg.eq(u // width) for u, reg in enumerate(row_reg)]
            m.d.sync += [reg.eq(u % width) for u, reg in enumerate(col_reg)]
        with m.Elif(self.advance):
            for u in range(E):
                row_on, col_on = walk(self.row[u], self.col[u], E, width)
                m.d.sync += [col_reg[u].eq(col_on), row_reg[u].eq(row_on)]
        return m
