"""The os systolic array as RTL (codesign/rtl/mac.py, array.py) simulated cycle by cycle against the models: every
result equals codesign/bits.accumulate's at the same width and overflow rule (the cell alone on 1×K·K×1 sums, the array
on whole GEMM folds), and `done` comes codesign/gemm.py's os fold_cycles after a fold's first vector, with folds run
back to back (each starting in the previous one's done cycle) and every fold's results held until the next done."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

pytest.importorskip("amaranth", reason="Amaranth HDL is not installed (pip install -e '.[rtl]')")

from amaranth.back import verilog
from amaranth.sim import Simulator

from codesign.bits import accumulate
from codesign.gemm import gemm
from codesign.rtl.array import SystolicArray
from codesign.rtl.mac import MacCell
from host.errors import SpecError

EXTREMES = np.array([-32768, 32767, -32767, 0, 1, -1], dtype=np.int16)


def _operands(rng: np.random.Generator, kind: str, shape: tuple[int, ...]) -> np.ndarray:
    """int16 operands: uniform, extremes (±full scale, 0, ±1), or every element -32768 (min) or 32767 (max)."""
    if kind == "uniform":
        return rng.integers(-32768, 32768, shape).astype(np.int16)
    if kind == "extremes":
        return rng.choice(EXTREMES, shape)
    return np.full(shape, -32768 if kind == "min" else 32767, dtype=np.int16)


# (a, b) kinds: random, corner values, the largest positive product 2³⁰ every step, the largest negative one
KIND_PAIRS = (("uniform", "uniform"), ("extremes", "extremes"), ("min", "min"), ("min", "max"))


def _simulate(dut, testbench) -> None:
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()


def _cell_reference(a: np.ndarray, b: np.ndarray, bits: int, overflow: str) -> int:
    """One cell's sum of a[k]·b[k] in increasing k: codesign.bits.accumulate on (1×K)·(K×1)."""
    return int(accumulate(a.reshape(1, -1), b.reshape(-1, 1), bits, overflow)[0][0, 0])


@pytest.mark.parametrize("bits, overflow", [(16, "wrap"), (16, "saturate"), (20, "wrap"), (20, "saturate"),
                                            (24, "saturate"), (40, "wrap"), (64, "saturate")])
def test_cell_sums_match_accumulate(bits, overflow):
    rng = np.random.default_rng(bits * 2 + (overflow == "saturate"))
    # Cycle by cycle inputs (a, b, valid, first, last) and the sum each sequence must leave in `result`.
    cycles, sums, sequences = [], [], []
    lengths = [1, 2, 17, 3, 1, 40] + [int(n) for n in rng.integers(1, 25, 10)]
    for number, length in enumerate(lengths):
        a = _operands(rng, KIND_PAIRS[number % 4][0], (length,))
        b = _operands(rng, KIND_PAIRS[number % 4][1], (length,))
        separate_last = number % 3 == 2  # last on an idle cycle after the final product, as the array gives it
        for k in range(length):
            while rng.random() < 0.2:  # an idle cycle inside the sequence: junk operands, no last
                cycles.append((int(rng.integers(-32768, 32768)), int(rng.integers(-32768, 32768)), 0,
                               int(rng.integers(2)), 0, None))
            last = k == length - 1 and not separate_last
            cycles.append((int(a[k]), int(b[k]), 1, int(k == 0), int(last), None))
        if separate_last:
            cycles.append((int(rng.integers(-32768, 32768)), 0, 0, 0, 1, None))
        cycles[-1] = cycles[-1][:5] + (number,)
        sequences.append((a, b))
        sums.append(_cell_reference(a, b, bits, overflow))
    exact = [_cell_reference(a, b, 64, "wrap") for a, b in sequences]
    # 40 and 64 bits hold every sum here (40·2³⁰ < 2³⁹); the narrow widths must have wrapped or saturated somewhere
    assert (sums != exact) == (bits < 40)
    dut = MacCell(bits, overflow)

    async def testbench(ctx):
        held, previous = 0, None  # the shadow register starts at 0 (reset)
        for cycle, (a, b, valid, first, last, ends) in enumerate(cycles):
            for port, value in ((dut.a_in, a), (dut.b_in, b), (dut.valid_in, valid), (dut.first_in, first),
                                (dut.last_in, last)):
                ctx.set(port, value)
            assert ctx.get(dut.result) == held, f"cycle {cycle}: result {ctx.get(dut.result)}, expected {held}"
            if previous is not None:
                outputs = tuple(ctx.get(port) for port in (dut.a_out, dut.b_out, dut.valid_out, dut.first_out,
                                                           dut.last_out))
                assert outputs == previous, f"cycle {cycle}: outputs {outputs} are not last cycle's inputs"
            previous = (a, b, valid, first, last)
            await ctx.tick()
            if ends is not None:
                held = sums[ends]
        assert ctx.get(dut.result) == held

    _simulate(dut, testbench)


def _fold_plan(rng: np.random.Generator, rows: int, cols: int) -> list[dict]:
    """Twelve folds: T 1, 17, 33 and others, M and N from 1 to the array's size, each kind pair, one started 2 cycles
    late (the others start in the previous fold's done cycle)."""
    plan = []
    steps_list = (1, 17, 2, 5, 3, int(rng.integers(1, 21)), 1, int(rng.integers(4, 18)), 33, 4, 1, 16)
    for number, steps in enumerate(steps_list):
        m = (rows, 1, int(rng.integers(1, rows + 1)))[number % 3]
        n = (cols, int(rng.integers(1, cols + 1)), 1)[number % 3]
        kind_a, kind_b = KIND_PAIRS[number % 4]
        plan.append({"a": _operands(rng, kind_a, (m, steps)), "b": _operands(rng, kind_b, (steps, n)),
                     "gap": 2 if number == 4 else 0})
    return plan


