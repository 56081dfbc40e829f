"""The output divider as RTL: o = acc · 2^g / l rounded to int16 and the row's shift g, host/q15.py's `divide_q15` bit
for bit (contract v2, docs/q15.md §6), one quotient bit per cycle.

The row's shift comes from the row's peak |A| (`peak`, the max over the row's d accumulators, which the divider bank
finds before the row's divisions start): g = clamp(bitlen(l) − bitlen(peak) + 14, 0, 31), and g = 0 for peak = 0
(`host.q15.output_shift`); both bit lengths are leading-zero counts (priority encoders). divide_q15 normalises l to
16 significant bits: s = max(bitlen(l) − 16, 0), l′ = round_shift(l, s) (2¹⁵..2¹⁶ when s > 0, l itself below 2¹⁶),
and shifts A by t = s − g: a′ = round_shift(acc, t) for t ≥ 0 (t ≤ 16), else acc · 2^(−t) exactly (|acc|·2^g <
2^(bitlen(l)+14), so a left-shifted a′ stays below 2³⁰); then o = clamp(±⌊(|a′| + ⌊l′/2⌋) / l′⌋, −32768, 32767)
with a′'s sign. Write N = |a′| + ⌊l′/2⌋ (below 2⁴⁸: 48 bits unsigned) and Q = ⌊N / l′⌋.

Which quotients reach the clamp: Q ≥ 2¹⁵ always does (+Q ≥ 32768 clamps to 32767; −Q ≤ −32768 clamps to −32768, Q =
2¹⁵ itself giving −32768 either way), and Q < 2¹⁵ never does. So 15 quotient bits suffice once a saturation check
has caught Q ≥ 2¹⁵, i.e. N ≥ l′ · 2¹⁵, i.e. ⌊N / 2¹⁵⌋ ≥ l′. When it fails, N < l′ · 2¹⁵ ≤ 2³¹: the restoring
division needs only a 17-bit remainder (below l′ ≤ 2¹⁶) and the 15 low bits of N, however wide acc is.

Cycles, for a start in cycle c (one stage per cycle, at most one carry chain and its muxes in each):
  c        normalise: priority encoders find bitlen(l) and bitlen(peak), hence s (0..16), g (0..31) and t = s − g;
           l is shifted right by s with rounding, acc right by t with rounding or left by −t;
  c+1      magnitude and saturation check: N = |a′| + ⌊l′/2⌋ (one addition: a negative a′ enters as its ones'
           complement, the +1 as the carry in) and ⌊N / 2¹⁵⌋ ≥ l′; the remainder starts as ⌊N / 2¹⁵⌋;
  c+2..16  15 quotient bits, most significant first: remainder·2 + next bit of N, minus l′ if that fits;
  c+L−1    sign and clamp into `out`, g into `shift`; `done`, `out` and `shift` appear in cycle c+L.
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
from host.q15 import OUT_SHIFT_MAX

ACC_BITS = OUTPUT_ACC_BITS
L_BITS = 32
OUT_BITS = 16
OUT_MIN, OUT_MAX = -(1 << (OUT_BITS - 1)), (1 << (OUT_BITS - 1)) - 1
#: The row's shift g: 0..OUT_SHIFT_MAX (host.q15), 5 bits.
SHIFT_BITS = OUT_SHIFT_MAX.bit_length()
#: g = bitlen(l) − bitlen(peak) + G_OFFSET puts the row's largest |A|·2^g / l in [2¹³, 2¹⁵) (host.q15.output_shift).
G_OFFSET = 14
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
    """(out, shift) = divide_q15 of one element: acc signed(48) of a row whose peak |A| is `peak` (unsigned 48), and
    l unsigned(32) ≥ 1, taken on `start` when not `busy`; `done` (and the result in `out` and `shift`) `latency`
    cycles later, MIN_LATENCY..MAX_LATENCY. Both hold until the next done; l = 0 (outside the contract) gives 32767
    or −32768 by acc's sign."""

    def __new__(cls, *args, **kwargs):
        check_divider(*args, **kwargs)  # before the unit exists: a rejected one is no Elaboratable left unused
        return super().__new__(cls, src_loc_at=1)

    def __init__(self, latency: int = MIN_LATENCY) -> None:
        self.latency = check_divider(latency)
        super().__init__({
            "acc": In(signed(ACC_BITS)),
            "l": In(unsigned(L_BITS)),
            "peak": In(unsigned(ACC_BITS)),
            "start": In(1),
            "out": Out(signed(OUT_BITS)),
            "shift": Out(unsigned(SHIFT_BITS)),
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

        g_row = Signal(unsigned(SHIFT_BITS))  # the row's g, registered on a start

        # normalise (combinational on the inputs, registered on a start): priority encoders give bitlen(l) and
        # bitlen(peak) (the highest set bit wins, as the later assignment); s = bitlen(l) - 16 when l has more than
        # 16 bits; g from the two bit lengths; t = s - g, A's net right shift
        l_len, peak_len = Signal(range(L_BITS + 1)), Signal(range(ACC_BITS + 1))
        for bit in range(L_BITS):
            with m.If(self.l[bit]):
                m.d.comb += l_len.eq(bit + 1)
        for bit in range(ACC_BITS):
            with m.If(self.peak[bit]):
                m.d.comb += peak_len.eq(bit + 1)
        s = Signal(range(NORM_SHIFT_MAX + 1))
        m.d.comb += s.eq(Mux(l_len > NORM_BITS, l_len - NORM_BITS, 0))
        g_raw = Signal(signed(8))  # bitlen(l) - bitlen(peak) + 14: -34..46
        m.d.comb += g_raw.eq(l_len - peak_len + G_OFFSET)
        g = Signal(unsigned(SHIFT_BITS))
        with m.If((self.peak != 0) & (g_raw > 0)):
            m.d.comb += g.eq(Mux(g_raw > OUT_SHIFT_MAX, OUT_SHIFT_MAX, g_raw))
        t = Signal(signed(7))  # -31..16
        m.d.comb += t.eq(s - g)
        right = Signal(range(NORM_SHIFT_MAX + 1))  # t when t >= 0
        left = Signal(range(OUT_SHIFT_MAX + 1))  # -t when t < 0
        m.d.comb += [right.eq(Mux(t >= 0, t, 0)), left.eq(Mux(t < 0, -t, 0))]
        half = Signal(unsigned(NORM_SHIFT_MAX))  # 2^(s-1), none for s = 0
        m.d.comb += half.eq((Const(1, 1) << s) >> 1)
        half_t = Signal(unsigned(NORM_SHIFT_MAX))  # 2^(t-1), none for t <= 0
        m.d.comb += half_t.eq((Const(1, 1) << right) >> 1)
        shifted = Signal(signed(ACC_BITS))  # a'
        m.d.comb += shifted.eq(Mux(t >= 0, (self.acc + half_t) >> right, self.acc << left))

        m.d.sync += self.done.eq(0)
        with m.If(~self.busy), m.If(self.start):  # cycle c
            m.d.sync += [
                divisor.eq((self.l + half) >> s),
                acc_n.eq(shifted),
                g_row.eq(g),
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
                m.d.sync += [self.shift.eq(g_row), self.done.eq(1), self.busy.eq(0)]
        return m
