"""mcu.sim.bench's command line: a head too large for the emulated SRAM is one line whose formula is what the call
allocates (8·seq·dim + seq B in one pass since q15attn 4's row shifts; what a streamed call takes), and
`--causal both` prints each mask's table as it is done, so a failure in the second keeps the first."""

from __future__ import annotations

import re

import pytest

from helpers.twin import needs_emulator
from host.errors import TargetError
from mcu.sim import bench


def call_bytes(buffers: int) -> int:
    """What a call places in emulated SRAM beside its buffers (q15emu's _place): six int32 parameters, a descriptor
    (typecode, length) per buffer, two result words and the message buffer, each on 8 bytes."""
    from mcu.sim.q15emu import MESSAGE_BYTES

    return sum((n + 7) & ~7 for n in (4 * 6, 8 * buffers, 8, MESSAGE_BYTES))


@needs_emulator
@pytest.mark.parametrize("argv, buffers", [
    (["--seq", "512", "--dim", "64"], 5),  # one pass: q, k, vt, o, oshift
    (["--seq", "40", "--dim", "256", "--bc", "8", "--keys", "32"], 6),  # one pass fits; a streamed call, with state,
])                                                                      # does not
def test_a_head_too_large_for_the_emulated_sram_names_what_the_call_allocates(argv, buffers, capsys):
    assert bench.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(f"kbench: error: --seq {argv[1]} --dim {argv[3]}: "), err
    allocated = int(re.search(r"allocating (\d+) bytes", err).group(1))
    formula = int(re.search(r"= ([\d,]+) B\)$", err.strip()).group(1).replace(",", ""))
    assert allocated == formula + call_bytes(buffers), err  # these shapes' buffers are whole 8-byte blocks
    if buffers == 5:
        assert "8·seq·dim + seq = 262,656 B" in err  # 8 · 512 · 64 + 512


def test_causal_both_prints_the_first_table_before_the_second_fails(monkeypatch, capsys):
    def fake(seq, dim, bcs, causal, keys=()):
        if causal:
            raise TargetError("the twin's Bc 64 output is not bit-exact with host/q15.py: O(0, 0) = 1, model 2",
                              status="wrong")
        return "| the table of the head without a mask |"

    monkeypatch.setattr(bench, "bench", fake)
    assert bench.main(["--causal", "both"]) == 1
    out, err = capsys.readouterr()
    assert out == "| the table of the head without a mask |\n"
    assert err.startswith("kbench: the twin's Bc 64 output is not bit-exact")


def test_causal_both_prints_both_tables_a_blank_line_apart(monkeypatch, capsys):
    monkeypatch.setattr(bench, "bench", lambda seq, dim, bcs, causal, keys=(): f"| causal {causal} |")
    assert bench.main(["--causal", "both"]) == 0
    assert capsys.readouterr().out == "| causal False |\n\n| causal True |\n"
