"""The softmax unit's online rescale as RTL: y = round_shift(x · α, 15), host/q15.py's step that brings a row's
running sum l (32 bits, unsigned) and its output accumulators A (48 bits, signed) to a grown max.

α is a Q15 probability, 0..32767 (exp2_q15's cap), so |x · α| < |x| · 2¹⁵ and the rounded result fits x's width:
for signed x, round(−2^(w−1) · (1 − 2⁻¹⁵)) ≥ −2^(w−1) and round((2^(w−1) − 1) · (1 − 2⁻¹⁵)) ≤ 2^(w−1) − 1.
(α = 32768 would pass x through unchanged; larger α, outside the contract, wraps to the width.)

Pipeline (RESCALE_LATENCY = 2 register stages, one operand per cycle):
  1. multiply: x · α, width + 16 bits;
  2. add the half 2¹⁴ and shift right by 15 (a constant shift: wiring), keep the low `width` bits.
"""

from __future__ import annotations

from amaranth.hdl import Module, Shape, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from codesign.datapath import OUTPUT_ACC_BITS, RESCALE_LATENCY
from host.errors import SpecError
from host.checks import check_int
from host.q15 import Q15_ONE_CAP

ALPHA_BITS = 16
#: α is Q15: the product is shifted back by 15 bits.
ALPHA_SHIFT = Q15_ONE_CAP.bit_length()
#: The widest register rescaled is an output accumulator; there x · α + 2¹⁴ < 2⁶³ still holds, so host/q15.py's int64
#: arithmetic is exact over the unit's whole range.
WIDTH_MIN, WIDTH_MAX = 1, OUTPUT_ACC_BITS


def check_rescale_unit(width: int, signed: bool = True) -> tuple[int, bool]:
    """(width, signed) of a RescaleUnit; SpecError quoting the first bad one."""
    width = check_int("width", width, WIDTH_MIN, WIDTH_MAX)
    if not isinstance(signed, bool):
        raise SpecError(f"signed={signed!r} is not a bool; allowed: True, False")
    return width, signed


class RescaleUnit(wiring.Component):
    """y = round_shift(x · alpha, 15) for x of `width` bits (1..48), signed or unsigned; latency RESCALE_LATENCY,
    a new operand every cycle."""

    #: the register stages above; tests/rtl/test_rtl_units.py checks them against codesign.datapath.RESCALE_LATENCY
    latency = RESCALE_LATENCY

    def __new__(cls, *args, **kwargs):
        check_rescale_unit(*args, **kwargs)  # before the unit exists: a rejected one is no Elaboratable left unused
        return super().__new__(cls, src_loc_at=1)

    def __init__(self, width: int, signed: bool = True) -> None:
        self.width, self.signed = check_rescale_unit(width, signed)
        shape = Shape(self.width, signed)
        super().__init__({
            "x": In(shape),
            "alpha": In(unsigned(ALPHA_BITS)),
            "valid_in": In(1),
            "y": Out(shape),
            "valid_out": Out(1),
        })

    def elaborate(self, platform) -> Module:
        m = Module()

        # stage 1: the multiply
        product = Signal(Shape(self.width + ALPHA_BITS, self.signed))
        valid_1 = Signal()
        m.d.sync += [product.eq(self.x * self.alpha), valid_1.eq(self.valid_in)]

        # stage 2: the rounding shift by 15, truncated to the width (exact for α ≤ 32768)
        m.d.sync += [
            self.y.eq((product + (1 << (ALPHA_SHIFT - 1))) >> ALPHA_SHIFT),
            self.valid_out.eq(valid_1),
        ]
        return m
