"""The output-stationary Q15 multiply-accumulate cell of the systolic array (codesign/rtl/array.py), as RTL.

One cell holds one output element C[i][j]. Each cycle with `valid_in` it adds a·b (int16 × int16, at most 2³⁰ in
magnitude) to its signed `acc_bits`-wide accumulator, which `first_in` clears first, and then wraps (two's complement)
or saturates (clamps to the range) after EVERY add: exactly codesign/bits.accumulate for one result, products added in
increasing reduction index. a and the flags leave to the right and b leaves downwards through one register each.

`result` is a shadow register: in a cycle with `last_in` it takes the accumulator's value after that cycle (the sum
including this cycle's product when `valid_in` is also set, the accumulator as it stands otherwise) and holds it until
the next `last_in`, so the accumulator may start the next fold while the previous fold's sum is being read.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from codesign.datapath import ACC_BITS_MAX, ACC_BITS_MIN, OVERFLOWS
from host.errors import SpecError
from host.checks import check_int

#: Q15 operands of the array.
OPERAND_BITS = 16
#: Bits of a signed product of two int16s: −32768·−32768 = 2³⁰ needs 31 magnitude bits and a sign.
PRODUCT_BITS = 2 * OPERAND_BITS


def check_overflow(overflow: object) -> str:
    """`overflow` if it is one of OVERFLOWS; SpecError quoting it otherwise."""
    if overflow not in OVERFLOWS:
        raise SpecError(f"overflow={overflow!r} is unknown; allowed: {', '.join(OVERFLOWS)}")
    return overflow


def check_mac_cell(acc_bits: int = 40, overflow: str = "wrap") -> tuple[int, str]:
    """(acc_bits, overflow) of a MacCell; SpecError quoting the first bad one."""
    return check_int("acc_bits", acc_bits, ACC_BITS_MIN, ACC_BITS_MAX), check_overflow(overflow)


class MacCell(wiring.Component):
    """One MAC cell: acc_bits 16..64, overflow "wrap" or "saturate" (codesign.datapath's ranges)."""

    def __new__(cls, *args, **kwargs):
        check_mac_cell(*args, **kwargs)  # before the cell exists: a rejected one is no Elaboratable left unused
        return super().__new__(cls, src_loc_at=1)

    def __init__(self, acc_bits: int = 40, overflow: str = "wrap") -> None:
        self.acc_bits, self.overflow = check_mac_cell(acc_bits, overflow)
        super().__init__({
            "a_in": In(signed(OPERAND_BITS)),
            "b_in": In(signed(OPERAND_BITS)),
            "valid_in": In(1),
            "first_in": In(1),
            "last_in": In(1),
            "a_out": Out(signed(OPERAND_BITS)),
            "b_out": Out(signed(OPERAND_BITS)),
            "valid_out": Out(1),
            "first_out": Out(1),
            "last_out": Out(1),
            "result": Out(signed(self.acc_bits)),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        bits = self.acc_bits
        low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

        acc = Signal(signed(bits))
        product = Signal(signed(PRODUCT_BITS))
        # one bit above the wider operand, so the sum itself never overflows before the wrap or clamp
        total = Signal(signed(max(bits, PRODUCT_BITS) + 1))
        summed = Signal(signed(bits))  # the sum after the wrap or clamp
        acc_next = Signal(signed(bits))  # the accumulator's value after this cycle
        m.d.comb += [
            product.eq(self.a_in * self.b_in),
            total.eq(Mux(self.first_in, 0, acc) + product),
        ]
        if self.overflow == "wrap":
            m.d.comb += summed.eq(total[:bits].as_signed())  # two's complement: the low acc_bits bits
        else:
            with m.If(total > high):
                m.d.comb += summed.eq(high)
            with m.Elif(total < low):
                m.d.comb += summed.eq(low)
            with m.Else():
                m.d.comb += summed.eq(total)
        m.d.comb += acc_next.eq(Mux(self.valid_in, summed, acc))
        m.d.sync += acc.eq(acc_next)
        with m.If(self.last_in):
            m.d.sync += self.result.eq(acc_next)

        m.d.sync += [
            self.a_out.eq(self.a_in),
            self.b_out.eq(self.b_in),
            self.valid_out.eq(self.valid_in),
            self.first_out.eq(self.first_in),
            self.last_out.eq(self.last_in),
        ]
        return m
