"""The datapath's arithmetic units as RTL (codesign/rtl: score, EXP2, rescale, divider), simulated cycle by cycle
against host/q15.py: every result bit-exact with the contract's function, at exactly the latency of
codesign/datapath.py, with operands streamed back to back (and a few bubbles, whose junk must not leak out)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("amaranth", reason="Amaranth HDL is not installed (pip install -e '.[rtl]')")

from amaranth.sim import Simulator

from codesign.datapath import (ACC_BITS_MAX, ACC_BITS_MIN, EXP_LATENCY, OUTPUT_ACC_BITS,
                               RESCALE_LATENCY, SCORE_LATENCY, Datapath)
from codesign.rtl.divider import MIN_LATENCY, Divider
from codesign.rtl.exp2 import Exp2Unit
from codesign.rtl.rescale import RescaleUnit
from codesign.rtl.score import ScoreUnit
from host.errors import SpecError
from host.q15 import (INT32_MAX, INT32_MIN, MULT_MAX, MULT_MIN, Q15_ONE_CAP, Q15Out, SHIFT_MAX, SHIFT_MIN,
                      divide_q15, exp2_q15, round_shift)

SEED = 17
#: Every seventh input slot is a bubble (valid_in = 0, random junk on the data ports).
BUBBLE_EVERY = 7


def run_stream(unit, operands: dict[str, np.ndarray], output: str, seed: int = SEED) -> tuple[list[int], list[int],
                                                                                              list[int]]:
    """Present operands[i] one per cycle (valid_in = 1, a bubble every BUBBLE_EVERY slots); return (the cycles the
    operands went in, the cycles valid_out was 1, the `output` values in those cycles)."""
    names = list(operands)
    count = len(operands[names[0]])
    rng = np.random.default_rng(seed)
    in_cycles, out_cycles, values = [], [], []

    async def bench(ctx):
        index = cycle = 0
        while index < count or cycle <= (in_cycles[-1] if in_cycles else 0) + unit.latency + 1:
            live = index < count and cycle % BUBBLE_EVERY != BUBBLE_EVERY - 1
            for name in names:
                port = getattr(unit, name)
                if live:
                    ctx.set(port, int(operands[name][index]))
                else:  # junk of the port's width
                    ctx.set(port, int(rng.integers(0, 1 << min(len(port), 62))))
            ctx.set(unit.valid_in, live)
            if live:
                in_cycles.append(cycle)
                index += 1
            if ctx.get(unit.valid_out):
                out_cycles.append(cycle)
                values.append(ctx.get(getattr(unit, output)))
            await ctx.tick()
            cycle += 1

    sim = Simulator(unit)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return in_cycles, out_cycles, values


def check_stream(unit, operands: dict[str, np.ndarray], output: str, expected: np.ndarray, latency: int) -> None:
    """Stream the operands through the unit: each result exactly `latency` cycles after its operand, equal to
    `expected` (the first mismatches are named with their operands)."""
    in_cycles, out_cycles, values = run_stream(unit, operands, output)
    assert out_cycles == [cycle + latency for cycle in in_cycles]
    assert len(values) == len(expected)
    wrong = [i for i, (got, want) in enumerate(zip(values, expected)) if got != int(want)]
    first = [(i, {name: int(v[i]) for name, v in operands.items()}, values[i], int(expected[i])) for i in wrong[:5]]
    assert not wrong, f"{len(wrong)} of {len(values)} wrong; first (index, operands, got, expected): {first}"


def signed_ends(bits: int) -> list[int]:
    """The awkward values of a signed `bits`-wide operand: both ends, one inside each, and -1, 0, 1."""
    return [-(1 << (bits - 1)), -(1 << (bits - 1)) + 1, -1, 0, 1, (1 << (bits - 1)) - 1]


# --- score unit --------------------------------------------------------------------------------------------------

def score_operands(acc_bits: int, count: int, acc_limit_bits: int) -> dict[str, np.ndarray]:
    """Random acc (within ±2^(acc_limit_bits-1)), M and r, then every extreme of each against extremes of the
    others, and accumulators sized so z lands on the int32 limits."""
    rng = np.random.default_rng(SEED + acc_bits)
    low, high = -(1 << (acc_limit_bits - 1)), (1 << (acc_limit_bits - 1)) - 1
    accs = [int(a) for a in rng.integers(low, high, count, endpoint=True)]
    mults = [int(x) for x in rng.integers(MULT_MIN, MULT_MAX, count, endpoint=True)]
    shifts = [int(x) for x in rng.integers(SHIFT_MIN, SHIFT_MAX, count, endpoint=True)]
    for acc in signed_ends(acc_limit_bits):
        for mult in (MULT_MIN, MULT_MAX):
            for shift in (SHIFT_MIN, 16, 30, SHIFT_MAX):
                accs.append(acc), mults.append(mult), shifts.append(shift)
    for shift in (SHIFT_MIN, 8, 20):  # z = round(acc·M / 2^r) straddling INT32_MAX and INT32_MIN
        for target in (INT32_MAX, INT32_MIN):
            centre = (target << shift) // MULT_MIN
            for acc in (centre - 1, centre, centre + 1):
                if low <= acc <= high:
                    accs.append(acc), mults.append(MULT_MIN), shifts.append(shift)
    return {"acc": np.array(accs, dtype=np.int64), "mult": np.array(mults, dtype=np.int64),
            "shift": np.array(shifts, dtype=np.int64)}


@pytest.mark.parametrize("acc_bits", [ACC_BITS_MIN, 40, OUTPUT_ACC_BITS])
def test_score_unit_matches_the_contract(acc_bits):
    operands = score_operands(acc_bits, 150, acc_bits)
    expected = np.clip(round_shift(operands["acc"] * operands["mult"], operands["shift"]), INT32_MIN, INT32_MAX)
    if acc_bits - 1 + 15 - SHIFT_MIN > 31:  # |z| can reach 2^(acc_bits+13): both saturations are reached
        assert {INT32_MIN, INT32_MAX} <= set(expected.tolist())
    check_stream(ScoreUnit(acc_bits), operands, "z", expected, SCORE_LATENCY)


def test_score_unit_is_exact_at_64_bits():
    """acc_bits = 64: host/q15.py's int64 holds acc·M only for |acc| < 2⁴⁸, which the contract's sums never leave
    (they are below 2⁴⁰); beyond, the unit is still exact: floor(acc·M / 2^r + 1/2) in unbounded integers."""
    operands = score_operands(ACC_BITS_MAX, 60, 48)
    in_range = np.clip(round_shift(operands["acc"] * operands["mult"], operands["shift"]), INT32_MIN, INT32_MAX)
    ends = [(acc, mult, shift) for acc in signed_ends(ACC_BITS_MAX) for mult in (MULT_MIN, MULT_MAX)
            for shift in (SHIFT_MIN, 48, SHIFT_MAX)]
    beyond = [min(max((acc * mult + (1 << (shift - 1))) >> shift, INT32_MIN), INT32_MAX) for acc, mult, shift in ends]
    for name, column in zip(("acc", "mult", "shift"), zip(*ends)):
        operands[name] = np.array([*map(int, operands[name]), *column], dtype=object)
    check_stream(ScoreUnit(ACC_BITS_MAX), operands, "z", np.array([*in_range.tolist(), *beyond], dtype=object),
                 SCORE_LATENCY)


@pytest.mark.parametrize("acc_bits", [ACC_BITS_MIN - 1, ACC_BITS_MAX + 1, 40.0])
def test_score_unit_rejects_widths_outside_the_datapath(acc_bits):
    with pytest.raises(SpecError, match="acc_bits"):
        ScoreUnit(acc_bits)


# --- EXP2 ------------------------------------------------------------------------------------------------------

def test_exp2_unit_matches_the_contract():
    rng = np.random.default_rng(SEED)
    one = 1 << 16
    extremes = [0, 1, 2, 511, 512, 1023, 1024, one - 1024, one - 1, one, one + 1, 15 * one - 1, 15 * one,
                16 * one - 1, 16 * one, 16 * one + 1, (1 << 32) - 1, 1 << 32, (1 << 33) - 1]
    table_edges = [n * one + (index << 10) + rem for n in (0, 3, 15) for index in (0, 31, 62, 63) for rem in (0, 1023)]
    deltas = np.array([*extremes, *table_edges,
                       *rng.integers(0, 17 * one, 400),  # every exponent n of the active range and a little beyond
                       *rng.integers(0, 1 << 33, 40)], dtype=np.int64)
    expected = exp2_q15(deltas)
    assert Q15_ONE_CAP in expected and 0 in expected  # the cap and the underflow are both reached
    check_stream(Exp2Unit(), {"delta": deltas}, "p", expected, EXP_LATENCY)


@pytest.mark.slow  # about 5 s: 2^16 simulated cycles
def test_exp2_unit_matches_the_contract_on_every_fraction():
    """n = 0, every one of the 2¹⁶ fractions: every ROM entry and interpolation step at the finest output shift (9),
    where a Q0.24 error of one LSB shows (a wrong rounding half in the interpolation changes 34 of these outputs and
    almost no random ones)."""
    deltas = np.arange(1 << 16, dtype=np.int64)
    check_stream(Exp2Unit(), {"delta": deltas}, "p", exp2_q15(deltas), EXP_LATENCY)


# --- rescale ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("width, signed", [(OUTPUT_ACC_BITS, True), (32, False), (17, True), (1, False)])
def test_rescale_unit_matches_the_contract(width, signed):
    rng = np.random.default_rng(SEED + width)
    low, high = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
    ends = sorted({low, low + 1, -1 if signed else 0, 0, 1 if high >= 1 else 0, high - 1 if high > 1 else 0, high})
    alphas = [0, 1, 16383, 16384, Q15_ONE_CAP - 1, Q15_ONE_CAP]
    xs = [*(x for x in ends for _ in alphas), *rng.integers(low, high, 200, endpoint=True)]
    alpha = [*(a for _ in ends for a in alphas), *rng.integers(0, Q15_ONE_CAP, 200, endpoint=True)]
    operands = {"x": np.array(xs, dtype=np.int64), "alpha": np.array(alpha, dtype=np.int64)}
    expected = round_shift(operands["x"] * operands["alpha"], 15)
    check_stream(RescaleUnit(width, signed), operands, "y", expected, RESCALE_LATENCY)


@pytest.mark.parametrize("width, signed", [(0, True), (OUTPUT_ACC_BITS + 1, True), (32, 1)])
def test_rescale_unit_rejects_bad_widths(width, signed):
    with pytest.raises(SpecError):
        RescaleUnit(width, signed)


# --- divider ---------------------------------------------------------------------------------------------------

def divider_operands(count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, Q15Out]:
    """(acc, l, peak, expected) per element: extremes of both, quotients straddling the clamps ±32767.5 and −32768.5
    (with the rounding half), and random pairs at every size of l, each as a row of its own (peak = |acc|); then
    random rows of 3 elements whose peak sets the shift of the smaller ones, from g = 0 (peaks past 2¹⁴·l) to
    g = 31 (tiny peaks over large l), and all-zero rows. expected: divide_q15 of the rows, one entry per element."""
    rng = np.random.default_rng(SEED)
    acc_low, acc_high = -(1 << (OUTPUT_ACC_BITS - 1)), (1 << (OUTPUT_ACC_BITS - 1)) - 1
    ls = [1, 2, 3, (1 << 16) - 1, 1 << 16, (1 << 16) + 1, (1 << 17) - 1, (1 << 31) + 12345, (1 << 32) - 1]
    pairs = [(acc, l) for l in ls for acc in (acc_low, acc_high, -1, 0, 1, l // 2, -(l // 2), (l + 1) // 2)]
    for l in ls:  # acc = k·l + offset: round(acc / l) around the ends of int16
        for k in (32766, 32767, 32768, -32767, -32768, -32769):
            for offset in (-(l // 2) - 1, -(l // 2), 0, (l - 1) // 2, l // 2):
                acc = k * l + offset
                if acc_low <= acc <= acc_high:
                    pairs.append((acc, l))
    sizes = rng.integers(1, 33, count)  # l of every bit length 1..32, acc at most ~2^17·l
    for bits in sizes:
        l = int(rng.integers(1 << (bits - 1), (1 << int(bits)) - 1, endpoint=True))
        acc = int(rng.integers(-(l << 16), l << 16, endpoint=True))
        pairs.append((max(min(acc, acc_high), acc_low), l))
    single_acc, single_l = (np.array(x, dtype=np.int64) for x in zip(*pairs))
    single = divide_q15(single_acc[:, None], single_l[:, None])  # each element its own row
    rows_l = np.array([int(rng.integers(1 << (b - 1), 1 << b)) for b in rng.integers(1, 33, count)], dtype=np.int64)
    scale = np.exp2(rng.uniform(-20, 17, count))  # the row's magnitude against l: g from 31 down to 0
    rows_acc = np.clip(np.round(rng.uniform(-1, 1, (count, 3)) * (rows_l * scale)[:, None]), acc_low, acc_high)
    rows_acc = rows_acc.astype(np.int64)
    rows_acc[: max(1, count // 10)] = 0  # rows whose peak is 0: g = 0
    rows = divide_q15(rows_acc, rows_l[:, None])
    acc = np.concatenate((single_acc, rows_acc.ravel()))
    l = np.concatenate((single_l, np.repeat(rows_l, 3)))
    peak = np.concatenate((np.abs(single_acc), np.repeat(np.abs(rows_acc).max(axis=1), 3)))
    expected = Q15Out(np.concatenate((single.o[:, 0], rows.o.ravel())),
                      np.concatenate((single.shift, np.repeat(rows.shift, 3))))
    return acc, l, peak, expected


def run_divisions(divider: Divider, acc: np.ndarray, l: np.ndarray,
                  peak: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Start each division in the cycle the previous one is done (the first in cycle 0), checking `busy` in every
    cycle between, plus one start while busy, which must be ignored; returns (start cycle, done cycle, out, shift)."""
    latency, results = divider.latency, []

    async def bench(ctx):
        cycle = 0
        for index in range(len(acc)):
            assert not ctx.get(divider.busy)
            ctx.set(divider.acc, int(acc[index]))
            ctx.set(divider.l, int(l[index]))
            ctx.set(divider.peak, int(peak[index]))
            ctx.set(divider.start, 1)
            start = cycle
            while True:
                await ctx.tick()
                cycle += 1
                # a start while busy: different operands, which must change nothing
                ctx.set(divider.start, int(cycle == start + 1))
                ctx.set(divider.l, 1)
                ctx.set(divider.peak, 0)
                if ctx.get(divider.done):
                    break
                assert ctx.get(divider.busy), f"not busy in cycle {cycle} of a division started in cycle {start}"
                assert cycle < start + latency, f"no done by cycle {cycle} for a start in cycle {start}"
            results.append((start, cycle, ctx.get(divider.out), ctx.get(divider.shift)))
        await ctx.tick()
        assert not ctx.get(divider.done)  # a one-cycle pulse

    sim = Simulator(divider)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return results


