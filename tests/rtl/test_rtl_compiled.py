"""The compiled simulator (codesign/rtl/compiled.py: Verilator on Amaranth's Verilog of the head engine) against
Amaranth's own (codesign/rtl/sim.py): the same output bits and the same stage and total cycles, head for head, on
heads of awkward shapes (R > C, a short last block, causal rows with no key in a block, d = 1), and the contract's
bits. Skipped with its reason where Verilator is missing; one engine is built (about a minute on 2 cores)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("amaranth", reason="Amaranth HDL is not installed (pip install -e '.[rtl]')")

from codesign.datapath import Datapath
from codesign.rtl import compiled
from codesign.rtl.sim import model_cycles, schedule_cycles, simulate_heads
from host.errors import SpecError, UnavailableError
from host.problem import AttentionProblem
from host.q15 import Q15Params, attention_q15, prepare, score_scale

#: R > C and E < C: causal tiles with rows that see no key of a block, and a short last block at seq 13
DATAPATH = Datapath(rows=4, cols=2, exp_lanes=1, dividers=3)


def _heads() -> list:
    """(q, k, v, params): the problem's realistic inputs, and uniform int16 at a saturating score scale."""
    heads = []
    for seq, dim, causal in ((13, 5, True), (13, 5, False), (4, 1, True), (1, 3, False)):
        problem = AttentionProblem(seq=seq, dim=dim, causal=causal, seed=seq + dim)
        quantized = prepare(problem, *problem.inputs(), DATAPATH.cols)
        heads.append((*quantized.head(0, 0), quantized.params))
    rng = np.random.default_rng(5)
    heads.append((*(rng.integers(-32768, 32768, (7, 4)).astype(np.int16) for _ in range(3)),
                  Q15Params(7, 4, True, DATAPATH.cols, *score_scale(8, 8, 4))))
    return heads


@pytest.mark.slow  # it builds an engine with Verilator and g++ (about a minute on 2 cores)
@pytest.mark.skipif(bool(compiled.verilator_missing()), reason=compiled.verilator_missing() or "verilator found")
def test_the_compiled_engine_gives_the_python_simulators_bits_and_cycles():
    heads = _heads()
    python = simulate_heads(heads, DATAPATH)
    built = compiled.simulate_heads_compiled(heads, DATAPATH)
    assert len(built) == len(heads)
    for (q, k, v, params), ours, theirs in zip(heads, built, python):
        assert ours.out.same_bits(theirs.out) and ours.out.same_bits(attention_q15(q, k, v, params))
        assert ours.stage_cycles == theirs.stage_cycles
        assert ours.cycles == theirs.cycles == model_cycles(DATAPATH, params.seq, params.dim, params.causal)[0]
        assert ours.cycles == schedule_cycles(DATAPATH, params.seq, params.dim, params.causal)
    # the build is kept: a second run of the same engine builds nothing
    assert compiled.build(DATAPATH, max(h[3].seq for h in heads), max(h[3].dim for h in heads))[1] == 0.0


def test_a_missing_verilator_is_one_line(monkeypatch):
    monkeypatch.setattr(compiled.shutil, "which", lambda name: None)
    assert compiled.verilator_missing() == compiled.MISSING_VERILATOR
    with pytest.raises(UnavailableError, match="^verilator not found: install Debian's verilator"):
        compiled.simulate_heads_compiled(_heads()[:1], DATAPATH)


def test_bad_heads_are_refused_before_a_build():
    q = np.zeros((2, 3), dtype=np.int16)
    with pytest.raises(SpecError, match="^bc=4 differs from the array's width 2"):
        compiled.simulate_heads_compiled([(q, q, q, Q15Params(2, 3, False, 4, *score_scale(0, 0, 3)))], DATAPATH)
