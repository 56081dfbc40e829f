"""A softmax lane's exp pass as RTL: one EXP2 a cycle (EXP_LATENCY), of a key's p or of its row's α.

The exp pass walks rows of k + 1 elements: columns 0..k−1 are the block's keys, column k the row's α. On `issue`
the lane reads, at its walker position, the key's score z and whether the mask lets the key through (`valid_key`),
and the row's figures: the new max (max_new), whether it grows, the block max and the running max. A key gives
p = exp2(max_new − z) (0 where masked), the α column α = exp2(block_max − run_max) (0 where the max does not grow,
where α is not used). EXP_LATENCY cycles later `valid` comes out with the position, whether it is α, and the value
`p` (already 0 where it is not kept). `mismatch` as in score_lane.py.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from codesign.datapath import EXP_LATENCY
from codesign.rtl.exp2 import DELTA_BITS, P_BITS, Exp2Unit
from codesign.rtl.score import SCORE_BITS
from codesign.rtl.tag import keep_for


class ExpLane(wiring.Component):
    """The exp pass of one lane over blocks of up to `cols` keys, positions below (row_bound, col_bound)."""

    def __init__(self, cols: int, row_bound: int, col_bound: int) -> None:
        super().__init__({
            "issue": In(1),
            "row": In(range(row_bound)),
            "col": In(range(col_bound)),
            "keys": In(range(cols + 1)),
            "valid_key": In(1),
            "z": In(signed(SCORE_BITS)),
            "max_new": In(signed(SCORE_BITS)),
            "grows": In(1),
            "block_max": In(signed(SCORE_BITS)),
            "run_max": In(signed(SCORE_BITS)),
            "valid": Out(1),
            "out_row": Out(range(row_bound)),
            "out_col": Out(range(col_bound)),
            "is_alpha": Out(1),
            "p": Out(unsigned(P_BITS)),
            "mismatch": Out(1),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        m.submodules.exp2 = exp = Exp2Unit()
        is_alpha = self.col == self.keys
        keep = Mux(is_alpha, self.grows, self.valid_key)
        delta_p = Mux(self.valid_key, self.max_new - self.z, 0)
        delta_alpha = Mux(self.grows, self.block_max - self.run_max, 0)
        m.d.comb += [exp.delta.eq(Mux(is_alpha, delta_alpha, delta_p)[:DELTA_BITS]), exp.valid_in.eq(self.issue)]
        valid, row, col, alpha, kept = keep_for(m, EXP_LATENCY, [self.issue, self.row, self.col, is_alpha, keep],
                                                "tag")
        m.d.comb += [self.valid.eq(valid), self.out_row.eq(row), self.out_col.eq(col), self.is_alpha.eq(alpha),
                     self.p.eq(Mux(kept, exp.p, 0)), self.mismatch.eq(exp.valid_out != valid)]
        return m