@pytest.mark.parametrize("latency", [None, MIN_LATENCY, MIN_LATENCY + 1, MIN_LATENCY + 13])
def test_divider_matches_the_contract(latency):
    """None: the default latency, which must be the cycle model's div_latency."""
    acc, l, peak, expected = divider_operands(60 if latency is None else 10)
    assert {-32768, 32767} <= set(expected.o.tolist())
    if latency is None:  # the shifts cover their range's ends and between
        assert {0, 31} <= set(expected.shift.tolist()) and len(set(expected.shift.tolist())) > 10
    divider = Divider() if latency is None else Divider(latency)
    results = run_divisions(divider, acc, l, peak)
    want = Datapath().div_latency if latency is None else latency
    assert [done - start for start, done, _, _ in results] == [want] * len(acc)
    wrong = [(int(a), int(b), int(p), (out, g), (int(o), int(h)))
             for a, b, p, (_, _, out, g), o, h in zip(acc, l, peak, results, expected.o, expected.shift)
             if (out, g) != (o, h)]
    assert not wrong, f"{len(wrong)} of {len(acc)} wrong; first (acc, l, peak, got, expected): {wrong[:5]}"


@pytest.mark.parametrize("latency", [1, MIN_LATENCY - 1])
def test_divider_rejects_a_latency_below_its_minimum(latency):
    with pytest.raises(SpecError, match=f"minimum {MIN_LATENCY}"):
        Divider(latency)


