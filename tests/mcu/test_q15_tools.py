"""The tools behind docs/q15.md's error table and docs/performance.md's Q15 and link figures, each on a tiny case:
`python -m host.q15_error` (the contract against fp16), `python -m mcu.q15_bench` (and its bit-exactness check
before timing), and `python -m mcu.link_bench` on the twin (and its checks of the READ round trip and the head)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from host import q15, q15_error
from mcu import q15_bench, q15_c
from host.errors import TargetError
from host.q15_accuracy import compare
from helpers import run_module


def test_q15_error_prints_the_table_of_its_comparisons():
    done = run_module("host.q15_error", "--seq", "17", "--dim", "8", "--causal", "0", "--inputs", "normal",
                      "--bc", "5")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == q15_error.table([compare("normal", 17, 8, False, 5)])


def test_q15_error_says_each_shape_on_stderr_as_it_is_measured(capsys):
    assert q15_error.main(["--seq", "8,17", "--dim", "4", "--inputs", "normal", "--causal", "both"]) == 0
    said = capsys.readouterr()
    assert said.out.count("| inputs | causal | seq | d |") == 1 and said.out.count("| normal |") == 4  # the table
    lines = said.err.splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        "kbench: q15_error 1/4 normal seq 8 d 4", "kbench: q15_error 2/4 normal seq 17 d 4",
        "kbench: q15_error 3/4 normal seq 8 d 4 causal", "kbench: q15_error 4/4 normal seq 17 d 4 causal"]
    assert all(re.search(r" \(\d+\.\d s\)$", line) for line in lines)


def test_q15_bench_says_each_step_on_stderr(capsys):
    assert q15_bench.main(["--seq", "17", "--dim", "8", "--bc", "1,5", "--repeats", "1"]) == 0
    said = capsys.readouterr()
    assert "| 5 |" in said.out and "kbench" not in said.out
    steps = [line.rsplit(" (", 1)[0] for line in said.err.splitlines()]
    assert steps[0] == "kbench: q15_bench seq 17 dim 8: timing the float32 reference (the anchor)"
    assert steps[1:4] == ["kbench: q15_bench Bc 1 (1/2): checking the C kernel against the model and the golden",
                          "kbench: q15_bench Bc 1 (1/2): timing the numpy model",
                          "kbench: q15_bench Bc 1 (1/2): timing the C kernel"]
    assert len(steps) == 7 and steps[-1] == "kbench: q15_bench Bc 5 (2/2): timing the C kernel"


def test_q15_bench_prints_a_row_per_key_block():
    done = run_module("mcu.q15_bench", "--seq", "17", "--dim", "8", "--bc", "1,5", "--repeats", "1")
    assert done.returncode == 0, done.stderr
    assert "C kernel bit-exact with the model at every Bc" in done.stdout
    rows = [line for line in done.stdout.splitlines() if re.match(r"\| \d+ \|", line)]
    assert [row.split("|")[1].strip() for row in rows] == ["1", "5"]


def test_q15_bench_refuses_to_time_a_kernel_that_differs_from_the_model(monkeypatch, capsys):
    exact = q15_c.attention_rows

    def off_by_one(params, q, k, v, row0=0):
        out = exact(params, q, k, v, row0)
        out.o[3, 2] += 1
        return out

    monkeypatch.setattr(q15_c, "attention_rows", off_by_one)
    assert q15_bench.main(["--seq", "17", "--dim", "8", "--bc", "5", "--repeats", "1"]) == 1
    said = capsys.readouterr()
    assert said.out == ""  # nothing timed, no table
    [line] = [line for line in said.err.splitlines() if not line.startswith("kbench: q15_bench ")]  # no progress
    assert line.startswith("kbench: host C kernel, seq 17, dim 8, Bc 5: wrong (Q15 contract): not bit-exact")
    assert "1 of 136 values differ: O(0, 0, 3, 2)" in line


def test_link_bench_round_trip_check_names_the_first_difference():
    from mcu.link_bench import check_round_trip

    check_round_trip(b"\x01\x02\x03", b"\x01\x02\x03")
    with pytest.raises(TargetError, match=r"1 of 3 differ, the first at offset 1: wrote 0x02, read 0x06$"):
        check_round_trip(b"\x01\x02\x03", b"\x01\x06\x03")
    with pytest.raises(TargetError, match="READ returned 2 bytes of K; LOAD wrote 3"):
        check_round_trip(b"\x01\x02\x03", b"\x01\x02")


def test_link_bench_reads_stolen_cpu_time_or_says_it_cannot(tmp_path):
    from mcu.link_bench import cpu_ticks, stolen_line, stolen_share

    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 50 0 25 400 5 0 2 18 0 0\n")
    before = cpu_ticks(stat)
    assert before == (100, 0, 50, 800, 10, 0, 5, 35)
    stat.write_text("cpu  160 0 70 900 10 0 5 55 0 0\n")
    share = stolen_share(before, cpu_ticks(stat))
    assert share == pytest.approx(20 / 200)
    assert "10.0%" in stolen_line(share) and "understate" in stolen_line(share)
    assert "understate" not in stolen_line(0.01)
    stat.write_text("cpu  1 2 3 4\n")  # a kernel without steal accounting
    assert cpu_ticks(stat) is None and cpu_ticks(tmp_path / "absent") is None
    assert stolen_share(None, before) is None and stolen_share(before, before) is None
    assert "not known" in stolen_line(None)


def test_link_bench_on_the_twin():
    pytest.importorskip("mpremote", reason="mpremote is not installed (pip install -e '.[mcu]')")
    pytest.importorskip("unicorn", reason="unicorn is not installed (pip install -e '.[mcu]')")
    done = run_module("mcu.link_bench", "--seq", "17", "--dim", "8", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    cycles = re.search(r"\| DWT cycles of the head \| (\d+) =", done.stdout)
    assert cycles and int(cycles.group(1)) > 17 * 17 * 8, done.stdout  # at least a cycle per multiply-accumulate
    for measure in ("| 1 (stop-and-wait) |", "windowed / stop-and-wait LOAD throughput:", "| READ throughput",
                    "| head seq 17 dim 8: wall", "| ... waiting for RUN",
                    "CPU time stolen by a hypervisor during the windows: "):
        assert measure in done.stdout, measure
    assert re.search(r"\| 32 \| \d+ \|", done.stdout) and re.search(r"\| 64 \| \d+ \|", done.stdout)
    steps = [line.rsplit(" (", 1)[0] for line in done.stderr.splitlines() if line.startswith("kbench: link_bench ")]
    assert steps[0] == "kbench: link_bench starting the twin" and steps[-1].endswith("the head measured and checked")
    rounds = [step for step in steps if re.match(r"kbench: link_bench round \d/5: window \d measured, \d+ kB/s$", step)]
    assert len(rounds) == 5 * 5  # every window of every round (1, 2, 3, 4, 8: the default windows)
    assert "kbench: link_bench the head: seq 17 dim 8" in steps


def test_a_twin_that_cannot_start_is_one_line_with_its_reason_not_a_traceback():
    """node missing (PATH without it): the twin exits at once, and link_bench says why in one line (it read the
    twin's closed stderr and ended in a ValueError traceback)."""
    import os

    done = run_module("mcu.link_bench", "--seq", "16", "--dim", "8", "--rounds", "1", "--windows", "1",
                      env={**os.environ, "PATH": "/nonexistent"}, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("kbench: the twin exited (status 1) before it started: ") and "node" in last, last


def test_link_bench_refuses_a_head_the_board_cannot_hold_before_it_measures_the_windows():
    """seq 4096 at d 256 needs over 64 KB of board heap even streamed (64 keys of K and V^T alone are 2·64·256·2 =
    65,536 B, above the twin's 29,920 B largest block): said at once from HELLO, not after minutes of LOAD windows
    whose figures were then thrown away."""
    from helpers.twin import twin_missing

    if twin_missing():
        pytest.skip(twin_missing())
    done = run_module("mcu.link_bench", "--seq", "4096", "--dim", "256", "--rounds", "1", "--windows", "1",
                      timeout=120)
    assert done.returncode == 1 and "measured" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("kbench: seq=4096 dim=256 needs ") and "bytes of board heap even streamed" in last, last


def test_link_bench_refuses_a_head_that_differs_from_the_model(monkeypatch):
    """The head check: a board whose output is one LSB off ends the run with a TargetError naming the element."""
    from mcu import head, link_bench

    def one_lsb_off(session, params, q, k, v, repeats):
        out = q15.attention_q15(q, k, v, params)
        out.o[0, 1] += 1
        return type("Head", (), {"out": out, "cycles": np.array([1000])})()

    class FakeLink:
        port = "fake"
        stats = type("Stats", (), {"seconds": {}, "bytes_in": 0, "bytes_out": 0})()

    monkeypatch.setattr(head, "run_head", one_lsb_off)
    with pytest.raises(TargetError, match=r"the board's head \(seq 17, dim 8\): wrong \(Q15 contract\): not "
                                          r"bit-exact with host/q15.py \(1 of 136 values differ: O\(0, 0, 0, 1\)"):
        link_bench.head_split(FakeLink(), 17, 8)


def test_a_board_that_does_not_say_its_clock_gets_a_wait_at_the_slowest_clock():
    # HELLO's clock_hz is 0 where a port has no machine.freq() (the unix port): the wait for a RUN must not
    # divide by zero; it assumes the F407's internal 16 MHz oscillator, so it is never shorter than the board needs.
    from mcu.cycles import UNKNOWN_CLOCK_HZ, board_seconds
    assert board_seconds(168_000_000, 0) == 168_000_000 / UNKNOWN_CLOCK_HZ == 10.5
    assert board_seconds(168_000_000, 168_000_000) == 1.0
