"""The output divider as RTL: o = acc / l rounded to int16, host/q15.py's `divide_q15` bit for bit, one quotient bit
per cycle.

divide_q15 normalises l to 16 significant bits: s = max(bitlen(l) − 16, 0), l′ = round_shift(l, s) (2¹⁵..2¹⁶ when
s > 0, l itself below 2¹⁶), a′ = round_shift(acc, s); then o = clamp(±⌊(|a′| + ⌊l′/2⌋) / l′⌋, −32768, 32767) with
a′'s sign. Write N = |a′| + ⌊l′/2⌋ (below 2⁴⁸: 48 bits unsigned) and Q = ⌊N / l′⌋.

Which quotients reach the clamp: Q ≥ 2¹⁵ always does (+Q ≥ 32768 clamps to 32767; −Q ≤ −32768 clamps to −32768, Q =
2¹⁵ itself giving −32768 either way), and Q < 2¹⁵ never does. So 15 quotient bits suffice once a saturation check
has caught Q ≥ 2¹⁵, i.e. N ≥ l′ · 2¹⁵, i.e. ⌊N / 2¹⁵⌋ ≥ l′. When it fails, N < l′ · 2¹⁵ ≤ 2³¹: the restoring
division needs only a 17-bit remainder (below l′ ≤ 2¹⁶) and the 15 low bits of N, however wide acc is.

Cycles, for a start in cycle c (one stage per cycle, at most one carry chain and its muxes in each):
  c        normalise: a priority encoder finds bitlen(l), hence s (0..16); l and acc are shifted by s with rounding;
  c+1      magnitude and saturation check: N = |a′| + ⌊l′/2⌋ (one addition: a negative a′ enters as its ones'
           complement, the +1 as the carry in) and ⌊N / 2¹⁵⌋ ≥ l′; the remainder starts as ⌊N / 2¹⁵⌋;
  c+2..16  15 quotient bits, most significant first: remainder·2 + next bit of N, minus l′ if that fits;
  c+L−1    sign and clamp into `out`; `done` and `out` appear in cycle c+L.
Hence the minimum latency 1 + 1 + 15 + 1 = 18 (the cycle model's default div_latency). A larger latency keeps the
finished quotient in its register until cycle c+L−1: the divider stays busy (one division per L cycles, as
codesign/cycles.py counts it) and a start while busy is ignored. A new start may come in the done cycle.
"""

from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from codesign.datapath import OUTPUT_ACC_BITS
from host.errors import SpecError
from host.checks import check_int

ACC_BITS = OUTPUT_ACC_BITS
L_BITS = 32
OUT_BITS = 16
OUT_MIN, OUT_MAX = -(1 << (OUT_BITS - 1)), (1 << (OUT_BITS - 1)) - 1
#: l is normalised to this many significant bits (l′ ≤ 2¹⁶: 17 bits after rounding up).
NORM_BITS = 16
DIVISOR_BITS = NORM_BITS + 1
NORM_SHIFT_MAX = L_BITS - NORM_BITS
#: Quotient bits computed: any Q ≥ 2¹⁵ clamps, and the saturation check catches it.
QUOTIENT_BITS = OUT_BITS - 1
#: |a′| ≤ 2⁴⁷ (only for acc = −2⁴⁷ at s = 0, where ⌊l′/2⌋ < 2¹⁵) plus ⌊l′/2⌋ ≤ 2¹⁵ stays below 2⁴⁸.
DIVIDEND_BITS = ACC_BITS
#: Cycles after the start: c+1 the magnitude and saturation check, c+2 .. c+16 the quotient bits.
MAGNITUDE_CYCLE = 1
FIRST_QUOTIENT_CYCLE = 2
#: normalise + magnitude/saturation check + one cycle per quotient bit + sign/clamp.
MIN_LATENCY = FIRST_QUOTIENT_CYCLE + QUOTIENT_BITS + 1
#: A bound for the cycle counter: codesign.datapath accepts div_latency up to 256.
MAX_LATENCY = 256


def check_divider(latency: int = MIN_LATENCY) -> int:
    """The latency of a Divider; SpecError quoting it (below the minimum: naming the stages that need the cycles)."""
    if isinstance(latency, int) and not isinstance(latency, bool) and latency < MIN_LATENCY:
        raise SpecError(f"latency={latency} is below the divider's minimum {MIN_LATENCY} (normalise, "
                        f"saturation check, {QUOTIENT_BITS} quotient bits, sign); allowed: "
                        f"{MIN_LATENCY}..{MAX_LATENCY}")
    return check_int("latency", latency, MIN_LATENCY, MAX_LATENCY)


