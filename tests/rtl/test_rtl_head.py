"""One attention head through the RTL (codesign/rtl/head.py, softmax.py, sim.py) against the models: the outputs
(int16 values and row shifts) equal host/q15.attention_q15 at bc = the array's columns, the only key block the RTL
takes (accumulators wide enough: bits.exact_width), or
codesign/bits.run_head with narrow wrapping and saturating accumulators, and the busy cycles the RTL counts per stage
equal codesign/cycles.head_cycles's. The head's total cycles equal the model's (codesign/cycles.py's serial
schedule, its windows in closed form, less the DRAM prologue and epilogue the engine has not: sim.model_cycles) and
the same windows walked one by one (sim.schedule_cycles).

The heads of one Datapath run in one simulation (sim.simulate_heads), so the ~60 default heads build 9 simulators.
Larger heads (an 8×8 array, seq 64, d 32) are marked slow."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

pytest.importorskip("amaranth", reason="Amaranth HDL is not installed (pip install -e '.[rtl]')")

from codesign.bits import exact_width, run_head
from codesign.cycles import head_cycles
from codesign.datapath import EXP_LATENCY, RESCALE_LATENCY, SCORE_LATENCY, Datapath
from codesign.gemm import gemm
from codesign.rtl.sim import model_cycles, schedule, schedule_cycles, simulate_head, simulate_heads
from host.errors import SpecError
from host.problem import AttentionProblem
from host.q15 import BC, Q15Out, Q15Params, StreamState, attention_q15, prepare, score_scale

CONFIGS = {
    "4x4-e4": Datapath(rows=4, cols=4, exp_lanes=4, dividers=8),
    "4x4-e2": Datapath(rows=4, cols=4, exp_lanes=2, dividers=5),
    "4x4-e1": Datapath(rows=4, cols=4, exp_lanes=1, dividers=16, div_latency=20),
    "2x4-e2": Datapath(rows=2, cols=4, exp_lanes=2, dividers=3),
    "4x2-e1": Datapath(rows=4, cols=2, exp_lanes=1, dividers=4),  # R > C: causal rows with no key in a block
    "2x2-e4": Datapath(rows=2, cols=2, exp_lanes=4, dividers=2),  # E > C: a lane cycle spans rows
    "3x2-e3": Datapath(rows=3, cols=2, exp_lanes=3, dividers=7, div_latency=19),
    "4x4-acc24": Datapath(rows=4, cols=4, exp_lanes=2, dividers=4, acc_bits=24, overflow="wrap"),
    "4x4-acc24s": Datapath(rows=4, cols=4, exp_lanes=4, dividers=4, acc_bits=24, overflow="saturate"),
    "8x8-e8": Datapath(rows=8, cols=8, exp_lanes=8, dividers=16),  # slow
}
NARROW = ("4x4-acc24", "4x4-acc24s")

# (seq, dim, causal, kind): kind "problem" is AttentionProblem's normal inputs quantised by host.q15.prepare (the
# realistic M, r); "uniform" int16 with the score scale of exponents (3, 3); "min", "max" every element -32768 or
# 32767 with exponents (8, 8), where the scores saturate int32; "alternating" ±extremes in a checkerboard.
HEADS = {
    "4x4-e4": [(1, 1, False, "problem"), (2, 3, True, "problem"), (5, 8, False, "problem"), (16, 8, True, "problem"),
               (17, 3, False, "uniform"), (32, 16, True, "problem"), (16, 16, False, "min"), (5, 3, True, "max"),
               (17, 8, True, "alternating"), (2, 1, False, "alternating"), (32, 8, False, "uniform"),
               (1, 16, True, "max")],
    "4x4-e2": [(1, 3, True, "min"), (5, 1, False, "problem"), (16, 3, False, "problem"), (17, 16, True, "uniform"),
               (2, 8, False, "max"), (5, 16, True, "alternating"), (16, 8, False, "max"), (32, 1, True, "problem"),
               (17, 3, True, "min")],
    "4x4-e1": [(1, 8, False, "problem"), (5, 3, True, "uniform"), (17, 1, False, "alternating"),
               (16, 16, True, "problem"), (2, 3, False, "min"), (16, 8, False, "alternating"), (5, 16, False, "max")],
    "2x4-e2": [(1, 1, True, "problem"), (5, 3, True, "problem"), (17, 8, False, "problem"), (16, 3, True, "max"),
               (2, 16, False, "uniform"), (32, 3, False, "min"), (17, 1, True, "alternating")],
    "4x2-e1": [(1, 3, False, "max"), (5, 8, True, "problem"), (17, 3, True, "uniform"), (16, 1, False, "problem"),
               (2, 3, True, "alternating")],
    "2x2-e4": [(1, 1, False, "alternating"), (5, 3, False, "problem"), (17, 8, True, "problem"),
               (16, 3, False, "uniform"), (2, 16, True, "min"), (32, 8, False, "alternating")],
    "3x2-e3": [(1, 16, True, "problem"), (5, 8, False, "max"), (17, 3, True, "problem"), (16, 1, False, "uniform"),
               (2, 3, False, "problem")],
    "4x4-acc24": [(5, 8, False, "uniform"), (17, 16, True, "alternating"), (16, 8, False, "min"),
                  (2, 3, True, "max"), (16, 16, False, "problem")],
    "4x4-acc24s": [(5, 8, False, "uniform"), (17, 16, True, "alternating"), (16, 8, False, "max"),
                   (2, 3, True, "min"), (16, 16, False, "problem")],
    "8x8-e8": [(64, 32, False, "problem"), (64, 32, True, "uniform"), (33, 17, True, "alternating")],
}
#: Configurations in the slow run only (each one simulation of all its heads, 6-12 s on the 2-core machine): the
#: fast loop keeps E < C (4x4-e1, 2x4-e2), E > C (3x2-e3), R > C (4x2-e1) and both narrow accumulators.
SLOW = ("8x8-e8", "4x4-e4", "2x2-e4", "4x4-e2")


def _inputs(config: str, seq: int, dim: int, causal: bool, kind: str) -> tuple:
    """(q, k, v, params) of one test head, seeded by its position in HEADS."""
    bc = CONFIGS[config].cols
    seed = list(CONFIGS).index(config) * 100 + HEADS[config].index((seq, dim, causal, kind))
    if kind == "problem":
        problem = AttentionProblem(seq=seq, dim=dim, causal=causal, seed=seed)
        quantized = prepare(problem, *problem.inputs(), bc)
        return (*quantized.head(0, 0), quantized.params)
    exponents = {"uniform": (3, 3), "min": (8, 8), "max": (8, 8), "alternating": (8, 8)}[kind]
    params = Q15Params(seq, dim, causal, bc, *score_scale(*exponents, dim))
    if kind == "uniform":
        rng = np.random.default_rng(seed)
        return (*(rng.integers(-32768, 32768, (seq, dim)).astype(np.int16) for _ in range(3)), params)
    if kind in ("min", "max"):
        full = np.full((seq, dim), -32768 if kind == "min" else 32767, dtype=np.int16)
        return full, full.copy(), full.copy(), params
    checker = np.where((np.arange(seq)[:, None] + np.arange(dim)[None, :]) % 2, 32767, -32768).astype(np.int16)
    return checker, checker[::-1].copy(), -(checker.astype(np.int32) + 1).astype(np.int16), params


@functools.lru_cache(maxsize=None)
def _simulated(config: str) -> list:
    """Every head of `config` through one simulation: [(q, k, v, params, RtlHead)]."""
    heads = [_inputs(config, *head) for head in HEADS[config]]
    return [(*head, rtl) for head, rtl in zip(heads, simulate_heads(heads, CONFIGS[config]))]


def _mismatch(expected: Q15Out, got: Q15Out) -> str:
    bad = np.argwhere(expected.o != got.o)[:5]
    rows = np.flatnonzero(expected.shift != got.shift)[:5]
    return (", ".join(f"{tuple(i)}: expected {expected.o[tuple(i)]}, RTL {got.o[tuple(i)]}" for i in bad)
            + "; row shifts " + ", ".join(f"{i}: expected {expected.shift[i]}, RTL {got.shift[i]}" for i in rows))


def _cases(configs) -> list:
    return [pytest.param(config, index, id=f"{config}-seq{h[0]}-d{h[1]}-{'causal' if h[2] else 'full'}-{h[3]}",
                         marks=[pytest.mark.slow] if config in SLOW else [])
            for config in configs for index, h in enumerate(HEADS[config])]


@pytest.mark.parametrize("config, index", _cases([c for c in CONFIGS if c not in NARROW]))
def test_head_is_the_contract_and_the_cycle_model(config, index):
    dp = CONFIGS[config]
    q, k, v, params, rtl = _simulated(config)[index]
    # the array's accumulators hold every QKᵀ (d terms) and P·V (C terms, p ≤ 32767) sum exactly
    assert dp.acc_bits >= max(exact_width(params.dim, 1 << 30), exact_width(dp.cols, 32767 << 15))
    expected = attention_q15(q, k, v, params)
    assert rtl.out.same_bits(expected), _mismatch(expected, rtl.out)
    model = head_cycles(dp, params.seq, params.dim, params.causal, params.bc)
    assert rtl.stage_cycles == {name: stage.busy_cycles for name, stage in model.stages.items()}
    _assert_the_models_total(dp, params, rtl)
    assert rtl.sim_seconds > 0


@pytest.mark.parametrize("config, index", _cases(NARROW))
def test_narrow_accumulators_wrap_and_saturate_as_the_bit_model(config, index):
    dp = CONFIGS[config]
    q, k, v, params, rtl = _simulated(config)[index]
    expected = run_head(q, k, v, params, dp)
    assert rtl.out.same_bits(expected.out), _mismatch(expected.out, rtl.out)
    model = head_cycles(dp, params.seq, params.dim, params.causal, params.bc)
    assert rtl.stage_cycles == {name: stage.busy_cycles for name, stage in model.stages.items()}
    _assert_the_models_total(dp, params, rtl)


def _assert_the_models_total(dp: Datapath, params: Q15Params, rtl) -> None:
    """The engine's total is the model's (less DRAM) and the window-by-window walk's."""
    model, head = model_cycles(dp, params.seq, params.dim, params.causal)
    assert rtl.cycles == model == schedule_cycles(dp, params.seq, params.dim, params.causal)
    assert model == head.cycles - head.stall_cycles  # the DRAM stalls are the prologue and epilogue only


