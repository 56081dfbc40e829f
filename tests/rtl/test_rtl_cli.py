"""`python -m codesign run --rtl`: every head of the problem through the RTL beside the model, the command failing
when outputs or stage cycles differ, and the RTL's preconditions refused in one line before anything runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("amaranth", reason="Amaranth HDL is not installed (pip install -e '.[rtl]')")

import codesign.rtl.sim as sim
from codesign.__main__ import main
from codesign.cycles import head_cycles
from codesign.datapath import Datapath
from host.errors import SpecError, TargetError
from host.q15 import Q15Params

SMALL = ["--seq", "9", "--dim", "3", "--heads", "2", "--array", "2x4", "--bc", "4", "--exp-lanes", "3", "--dividers",
         "2"]


def test_every_head_through_the_rtl_agrees_with_the_model(capsys):
    assert main(["run", *SMALL, "--causal", "1", "--rtl"]) == 0
    out = capsys.readouterr()
    assert "2 head(s) simulated" in out.out and "outputs equal the model's: yes" in out.out
    expected = head_cycles(Datapath(rows=2, cols=4, exp_lanes=3, dividers=2), 9, 3, True, 4).stages
    rtl_lines = out.out.split("\nrtl ")[1].splitlines()
    for name, stage in expected.items():  # the model's busy cycles, then the RTL's, equal
        [line] = [line for line in rtl_lines if line.split()[:1] == [name]]
        assert line.split()[1:] == [f"{stage.busy_cycles:,}"] * 2
    assert "the RTL will simulate 2 head(s)" in out.err
    # the RTL's total on its own line, equal to the model's beside it: codesign/cycles.py's head at the command's
    # DRAM (32 B/cycle) less its DRAM stalls, which for this head are its prologue and epilogue only; two heads
    model = head_cycles(Datapath(rows=2, cols=4, exp_lanes=3, dividers=2), 9, 3, True, 4)
    assert model.stall_cycles == model.prologue + model.epilogue
    per_head = model.cycles - model.stall_cycles
    assert per_head == sim.schedule_cycles(Datapath(rows=2, cols=4, exp_lanes=3, dividers=2), 9, 3, True)
    # one `cycles N` line and one `rtl_cycles N`, N plain integers (the DRAM-inclusive total is cycles_dram)
    [total] = [line for line in out.out.splitlines() if line.startswith("rtl_cycles ")]
    [beside] = [line for line in out.out.splitlines() if line.startswith("cycles ")]
    assert total.split()[1] == beside.split()[1] == str(2 * per_head) and f"({per_head:,} per head," in total
    [dram] = [line for line in out.out.splitlines() if line.startswith("cycles_dram ")]
    assert dram.split()[1] == f"{2 * model.cycles:,}"
    assert "DIFFERS" not in total
    simulated = 2 * (per_head + sim.DONE_TICKS)
    assert f"codesign run: RTL: {simulated:,} of {simulated:,} cycles in " in out.err  # the count ends at its total


def test_an_rtl_that_differs_fails_the_command(capsys, monkeypatch):
    real = sim.simulate_heads

    def off_by_one(heads, datapath, progress=None):
        done = real(heads, datapath, progress)
        first = done[0]
        out = first.out._replace(o=first.out.o.copy())
        out.o[0, 0] ^= 1
        cycles = dict(first.stage_cycles, softmax=first.stage_cycles["softmax"] + 1)
        return [type(first)(out, cycles, first.cycles, first.sim_seconds), *done[1:]]

    monkeypatch.setattr(sim, "simulate_heads", off_by_one)
    assert main(["run", *SMALL, "--rtl"]) == 1
    out = capsys.readouterr().out
    [softmax] = [line for line in out.split("\nrtl ")[1].splitlines() if line.split()[:1] == ["softmax"]]
    assert "outputs equal the model's: NO" in out and "DIFFERS" in softmax


@pytest.mark.parametrize("extra,message", [
    (["--dataflow", "ws"], "--rtl: dataflow='ws' has no RTL array; allowed: os"),
    (["--div-latency", "17"], "--rtl: div-latency=17 is below the RTL divider's minimum; allowed: 18..256"),
    (["--seq", "4096", "--dim", "128", "--array", "32x32", "--bc", "32"], "allowed: up to 60 min"),
    (["--arrays", "2"], "--rtl: arrays=2 has no RTL; allowed: 1"),  # the RTL builds one serial array only
    (["--schedule", "overlap"], "--rtl: schedule='overlap' has no RTL; allowed: 'serial'"),
    (["--divider", "pipelined"], "--rtl: divider='pipelined' has no RTL; allowed: 'iterative'"),
    (["--bc", "64"], "--rtl: bc=64 differs from the array's 4 columns; allowed: an array 2x64 (the RTL folds no key "
                     "block over its columns; the contract's Bc is 64, and --bc 4 would compute other bits than the "
                     "contract's)"),
])
def test_what_the_rtl_cannot_run_is_refused_in_one_line_first(capsys, monkeypatch, extra, message):
    monkeypatch.setattr(sim, "simulate_heads", lambda *a: pytest.fail("simulated a refused problem"))
    assert main(["run", *SMALL, *extra, "--rtl"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and message in out.err and len(out.err.strip().splitlines()) == 1


def test_the_plan_names_the_estimate_and_refuses_one_over_the_limit_naming_both(capsys, monkeypatch):
    """run.RTL_MAX_S bounds sim.estimate_seconds over every head's cycles (sim.model_cycles): under it the plan line
    gives the estimate and its band; over it the one-line refusal gives the estimate in hours and the limit."""
    from codesign import run
    from host.problem import AttentionProblem

    dp = Datapath(rows=2, cols=4, exp_lanes=3, dividers=2)  # SMALL's datapath and head, 2 heads
    estimate = sim.estimate_seconds(dp, 9, 3, False, heads=2)
    line = run.rtl_plan(AttentionProblem(batch=1, heads=2, seq=9, dim=3, causal=False, dtype="q15"), dp, bc=4)
    assert estimate < run.RTL_MAX_S and f"roughly {estimate:.0f} s ({estimate * (1 - sim.ESTIMATE_ERROR):.0f}.." in line
    monkeypatch.setattr(sim, "simulate_heads", lambda *a: pytest.fail("simulated a refused problem"))
    big = Datapath(rows=32, cols=32, exp_lanes=3, dividers=2)
    total = sim.model_cycles(big, 4096, 128, False)[0]
    estimate = sim.estimate_seconds(big, 4096, 128, False, heads=2)
    assert estimate > run.RTL_MAX_S
    assert main(["run", *SMALL, "--seq", "4096", "--dim", "128", "--array", "32x32", "--bc", "32", "--rtl"]) == 2
    err = capsys.readouterr().err
    assert (f"--rtl: 2 head(s) of {total:,} cycles on a 32x32 array would simulate for about {estimate / 3600:.1f} h; "
            f"allowed: up to {run.RTL_MAX_S // 60} min") in err


def test_without_amaranth_rtl_says_why(capsys, monkeypatch):
    import codesign.rtl

    monkeypatch.setattr(codesign.rtl, "available", lambda: (False, "Amaranth HDL is not installed (pip ...)"))
    assert main(["run", *SMALL, "--rtl"]) == 1
    err = capsys.readouterr().err
    assert "--rtl: Amaranth HDL is not installed" in err and "Traceback" not in err


def test_a_hung_rtl_fails_the_check_not_the_arguments(capsys, monkeypatch):
    monkeypatch.setattr(sim, "hang_limit", lambda datapath, params: 50)  # the head needs 485 cycles
    assert main(["run", *SMALL, "--rtl"]) == 1  # the RTL ran and failed: 1, not a bad argument's 2
    out = capsys.readouterr()
    assert out.out.startswith("datapath ")  # the model's report, computed first, is kept
    assert out.err.splitlines()[-1] == ("kbench: the head engine (sa2x4-os-acc40-e3-div2x18, seq 9, dim 3) did not "
                                        "finish in 50 cycles, the cycle model's bound")


def test_an_interrupted_rtl_keeps_the_models_report(capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sim, "simulate_heads", interrupted)
    assert main(["run", *SMALL, "--rtl"]) == 130
    out = capsys.readouterr()
    assert "verdict    ok" in out.out and "Traceback" not in out.err
    assert out.err.splitlines()[-1] == ("kbench: interrupted; the model's results above stand; the RTL checked "
                                        "nothing")
    assert len([line for line in out.err.splitlines() if line.startswith("kbench:")]) == 2  # the plan, guard's line


def test_progress_counts_every_simulated_cycle():
    dp = Datapath(rows=2, cols=4, exp_lanes=3, dividers=2)
    ones = np.ones((9, 3), np.int16)
    heads = [(ones, ones, ones, Q15Params(9, 3, causal, 4, 16384, 15)) for causal in (True, False)]
    calls = []
    done = sim.simulate_heads(heads, dp, progress=calls.append)
    # every head's cycles from its first QK vector to its last wave's done, and the done cycle itself
    assert sum(calls) == sum(head.cycles + sim.DONE_TICKS for head in done) and sim.DONE_TICKS == 1
    assert all(0 < call <= sim.PROGRESS_CYCLES for call in calls)


ZEROS = np.zeros((3, 2), np.int16)
PARAMS = Q15Params(3, 2, False, 2, 16384, 15)


@pytest.mark.parametrize("q, params, datapath, message", [
    ([[0, 0]] * 3, PARAMS, Datapath(rows=2, cols=2), "q is list; allowed: an int16 numpy array (3, 2)"),
    (ZEROS.astype(np.int32), PARAMS, Datapath(rows=2, cols=2), "q is int32 (3, 2); allowed: int16 (3, 2)"),
    (ZEROS.T, PARAMS, Datapath(rows=2, cols=2), "q is int16 (2, 3); allowed: int16 (3, 2)"),
    (ZEROS, None, Datapath(rows=2, cols=2), "params is NoneType; allowed: a host.q15.Q15Params"),
    (ZEROS, (3, 2, False, 2, 16384, 15), Datapath(rows=2, cols=2), "params is tuple; allowed: a host.q15.Q15Params"),
    (ZEROS, PARAMS, None, "datapath is NoneType; allowed: a codesign.datapath.Datapath"),
    (ZEROS, PARAMS, Datapath(rows=2, cols=4), "bc=2 differs from the array's width 4; allowed: bc=4"),
])
def test_simulate_head_refuses_bad_arguments_in_one_line(q, params, datapath, message):
    with pytest.raises(SpecError) as caught:
        sim.simulate_head(q, ZEROS, ZEROS, params, datapath)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    assert not isinstance(caught.value, TargetError)


def test_lane_sums_are_balanced_trees():
    from amaranth.hdl import Signal, unsigned

    from codesign.rtl.softmax import balanced_sum

    assert balanced_sum([]) == 0 and balanced_sum([5]) == 5
    terms = [Signal(unsigned(15), name=f"p{i}") for i in range(300)]
    total = balanced_sum(terms)

    def depth(value) -> int:  # additions on the longest path from a term to the sum
        operands = getattr(value, "operands", ())
        return 1 + max(depth(o) for o in operands) if operands else 0

    assert depth(total) == 9  # ⌈log₂ 300⌉, not 299: Amaranth elaborates it without deep recursion
    assert total.shape().width >= 15 + 9  # wide enough for 300 terms of 15 bits


@pytest.mark.slow
def test_a_softmax_unit_of_many_lanes_builds_and_agrees():  # 150 lanes: a chain of additions hit the recursion limit
    from codesign.bits import run_head

    rng = np.random.default_rng(3)
    q, k, v = (rng.integers(-32768, 32768, (5, 3), dtype=np.int16) for _ in range(3))
    params, dp = Q15Params(5, 3, True, 2, 20000, 24), Datapath(rows=2, cols=2, exp_lanes=150, dividers=2)
    head = sim.simulate_head(q, k, v, params, dp)
    assert head.out.same_bits(run_head(q, k, v, params, dp).out)


def test_the_estimate_grows_with_what_the_simulator_evaluates():
    small = Datapath(rows=2, cols=2, exp_lanes=1, dividers=1)
    base = sim.estimate_seconds(small, 16, 8, False)
    for bigger, dim in ((Datapath(rows=4, cols=4, exp_lanes=1, dividers=1), 8), (small, 64),
                        (Datapath(rows=2, cols=2, exp_lanes=16, dividers=1), 8),
                        (Datapath(rows=2, cols=2, exp_lanes=1, dividers=64), 8)):
        assert sim.estimate_seconds(bigger, 16, dim, False) > base
    build = sim.estimate_seconds(small, 16, 8, False, heads=0)
    assert sim.estimate_seconds(small, 16, 8, False, heads=2) - build == pytest.approx(2 * (base - build))


def test_the_estimate_holds_to_the_measured_heads_it_was_fitted_to():
    """reports/issue-33/rtl/sim_speed.txt: each head's simulate_heads CPU seconds (build, load, run, read back)
    against estimate_seconds for it, within the band `run --rtl` prints (sim.ESTIMATE_ERROR)."""
    path = Path(__file__).resolve().parents[2] / "reports" / "issue-33" / "rtl" / "sim_speed.txt"
    with open(path, encoding="utf-8") as handle:
        lines = [line.split() for line in handle if line.strip() and not line.startswith("#")]
    assert len(lines) >= 20
    for R, C, E, D, seq, dim, causal, _, _, _, _, cpu_s, *_ in lines:
        dp = Datapath(rows=int(R), cols=int(C), exp_lanes=int(E), dividers=int(D))
        estimate = sim.estimate_seconds(dp, int(seq), int(dim), causal == "1")
        assert abs(estimate / float(cpu_s) - 1) <= sim.ESTIMATE_ERROR, (dp.name, seq, dim, estimate, cpu_s)
