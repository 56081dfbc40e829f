"""The softmax unit's EXP2 lane as RTL: p = 2^(−delta / 2¹⁶) in Q15 for delta ≥ 0 in Q.16, host/q15.py's
`exp2_q15` bit for bit.

delta = n·2¹⁶ + f (33 bits: n < 2¹⁷); f's top 6 bits address a 64-entry ROM built from host.q15.EXP2_TABLE, its low
10 bits interpolate linearly towards the next entry (the last entry towards EXP2_HALF, 2⁻¹).

Pipeline (EXP_LATENCY = 4 register stages, one delta per cycle):
  1. ROM read: the entry t0 (Q0.24, 25 bits: entry 0 is 2²⁴) and its step d = t0 − t1 (18 bits) in one 43-bit word;
     n and the 10-bit remainder wait beside it;
  2. interpolation multiply: d · rem (28 bits);
  3. interpolation's rounding shift: y = t0 − ((d·rem + 2⁹) >> 10), Q0.24 in [2²³, 2²⁴] (25 bits); the exponent's
     shift amount min(n, 15) + 9 and the n ≥ 16 flag are decoded beside it;
  4. rounding barrel shift p = (y + 2^(shift−1)) >> shift (≤ 2¹⁵), then the cap at 32767 and zero for n ≥ 16.
"""

from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from codesign.datapath import EXP_LATENCY
from host.q15 import EXP2_HALF, EXP2_TABLE, Q15_ONE_CAP

#: delta is Q.16 and below 2³³ (differences of two Q15.16 scores: < 2³²; the port has one bit of headroom).
DELTA_BITS = 33
FRACTION_BITS = 16
INDEX_BITS = (len(EXP2_TABLE) - 1).bit_length()  # 6: 64 entries
REMAINDER_BITS = FRACTION_BITS - INDEX_BITS  # 10
#: n ≥ this gives p = 0 (2^−16 rounds to 0 in Q15); below it the shift is n + 9.
ZERO_FROM = 16
SHIFT_BASE = 24 - 15  # Q0.24 → Q15
P_BITS = 16

#: The ROM's words: entry t0 and its step to the next entry d = t0 − t1 (EXP2_HALF after the last).
ENTRY_BITS = int(EXP2_TABLE.max()).bit_length()  # 25
STEPS = [int(t0) - int(t1) for t0, t1 in zip(EXP2_TABLE, [*EXP2_TABLE[1:], EXP2_HALF])]
STEP_BITS = max(STEPS).bit_length()  # 18
ROM_WORDS = [int(t0) | step << ENTRY_BITS for t0, step in zip(EXP2_TABLE, STEPS)]


class Exp2Unit(wiring.Component):
    """p = exp2_q15(delta): delta unsigned(33) Q.16 in, p unsigned(16) 0..32767 out; latency EXP_LATENCY, a new
    delta every cycle."""

    #: the register stages above; tests/rtl/test_rtl_units.py checks them against codesign.datapath.EXP_LATENCY
    latency = EXP_LATENCY

    def __init__(self) -> None:
        super().__init__({
            "delta": In(unsigned(DELTA_BITS)),
            "valid_in": In(1),
            "p": Out(unsigned(P_BITS)),
            "valid_out": Out(1),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        n = self.delta[FRACTION_BITS:]
        index = self.delta[REMAINDER_BITS:FRACTION_BITS]
        remainder = self.delta[:REMAINDER_BITS]

        # stage 1: the ROM read (a synchronous read port is the stage's register)
        m.submodules.rom = rom = memory.Memory(shape=unsigned(ENTRY_BITS + STEP_BITS), depth=len(ROM_WORDS),
                                               init=ROM_WORDS)
        read = rom.read_port()
        n_1 = Signal(unsigned(DELTA_BITS - FRACTION_BITS))
        remainder_1 = Signal(unsigned(REMAINDER_BITS))
        valid_1 = Signal()
        m.d.comb += read.addr.eq(index)
        m.d.sync += [n_1.eq(n), remainder_1.eq(remainder), valid_1.eq(self.valid_in)]
        entry_1, step_1 = read.data[:ENTRY_BITS], read.data[ENTRY_BITS:]

        # stage 2: the interpolation multiply
        entry_2 = Signal(unsigned(ENTRY_BITS))
        slope_2 = Signal(unsigned(STEP_BITS + REMAINDER_BITS))
        n_2 = Signal.like(n_1)
        valid_2 = Signal()
        m.d.sync += [entry_2.eq(entry_1), slope_2.eq(step_1 * remainder_1), n_2.eq(n_1), valid_2.eq(valid_1)]

        # stage 3: the interpolation's rounding shift and subtraction; decode the exponent's shift
        y_3 = Signal(unsigned(ENTRY_BITS))
        shift_3 = Signal(range(SHIFT_BASE + ZERO_FROM))
        zero_3 = Signal()
        valid_3 = Signal()
        m.d.sync += [
            y_3.eq(entry_2 - ((slope_2 + (1 << (REMAINDER_BITS - 1))) >> REMAINDER_BITS)),
            shift_3.eq(Mux(n_2 >= ZERO_FROM - 1, ZERO_FROM - 1, n_2) + SHIFT_BASE),
            zero_3.eq(n_2 >= ZERO_FROM),
            valid_3.eq(valid_2),
        ]

        # stage 4: the rounding barrel shift, the cap at 32767 and zero past 2^-16
        half = Signal(unsigned(1 << len(shift_3)))
        p = Signal(unsigned(P_BITS))  # up to 2^15 (1.0) before the cap
        m.d.comb += [half.eq((Const(1, 1) << shift_3) >> 1), p.eq((y_3 + half) >> shift_3)]
        m.d.sync += [
            self.p.eq(Mux(zero_3, 0, Mux(p > Q15_ONE_CAP, Q15_ONE_CAP, p))),
            self.valid_out.eq(valid_3),
        ]
        return m