def test_the_windows_overlap_and_the_bank_holds():
    """Not vacuous: among the fast heads some head ends sooner than its array and softmax busy cycles one after
    another (the units overlap), some window waits for its rescale (the P·V before it ends after the softmax unit's
    max and exp passes), and some tile waits for the bank (the HOLD state)."""
    overlapped = waited = held = 0
    for config in CONFIGS:
        if config in SLOW:
            continue
        dp = CONFIGS[config]
        for *_, params, rtl in _simulated(config):
            _, holds = schedule(dp, params.seq, params.dim, params.causal)
            overlapped += rtl.cycles < sum(rtl.stage_cycles.values())
            held += holds > 0
            waited += _rescale_waits(dp, params) > 0
    assert overlapped > 0 and waited > 0 and held > 0


def _rescale_waits(dp: Datapath, params: Q15Params) -> int:
    """Windows of the head whose rescale pass waits for the P·V before it, counted by hand: a later block whose
    max and exp passes (its softmax cycles less r·(d + 1)/E and the rescale latency) end before that P·V."""
    waits = 0
    for row0 in range(0, params.seq, dp.rows):
        rows = min(dp.rows, params.seq - row0)
        key_end = min(params.seq, row0 + rows) if params.causal else params.seq
        for key0 in range(dp.cols, key_end, dp.cols):
            keys = min(dp.cols, params.seq - key0)
            before = gemm(rows, params.dim, min(dp.cols, params.seq - key0 + dp.cols), dp.rows, dp.cols, "os").cycles
            passes = _softmax_busy(rows, keys, params.dim, dp.exp_lanes, True)
            waits += before > passes
    return waits


