"""`python -m codesign run --rtl`: every head of the problem through the RTL beside the model, the command failing
when outputs or stage cycles differ, and the RTL's preconditions refused in one line before anything runs."""

from __future__ import annotations

import pytest

pytest.importorskip("amaranth")

import codesign.rtl.sim as sim  # noqa: E402
from codesign.__main__ import main  # noqa: E402
from codesign.cycles import head_cycles  # noqa: E402
from codesign.datapath import Datapath  # noqa: E402

SMALL = ["--seq", "9", "--dim", "3", "--heads", "2", "--array", "2x4", "--exp-lanes", "3", "--dividers", "2"]


def test_every_head_through_the_rtl_agrees_with_the_model(capsys):
    assert main(["run", *SMALL, "--causal", "--rtl"]) == 0
    out = capsys.readouterr()
    assert "2 head(s) simulated" in out.out and "outputs equal the model's: yes" in out.out
    expected = head_cycles(Datapath(rows=2, cols=4, exp_lanes=3, dividers=2), 9, 3, True).stages
    rtl_lines = out.out.split("\nrtl ")[1].splitlines()
    for name, stage in expected.items():  # the model's busy cycles, then the RTL's, equal
        [line] = [line for line in rtl_lines if line.split()[:1] == [name]]
        assert line.split()[1:] == [f"{stage.busy_cycles:,}"] * 2
    assert "the RTL will simulate 2 head(s)" in out.err


def test_an_rtl_that_differs_fails_the_command(capsys, monkeypatch):
    real = sim.simulate_heads

    def off_by_one(heads, datapath):
        done = real(heads, datapath)
        first = done[0]
        out = first.out.copy()
        out[0, 0] ^= 1
        cycles = dict(first.stage_cycles, softmax=first.stage_cycles["softmax"] + 1)
        return [type(first)(out, cycles, first.cycles, first.sim_seconds), *done[1:]]

    monkeypatch.setattr(sim, "simulate_heads", off_by_one)
    assert main(["run", *SMALL, "--rtl"]) == 1
    out = capsys.readouterr().out
    assert "outputs equal the model's: NO" in out and "DIFFERS" in out.split("softmax")[-1].splitlines()[0]


@pytest.mark.parametrize("extra,message", [
    (["--dataflow", "ws"], "--rtl: dataflow='ws' has no RTL array; allowed: os"),
    (["--div-latency", "17"], "--rtl: div-latency=17 is below the RTL divider's minimum; allowed: 18..256"),
    (["--seq", "4096", "--dim", "128", "--array", "32x32"], "allowed: up to 60 min"),
])
def test_what_the_rtl_cannot_run_is_refused_in_one_line_first(capsys, monkeypatch, extra, message):
    monkeypatch.setattr(sim, "simulate_heads", lambda *a: pytest.fail("simulated a refused problem"))
    assert main(["run", *SMALL, *extra, "--rtl"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and message in out.err and len(out.err.strip().splitlines()) == 1


def test_without_amaranth_rtl_says_why(capsys, monkeypatch):
    import codesign.rtl

    monkeypatch.setattr(codesign.rtl, "available", lambda: (False, "Amaranth HDL is not installed (pip ...)"))
    assert main(["run", *SMALL, "--rtl"]) == 1
    err = capsys.readouterr().err
    assert "--rtl: Amaranth HDL is not installed" in err and "Traceback" not in err
