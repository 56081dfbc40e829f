"""A softmax lane's rescale pass as RTL: one RescaleUnit product a cycle (RESCALE_LATENCY), of a row's output
accumulator or of its running sum l, by the row's α.

The rescale pass walks rows of d + 1 elements: columns 0..d−1 are the row's accumulators A, column d its l. On
`issue` the lane takes, at its walker position, the accumulator `acc` or the row's `l`, and the row's α;
RESCALE_LATENCY cycles later `valid` comes out with the position, whether it is l, and y = round_shift(x·α, 15), for
the softmax unit to write back where the row's max grew. `mismatch` as in score_lane.py.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from codesign.datapath import OUTPUT_ACC_BITS, RESCALE_LATENCY
from codesign.rtl.rescale import ALPHA_BITS, RescaleUnit
from codesign.rtl.tag import keep_for

#: The running sum l (< 2³⁰: Σ of at most 32768 probabilities below 2¹⁵).
L_BITS = 32


class RescaleLane(wiring.Component):
    """The rescale pass of one lane for heads up to dim_max, positions below (row_bound, col_bound)."""

    def __init__(self, dim_max: int, row_bound: int, col_bound: int) -> None:
        super().__init__({
            "issue": In(1),
            "row": In(range(row_bound)),
            "col": In(range(col_bound)),
            "dim": In(range(dim_max + 1)),
            "acc": In(signed(OUTPUT_ACC_BITS)),
            "l": In(unsigned(L_BITS)),
            "alpha": In(unsigned(ALPHA_BITS)),
            "valid": Out(1),
            "out_row": Out(range(row_bound)),
            "out_col": Out(range(col_bound)),
            "is_l": Out(1),
            "y": Out(signed(OUTPUT_ACC_BITS)),
            "mismatch": Out(1),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        m.submodules.rescale = rescale = RescaleUnit(OUTPUT_ACC_BITS, signed=True)
        is_l = self.col == self.dim
        m.d.comb += [rescale.x.eq(Mux(is_l, self.l, self.acc)), rescale.alpha.eq(self.alpha),
                     rescale.valid_in.eq(self.issue)]
        valid, row, col, last = keep_for(m, RESCALE_LATENCY, [self.issue, self.row, self.col, is_l], "tag")
        m.d.comb += [self.valid.eq(valid), self.out_row.eq(row), self.out_col.eq(col), self.is_l.eq(last),
                     self.y.eq(rescale.y), self.mismatch.eq(rescale.valid_out != valid)]
        return m
