"""A softmax lane's max pass as RTL: one array sum a cycle through a ScoreUnit (SCORE_LATENCY), and where its score
goes in the z buffer.

On `issue` the lane takes the array's sum at its walker position (row, col) and the score scale; SCORE_LATENCY
cycles later `valid` and the score z come out with the same (row, col) (`out_row`, `out_col`), for the softmax unit
to store (INT32_MIN where the causal mask hides the key). `mismatch` is high in a cycle where the score unit's
valid_out disagrees with the lane's own record of what it issued.
"""

from __future__ import annotations

from amaranth.hdl import Module, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from codesign.datapath import SCORE_LATENCY
from codesign.rtl.score import MULT_BITS, SCORE_BITS, SHIFT_BITS, ScoreUnit
from codesign.rtl.tag import keep_for


class ScoreLane(wiring.Component):
    """The max pass of one lane: acc_bits-wide sums, positions below (row_bound, col_bound)."""

    def __init__(self, acc_bits: int, row_bound: int, col_bound: int) -> None:
        self.acc_bits = acc_bits
        super().__init__({
            "issue": In(1),
            "row": In(range(row_bound)),
            "col": In(range(col_bound)),
            "sum": In(signed(acc_bits)),
            "mult": In(unsigned(MULT_BITS)),
            "shift": In(unsigned(SHIFT_BITS)),
            "valid": Out(1),
            "out_row": Out(range(row_bound)),
            "out_col": Out(range(col_bound)),
            "z": Out(signed(SCORE_BITS)),
            "mismatch": Out(1),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        m.submodules.score = score = ScoreUnit(self.acc_bits)
        m.d.comb += [score.acc.eq(self.sum), score.mult.eq(self.mult), score.shift.eq(self.shift),
                     score.valid_in.eq(self.issue)]
        valid, row, col = keep_for(m, SCORE_LATENCY, [self.issue, self.row, self.col], "tag")
        m.d.comb += [self.valid.eq(valid), self.out_row.eq(row), self.out_col.eq(col), self.z.eq(score.z),
                     self.mismatch.eq(score.valid_out != valid)]
        return m