@pytest.mark.parametrize("config", NARROW)
def test_narrow_heads_do_overflow(config):
    """The narrow cases are not vacuous: some of their sums leave 24 bits, and there the contract differs."""
    overflows = differs = 0
    for q, k, v, params, rtl in _simulated(config):
        overflows += run_head(q, k, v, params, CONFIGS[config]).overflows
        differs += not rtl.out.same_bits(attention_q15(q, k, v, params))
    assert overflows > 0 and differs > 0


def test_the_row_shifts_are_exercised():
    """The fast configurations' heads give row shifts of several values, the RTL's equal to the model's (above):
    a divider that left g at 0 would fail there."""
    seen = {int(g) for config in CONFIGS if config not in SLOW for *_, rtl in _simulated(config)
            for g in rtl.out.shift}
    assert len(seen) >= 4 and 0 in seen and max(seen) >= 10, sorted(seen)


@pytest.mark.slow
def test_a_head_at_the_contracts_bc_on_an_array_of_that_width():
    """Bc = 64 = C (the only key block the RTL takes): 2 rows × 64 columns, a head of 65 keys (a second, short
    block), causal and not: the contract's values and row shifts, and the model's stage cycles (about 45 s)."""
    dp = Datapath(rows=2, cols=BC, exp_lanes=8, dividers=4)
    heads = []
    for causal in (False, True):
        problem = AttentionProblem(seq=65, dim=4, causal=causal, seed=7)
        quantized = prepare(problem, *problem.inputs())
        heads.append((*quantized.head(0, 0), quantized.params))
    for (q, k, v, params), rtl in zip(heads, simulate_heads(heads, dp)):
        assert params.bc == BC
        expected = attention_q15(q, k, v, params)
        assert rtl.out.same_bits(expected), _mismatch(expected, rtl.out)
        model = head_cycles(dp, params.seq, params.dim, params.causal, params.bc)
        assert rtl.stage_cycles == {name: stage.busy_cycles for name, stage in model.stages.items()}