class Divider(wiring.Component):
    """out = divide_q15(acc, l) for acc signed(48) and l unsigned(32) ≥ 1, taken on `start` when not `busy`;
    `done` (and the result in `out`) `latency` cycles later, MIN_LATENCY..MAX_LATENCY. `out` holds until the next
    done; l = 0 (outside the contract) gives 32767 or −32768 by acc's sign."""

    def __new__(cls, *args, **kwargs):
        check_divider(*args, **kwargs)  # before the unit exists: a rejected one is no Elaboratable left unused
        return super().__new__(cls, src_loc_at=1)

    def __init__(self, latency: int = MIN_LATENCY) -> None:
        self.latency = check_divider(latency)
        super().__init__({
            "acc": In(signed(ACC_BITS)),
            "l": In(unsigned(L_BITS)),
            "start": In(1),
            "out": Out(signed(OUT_BITS)),
            "done": Out(1),
            "busy": Out(1),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        cycle = Signal(range(self.latency))  # cycles since the start, while busy
        divisor = Signal(unsigned(DIVISOR_BITS))  # l′
        acc_n = Signal(signed(ACC_BITS))  # a′
        negative = Signal()
        saturated = Signal()
        remainder = Signal(unsigned(DIVISOR_BITS))
        # N's 15 low bits, shifted out at the top as the quotient bits come in at the bottom: Q at the end
        bits = Signal(unsigned(QUOTIENT_BITS))

        # normalise (combinational on the inputs, registered on a start): the priority encoder gives
        # s = bitlen(l) - 16 when l has more than 16 bits (the highest set bit wins, as the later assignment)
        s = Signal(range(NORM_SHIFT_MAX + 1))
        for bit in range(NORM_BITS, L_BITS):
            with m.If(self.l[bit]):
                m.d.comb += s.eq(bit + 1 - NORM_BITS)
        half = Signal(unsigned(NORM_SHIFT_MAX))  # 2^(s-1), none for s = 0
        m.d.comb += half.eq((Const(1, 1) << s) >> 1)

        m.d.sync += self.done.eq(0)
        with m.If(~self.busy), m.If(self.start):  # cycle c
            m.d.sync += [
                divisor.eq((self.l + half) >> s),
                acc_n.eq((self.acc + half) >> s),
                cycle.eq(1),
                self.busy.eq(1),
            ]
        with m.Else():
            m.d.sync += cycle.eq(cycle + 1)
            with m.If(cycle == MAGNITUDE_CYCLE):
                # |a'| + l'/2 as one addition: a negative a' is its ones' complement plus one, the one a carry in
                dividend = Signal(unsigned(DIVIDEND_BITS))
                m.d.comb += dividend.eq(Mux(acc_n < 0, ~acc_n, acc_n) + (divisor >> 1) + (acc_n < 0))
                m.d.sync += [
                    negative.eq(acc_n < 0),
                    saturated.eq((dividend >> QUOTIENT_BITS) >= divisor),
                    remainder.eq(dividend >> QUOTIENT_BITS),  # below l′ unless saturated
                    bits.eq(dividend[:QUOTIENT_BITS]),
                ]
            with m.Elif(cycle < FIRST_QUOTIENT_CYCLE + QUOTIENT_BITS):
                # one restoring-division step: shift in N's next bit, subtract l′ if it fits
                trial = Signal(unsigned(DIVISOR_BITS + 1))
                m.d.comb += trial.eq(remainder << 1 | bits[-1])
                fits = trial >= divisor
                m.d.sync += [
                    remainder.eq(Mux(fits, trial - divisor, trial)),
                    bits.eq(bits << 1 | fits),
                ]
            with m.If(cycle == self.latency - 1):
                # sign and clamp; the result and done appear in cycle c+L, when a new start may come
                with m.If(saturated):
                    m.d.sync += self.out.eq(Mux(negative, OUT_MIN, OUT_MAX))
                with m.Else():
                    m.d.sync += self.out.eq(Mux(negative, -bits, bits))
                m.d.sync += [self.done.eq(1), self.busy.eq(0)]
        return m
