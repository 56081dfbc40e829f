"""The head engine's P·V feed as RTL: one vector of a P·V fold a cycle, from the softmax unit's P and the V memory
into the systolic array.

For a request (valid, the fold, the streamed index t) it asks the softmax unit for P's column t (`p_index`, the
tile's rows come back on `p_column`) and reads V's row key0 + t at the fold's C columns fold·C + j (C read ports:
element (key0 + t)·stride + fold·C + j, zero from column dim on), and presents them as the array's A column and B
row, with `first` on t = 0 and `last` on t = keys − 1. Every output is zero without a request, so the engine may OR
it with the QKᵀ feed's.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from codesign.rtl.mac import OPERAND_BITS


class PVFeed(wiring.Component):
    """P·V's vectors for an R×C array from a V memory of `depth` elements, `stride` (dim_max) elements a row."""

    def __init__(self, rows: int, cols: int, seq_max: int, dim_max: int, depth: int, folds_max: int) -> None:
        self.rows, self.cols, self.stride = rows, cols, dim_max
        super().__init__({
            "valid": In(1),
            "fold": In(range(folds_max + 1)),
            "t": In(range(max(dim_max, cols) + 1)),
            "key0": In(range(seq_max + cols + 1)),
            "keys": In(range(cols + 1)),
            "dim": In(range(dim_max + 1)),
            "p_index": Out(range(cols)),
            "p_column": In(signed(OPERAND_BITS)).array(rows),
            "v_addr": Out(range(depth)).array(cols),
            "v_data": In(signed(OPERAND_BITS)).array(cols),
            "a": Out(signed(OPERAND_BITS)).array(rows),
            "b": Out(signed(OPERAND_BITS)).array(cols),
            "array_valid": Out(1),
            "first": Out(1),
            "last": Out(1),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        with m.If(self.valid):
            m.d.comb += [self.p_index.eq(self.t), *(self.a[i].eq(self.p_column[i]) for i in range(self.rows))]
            for j in range(self.cols):
                column = self.fold * self.cols + j
                live = column < self.dim
                m.d.comb += [self.v_addr[j].eq(Mux(live, (self.key0 + self.t) * self.stride + column, 0)),
                             self.b[j].eq(Mux(live, self.v_data[j], 0))]
            m.d.comb += [self.array_valid.eq(1), self.first.eq(self.t == 0), self.last.eq(self.t == self.keys - 1)]
        return m
