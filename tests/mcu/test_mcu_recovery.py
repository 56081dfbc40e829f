"""The MCU target recovers what can be recovered and says what happened: a twin killed mid-sweep is restarted at
once, a head resumes after a reset where it stopped, a line that resets faster than any chunk fails with each
session's progress, a twin call over the emulation cap is refused before it is sent, and a host killed with SIGKILL
leaves no twin root behind at the next start."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from helpers.twin import needs_twin
from host import q15
from host.sweep import cli as compare
from host.errors import TargetError
from host.results_file import ResultsFile
from mcu import cycles, head, target
from mcu.twin_process import ROOT_PREFIX, remove_stale_roots



def sweep(tmp_path, *extra):
    return compare.main(["--targets", "mcu", "--sim", "--seq", "64", "--dim", "16", "--heads", "2", "--causal", "0",
                         "--out", str(tmp_path), *extra])


@needs_twin
def test_a_twin_killed_mid_sweep_is_restarted_and_the_row_says_so(monkeypatch, tmp_path):
    real, calls = target.run_head, []

    def run_head(session, params, q, k, v, repeats):
        calls.append(1)
        if len(calls) == 2:  # the second head: the twin dies under the host
            session.twin.process.kill()
            session.twin.process.wait()
        return real(session, params, q, k, v, repeats)

    monkeypatch.setattr(target, "run_head", run_head)
    assert sweep(tmp_path) == 0
    [row] = ResultsFile(tmp_path / "results.csv").read()
    assert row.status == "ok" and row.bit_exact is True
    assert "the twin exited (status -9) and was restarted" in row.message


@needs_twin
def test_a_head_resumes_after_a_reset_where_it_stopped(tmp_path):
    """reset=150: the twin resets on every 150th frame it receives, in the middle of a 128 x 64 head (streamed on the
    board's real heap, query rows in chunks); the chunks done before a reset are kept, so the head goes on in a new
    session where it stopped and the output is still bit-exact."""
    assert compare.main(["--targets", "mcu", "--sim", "--seq", "128", "--dim", "64", "--heads", "1", "--causal", "0",
                         "--sim-faults", "reset=150", "--out", str(tmp_path)]) == 0
    [row] = ResultsFile(tmp_path / "results.csv").read()
    assert row.status == "ok" and row.bit_exact is True
    done = re.search(r"head 0,0 resumed over (\d+) sessions \(query rows done per session: ([\d, ]+)\)", row.message)
    assert done, row.message
    per_session = [int(x) for x in done.group(2).split(", ")]
    assert int(done.group(1)) == len(per_session) >= 2 and sum(per_session) == 128 and per_session[0] > 0


@needs_twin
def test_a_line_that_resets_before_any_chunk_fails_naming_each_sessions_progress(tmp_path):
    assert sweep(tmp_path, "--sim-faults", "reset=6") == 1
    [row] = ResultsFile(tmp_path / "results.csv").read()
    assert row.status == "error" and row.p50_ms is None
    assert "5 sessions in a row completed no chunk (query rows done per session: 0, 0, 0, 0, 0 of 64)" in row.message


class FakeTwin:
    def exit_code(self):
        return None


class FakeLink:
    hello = None


def test_a_twin_call_over_the_emulation_cap_is_refused_before_it_is_sent():
    params = q15.Q15Params(14000, 1, False, 32, 23170, 22)
    session = head.Session(FakeLink(), "pty", "twin", twin=FakeTwin())
    with pytest.raises(TargetError) as info:
        head.run_wait(session, params, 0, 14000, 1, 168_000_000)
    estimate = cycles.kernel_cycles(14000, 1, 0, 14000, False)
    text = str(info.value)
    assert f"need ~{cycles.twin_seconds(estimate):.0f} s of emulation" in text and "cap of 600 s" in text
    assert f"a board runs them in {estimate / 168e6:.1f} s" in text
    board = head.Session(FakeLink(), "ttyACM0", "board")  # the same call on a board: waited for, not refused
    assert head.run_wait(board, params, 0, 14000, 1, 168_000_000) == pytest.approx(4 * estimate / 168e6)


def test_the_cycle_estimate_bounds_the_twins_measured_cycles():
    """mcu/cycles.py's docstring figures: the estimate lies above the cycle model's counts at those shapes."""
    pytest.importorskip("unicorn", reason="unicorn is not installed (pip install -e '.[mcu]')")
    from mcu.sim.q15emu import shared_emulator

    rng = np.random.default_rng(0)
    for seq, dim, causal in ((64, 1, False), (64, 16, False), (97, 59, True), (32, 128, False)):
        q, k, v = (rng.integers(-16000, 16000, (seq, dim)).astype(np.int16) for _ in range(3))
        for bc in (32, q15.BC):  # the docstring's figures, and the contract's Bc every row runs at
            _, measured, _ = shared_emulator().run(q15.Q15Params(seq, dim, causal, bc, 23170, 22), q, k, v)
            estimate = cycles.kernel_cycles(seq, dim, 0, seq, causal)
            assert measured <= estimate <= 1.35 * measured + 200_000, (seq, dim, bc, measured, estimate)


def test_the_emulation_cap_error_names_the_cap_and_the_expected_time():
    pytest.importorskip("unicorn", reason="unicorn is not installed (pip install -e '.[mcu]')")
    from mcu.sim.q15emu import shared_emulator

    rng = np.random.default_rng(1)
    # 256×48 (96 KB of buffers: the emulated SRAM holds 112 KB): about 0.04 s of emulation with the C block hook,
    # twenty times the cap (a 256×32 head takes about 0.03 s now, under the 0.05 s cap this test once set)
    q, k, v = (rng.integers(-16000, 16000, (256, 48)).astype(np.int16) for _ in range(3))
    emulator = shared_emulator()
    real_call = emulator.cpu.call

    def short_cap(name, *args, timeout_s=600.0, expected_s=None):
        return real_call(name, *args, timeout_s=0.002 if name == "q15attn_rows_timed" else timeout_s,
                         expected_s=expected_s)

    emulator.cpu.call = short_cap
    try:
        with pytest.raises(TimeoutError, match=r"within the twin's emulation cap of 0 s; this call was expected to "
                                               r"need ~\d+ s"):
            emulator.run(q15.Q15Params(256, 48, False, q15.BC, 23170, 22), q, k, v)
    finally:
        del emulator.cpu.call


def test_stale_twin_roots_of_dead_hosts_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"{ROOT_PREFIX}{int(dead.stdout)}-abc"
    mine = tmp_path / f"{ROOT_PREFIX}{os.getpid()}-def"
    other = tmp_path / "kbench-twin-notapid"
    for folder in (stale, mine, other):
        (folder / "flash").mkdir(parents=True)
    assert remove_stale_roots(str(tmp_path)) == [stale]
    assert not stale.exists() and mine.exists() and other.exists()