def test_refusals_name_the_bad_value():
    q = k = v = np.zeros((2, 3), dtype=np.int16)
    params = Q15Params(2, 3, False, 4, *score_scale(0, 0, 3))
    with pytest.raises(SpecError, match="dataflow='ws'.*allowed: os"):
        simulate_head(q, k, v, params, Datapath(rows=4, cols=4, dataflow="ws"))
    with pytest.raises(SpecError, match="^bc=4 differs from the array's width 2; allowed: bc=2 "):
        simulate_head(q, k, v, params, Datapath(rows=4, cols=2))
    with pytest.raises(SpecError, match=r"q is int32 \(2, 3\); allowed: int16 \(2, 3\)"):
        simulate_head(q.astype(np.int32), k, v, params, Datapath(rows=4, cols=4))
    with pytest.raises(SpecError, match="div_latency=17 is below the divider's minimum 18"):
        simulate_head(q, k, v, params, Datapath(rows=4, cols=4, div_latency=17))


def _softmax_busy(rows: int, keys: int, dim: int, lanes: int, first: bool) -> int:
    """docs/codesign.md "Cycle model", one step's softmax: max + (p and α) + rescale passes and their latencies."""
    rescales = 0 if first else rows * (dim + 1)
    return (-(-rows * keys // lanes) + -(-(rows * keys + rows) // lanes) + -(-rescales // lanes) + SCORE_LATENCY
            + math.ceil(math.log2(keys)) + EXP_LATENCY + (RESCALE_LATENCY if rescales else 0))


@pytest.mark.parametrize("lanes", [1, 3, 16])
def test_softmax_unit_alone_keeps_the_stream_state_and_the_step_cycles(lanes):
    """The unit driven directly with the QKᵀ sums of a tile: every tile height r ≤ 3, block width k ≤ 8 (max tree
    levels 0..3), d 1 and 5, causal or not, E below, between and above r·k. Each case is a tile at the end of a head
    of C + k keys: a full first block, then a short block with the rescale pass. Each block starts with `copy` (the
    scores taken from `results`) and its rescale may go at once; after each block a `copy` hands l out, equal to
    StreamState's (V = 0, so the accumulators stay 0); each block's busy cycles are the model's step formula."""
    from amaranth.sim import Simulator

    from codesign.rtl.softmax import SoftmaxUnit

    R, C, DIM = 3, 8, 5
    unit = SoftmaxUnit(R, C, lanes, DIM)
    rng = np.random.default_rng(lanes)
    cases = [(r, k, d, causal) for r in (1, 3) for k in (1, 2, 3, 5, 8) for d in (1, 5) for causal in (False, True)]
    failures = []

    async def bench(ctx):
        for r, k, d, causal in cases:
            seq, row0 = C + k, C + k - r
            q = rng.integers(-32768, 32768, (r, d)).astype(np.int16)
            keys = rng.integers(-32768, 32768, (seq, d)).astype(np.int16)
            params = Q15Params(seq, d, causal, C, *score_scale(1, 1, d))
            state = StreamState.start(q, row0, params)
            for key0, first in ((0, True), (C, False)):
                width = min(C, seq - key0)
                sums = q.astype(np.int64) @ keys[key0:key0 + width].T.astype(np.int64)  # (r, width)
                for i in range(R):
                    for j in range(C):
                        ctx.set(unit.results[i][j], int(sums[i, j]) if i < r and j < width else 0)
                for port, value in ((unit.tile_rows, r), (unit.keys, width), (unit.dim, d), (unit.row0, row0),
                                    (unit.key0, key0), (unit.causal, causal), (unit.mult, params.score_mult),
                                    (unit.shift, params.score_shift), (unit.first, first), (unit.start, 1),
                                    (unit.copy, 1), (unit.rescale_go, 1)):
                    ctx.set(port, int(value))
                busy = 0
                while True:
                    busy += ctx.get(unit.busy)
                    await ctx.tick()
                    ctx.set(unit.start, 0)
                    ctx.set(unit.copy, 0)
                    if ctx.get(unit.done):
                        break
                ctx.set(unit.copy, 1)  # l out to the divider bank's side
                await ctx.tick()
                ctx.set(unit.copy, 0)
                state.absorb(keys[key0:key0 + width], np.zeros((width, d), dtype=np.int16), key0)
                got = [ctx.get(unit.l[i]) for i in range(r)]
                want = _softmax_busy(r, width, d, lanes, first)
                if got != state.l[:, 0].tolist() or busy != want or ctx.get(unit.fault):
                    failures.append(f"r={r} k={width} d={d} causal={causal} first={first}: l {got} vs "
                                    f"{state.l[:, 0].tolist()}, busy {busy} vs {want}")

    sim = Simulator(unit)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert not failures, "\n".join(failures[:5])


def test_units_export_to_verilog_without_extra_arguments():
    from amaranth.back import verilog

    from codesign.rtl.head import HeadEngine
    from codesign.rtl.softmax import SoftmaxUnit

    assert "module softmax" in verilog.convert(SoftmaxUnit(2, 2, 1, 2), name="softmax")
    assert "module head" in verilog.convert(HeadEngine(Datapath(rows=2, cols=2, exp_lanes=1, dividers=1), 4, 2),
                                            name="head")