def _vectors(rng: np.random.Generator, fold: dict, rows: int, cols: int) -> list[tuple]:
    """The fold's T input vectors (a, b, valid, first, last), unused rows and columns filled with junk."""
    steps = fold["a"].shape[1]
    a = rng.integers(-32768, 32768, (rows, steps))
    b = rng.integers(-32768, 32768, (steps, cols))
    a[:fold["a"].shape[0]] = fold["a"]
    b[:, :fold["b"].shape[1]] = fold["b"]
    return [([int(x) for x in a[:, t]], [int(x) for x in b[t]], 1, int(t == 0), int(t == steps - 1))
            for t in range(steps)]


@pytest.mark.parametrize("rows, cols, bits, overflow", [
    (1, 1, 40, "wrap"), (1, 1, 16, "saturate"), (2, 3, 20, "saturate"), (2, 3, 40, "wrap"), (4, 4, 40, "wrap"),
    (4, 4, 16, "wrap"), (4, 4, 24, "saturate"), (3, 5, 40, "saturate"), (3, 5, 20, "wrap")])
def test_array_folds_back_to_back(rows, cols, bits, overflow):
    rng = np.random.default_rng(rows * 1000 + cols * 100 + bits + (overflow == "saturate"))
    plan = _fold_plan(rng, rows, cols)
    dut = SystolicArray(rows, cols, bits, overflow)
    measured = []  # (cycles from the first vector to done, results) per fold

    def read(ctx) -> np.ndarray:
        return np.array([[ctx.get(dut.result[i][j]) for j in range(cols)] for i in range(rows)], dtype=np.int64)

    async def testbench(ctx):
        cycle, start, held = 0, None, None
        feed = deque([None] * plan[0]["gap"] + _vectors(rng, plan[0], rows, cols))
        start = plan[0]["gap"]
        while len(measured) < len(plan):
            assert cycle < 1000, "the simulation ran 1000 cycles without finishing the folds"
            if ctx.get(dut.done):
                assert not feed and start is not None, f"cycle {cycle}: done while the fold is still streaming"
                held = read(ctx)
                measured.append((cycle - start, held))
                start = None
                if len(measured) < len(plan):  # the next fold, from this cycle on (after its gap)
                    fold = plan[len(measured)]
                    feed.extend([None] * fold["gap"] + _vectors(rng, fold, rows, cols))
                    start = cycle + fold["gap"]
            elif held is not None:
                assert np.array_equal(read(ctx), held), f"cycle {cycle}: results changed before the next done"
            vector = feed.popleft() if feed else None
            if vector is None:  # idle: junk operands and flags, valid low
                vector = ([int(x) for x in rng.integers(-32768, 32768, rows)],
                          [int(x) for x in rng.integers(-32768, 32768, cols)], 0, int(rng.integers(2)),
                          int(rng.integers(2)))
            a, b, valid, first, last = vector
            for i in range(rows):
                ctx.set(dut.a[i], a[i])
            for j in range(cols):
                ctx.set(dut.b[j], b[j])
            ctx.set(dut.valid, valid)
            ctx.set(dut.first, first)
            ctx.set(dut.last, last)
            await ctx.tick()
            cycle += 1

    _simulate(dut, testbench)
    assert len(measured) == len(plan)
    overflowed = 0
    for number, (fold, (cycles, results)) in enumerate(zip(plan, measured)):
        (m, steps), n = fold["a"].shape, fold["b"].shape[1]
        expected, spilled = accumulate(fold["a"], fold["b"], bits, overflow)
        overflowed += spilled
        wrong = np.argwhere(results[:m, :n] != expected)
        assert not wrong.size, (f"fold {number} (M={m} N={n} T={steps}): first mismatches at "
                                f"{[tuple(map(int, index)) for index in wrong[:4]]}: "
                                f"{results[:m, :n][tuple(wrong[0])]} vs {expected[tuple(wrong[0])]}")
        assert cycles == gemm(m, n, steps, rows, cols, "os").fold_cycles, f"fold {number}: done after {cycles}"
    # 40 bits hold every sum here (33·2³⁰ < 2³⁹); the narrow widths must have wrapped or saturated somewhere
    assert (overflowed > 0) == (bits < 40), f"{overflowed} results overflowed at {bits} bits"


@pytest.mark.parametrize("arguments, message", [
    ((0, 4), "array rows=0"), ((4, 257), "array cols=257"), ((2, 2, 15), "acc_bits=15"),
    ((2, 2, 65), "acc_bits=65"), ((2, 2, 40, "clamp"), "overflow='clamp'")])
def test_array_rejects_bad_parameters(arguments, message):
    with pytest.raises(SpecError, match=message):
        SystolicArray(*arguments)


@pytest.mark.parametrize("arguments, message", [((15,), "acc_bits=15"), ((64, "clip"), "overflow='clip'"),
                                                ((True,), "acc_bits=True")])
def test_cell_rejects_bad_parameters(arguments, message):
    with pytest.raises(SpecError, match=message):
        MacCell(*arguments)


def test_units_export_to_verilog_without_arguments():
    cell = verilog.convert(MacCell(16, "saturate"), name="mac_cell")
    assert "module mac_cell" in cell and "result" in cell
    array = verilog.convert(SystolicArray(2, 3, 20), name="systolic_array")
    assert "module systolic_array" in array and "done" in array