def _refusals() -> list:
    """One bad construction of each RTL unit that checks its parameters."""
    from codesign.rtl.array import SystolicArray
    from codesign.rtl.head import HeadEngine
    from codesign.rtl.mac import MacCell
    from codesign.rtl.softmax import SoftmaxUnit

    return [lambda: MacCell(15), lambda: SystolicArray(0, 4), lambda: ScoreUnit(65), lambda: RescaleUnit(0),
            lambda: Divider(MIN_LATENCY - 1), lambda: SoftmaxUnit(2, 2, 0, 4),
            lambda: HeadEngine(Datapath(rows=2, cols=2, div_latency=MIN_LATENCY - 1), 4, 2)]


def test_a_refused_unit_leaves_no_unused_elaboratable_warning():
    """Every unit checks its parameters before it exists (in __new__), so a refused one is no Elaboratable that
    Amaranth would report as 'created but never used'; an unused accepted unit still is (the check sees warnings)."""
    import gc
    import warnings

    from amaranth.hdl import Fragment, UnusedElaboratable

    Fragment.get(Exp2Unit(), None)  # Amaranth reports unused Elaboratables only once something was elaborated
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnusedElaboratable)
        for refusal in _refusals():
            with pytest.raises(SpecError):
                refusal()
        gc.collect()
        assert [str(w.message) for w in caught] == []
        ScoreUnit(40)  # accepted and never used
        gc.collect()
        assert [w.category for w in caught] == [UnusedElaboratable]
