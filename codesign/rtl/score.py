"""The score unit as RTL: an array accumulator acc (Σ q·k) to the score z in base-2 units, Q15.16.

z = clip(round_shift(acc · M, r), INT32): host/q15.py's score step, bit for bit. M (2¹⁴..2¹⁵−1) and r (1..62) are
runtime inputs: they depend on the tensors' exponents, so r drives a barrel shifter.

Pipeline (SCORE_LATENCY = 3 register stages, one operand per cycle):
  1. multiply: acc · M, signed(acc_bits + 15): |acc · M| ≤ 2^(acc_bits−1) · (2¹⁵−1) < 2^(acc_bits+14);
  2. round: add the half 2^(r−1) and shift right arithmetically by r (floor(x / 2^r + 1/2), round half up); the
     result still fits signed(acc_bits + 15), since r ≥ 1 halves the product at least;
  3. saturate to int32.
The arithmetic is exact for any acc, M and r the ports can carry (r = 0 passes the product through, as round_shift
does), so it equals host/q15.py wherever the model's int64 product does not overflow (every acc_bits ≤ 48).
"""

from __future__ import annotations

from amaranth.hdl import Const, Module, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from codesign.datapath import ACC_BITS_MAX, ACC_BITS_MIN, SCORE_LATENCY
from host.checks import check_int
from host.q15 import INT32_MAX, INT32_MIN, MULT_MAX, SHIFT_MAX

#: Port widths: M is a 15-bit mantissa, r fits 6 bits, z is Q15.16 in int32.
MULT_BITS = MULT_MAX.bit_length()
SHIFT_BITS = SHIFT_MAX.bit_length()
SCORE_BITS = 32


def check_score_unit(acc_bits: int) -> int:
    """acc_bits of a ScoreUnit; SpecError quoting it when it is outside codesign.datapath's range."""
    return check_int("acc_bits", acc_bits, ACC_BITS_MIN, ACC_BITS_MAX)


class ScoreUnit(wiring.Component):
    """z = clip(round_shift(acc · mult, shift), INT32) for a signed acc_bits-wide acc (16..64, codesign.datapath's
    range); latency SCORE_LATENCY, a new operand every cycle."""

    #: the register stages above; tests/rtl/test_rtl_units.py checks them against codesign.datapath.SCORE_LATENCY
    latency = SCORE_LATENCY

    def __new__(cls, *args, **kwargs):
        check_score_unit(*args, **kwargs)  # before the unit exists: a rejected one is no Elaboratable left unused
        return super().__new__(cls, src_loc_at=1)

    def __init__(self, acc_bits: int) -> None:
        self.acc_bits = check_score_unit(acc_bits)
        super().__init__({
            "acc": In(signed(self.acc_bits)),
            "mult": In(unsigned(MULT_BITS)),
            "shift": In(unsigned(SHIFT_BITS)),
            "valid_in": In(1),
            "z": Out(signed(SCORE_BITS)),
            "valid_out": Out(1),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        wide = self.acc_bits + MULT_BITS  # holds the product and the rounded value

        # stage 1: the multiply (r travels beside it)
        product = Signal(signed(wide))
        shift_1 = Signal(unsigned(SHIFT_BITS))
        valid_1 = Signal()
        m.d.sync += [product.eq(self.acc * self.mult), shift_1.eq(self.shift), valid_1.eq(self.valid_in)]

        # stage 2: add 2^(r-1) (a one-hot decode of r; none for r = 0), then the barrel shift right by r
        half = Signal(unsigned(1 << SHIFT_BITS))
        m.d.comb += half.eq((Const(1, 1) << shift_1) >> 1)
        rounded = Signal(signed(wide))
        valid_2 = Signal()
        m.d.sync += [rounded.eq((product + half) >> shift_1), valid_2.eq(valid_1)]

        # stage 3: saturate to int32
        with m.If(rounded > INT32_MAX):
            m.d.sync += self.z.eq(INT32_MAX)
        with m.Elif(rounded < INT32_MIN):
            m.d.sync += self.z.eq(INT32_MIN)
        with m.Else():
            m.d.sync += self.z.eq(rounded)
        m.d.sync += self.valid_out.eq(valid_2)
        return m
