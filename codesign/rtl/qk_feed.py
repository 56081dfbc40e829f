"""The head engine's QKᵀ feed as RTL: one vector of the scores' fold a cycle, from the Q and K memories into the
systolic array.

For a request (valid, the tile's row0 and rows, the block's key0 and keys, the streamed index t) it reads Q's
column t of the tile's rows (R read ports: element (row0 + i)·stride + t) and K's column t of the block's keys
(C read ports: (key0 + j)·stride + t), and presents them as the array's A column and B row, zero beyond the tile's
rows and the block's keys, with `first` on t = 0 and `last` on t = dim − 1. Every output is zero without a request,
so the engine may OR it with the P·V feed's.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from codesign.rtl.mac import OPERAND_BITS


class QKFeed(wiring.Component):
    """QKᵀ's vectors for an R×C array from memories of `depth` elements, `stride` (dim_max) elements a row."""

    def __init__(self, rows: int, cols: int, seq_max: int, dim_max: int, depth: int) -> None:
        self.rows, self.cols, self.stride = rows, cols, dim_max
        super().__init__({
            "valid": In(1),
            "row0": In(range(seq_max + rows + 1)),
            "key0": In(range(seq_max + cols + 1)),
            "t": In(range(max(dim_max, cols) + 1)),
            "tile_rows": In(range(rows + 1)),
            "keys": In(range(cols + 1)),
            "dim": In(range(dim_max + 1)),
            "q_addr": Out(range(depth)).array(rows),
            "q_data": In(signed(OPERAND_BITS)).array(rows),
            "k_addr": Out(range(depth)).array(cols),
            "k_data": In(signed(OPERAND_BITS)).array(cols),
            "a": Out(signed(OPERAND_BITS)).array(rows),
            "b": Out(signed(OPERAND_BITS)).array(cols),
            "array_valid": Out(1),
            "first": Out(1),
            "last": Out(1),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        with m.If(self.valid):
            for i in range(self.rows):
                live = i < self.tile_rows
                m.d.comb += [self.q_addr[i].eq(Mux(live, (self.row0 + i) * self.stride + self.t, 0)),
                             self.a[i].eq(Mux(live, self.q_data[i], 0))]
            for j in range(self.cols):
                live = j < self.keys
                m.d.comb += [self.k_addr[j].eq(Mux(live, (self.key0 + j) * self.stride + self.t, 0)),
                             self.b[j].eq(Mux(live, self.k_data[j], 0))]
            m.d.comb += [self.array_valid.eq(1), self.first.eq(self.t == 0), self.last.eq(self.t == self.dim - 1)]
        return m
