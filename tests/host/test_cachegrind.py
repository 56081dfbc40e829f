"""host/cpu/cachegrind.py: the out-file parser, the differential mapping, the failure paths, and one real valgrind run.

The failure paths run a fake `valgrind` (a shell script first on PATH) so they need no valgrind. The real run is
marked slow: four valgrind processes (two problems, a full and a baseline run each), about 10-15 s apiece, two at a
time on two cores.
"""

from __future__ import annotations

import os
import time

import pytest

from host.cpu import cachegrind
from host.cpu.cachegrind import SOURCE, counters_from_totals, parse_out, simulate_reference
from host.cpu.perf import Counters
from host.problem import AttentionProblem

SAMPLE = """\
desc: I1 cache:         32768 B, 64 B, 8-way associative
desc: D1 cache:         32768 B, 64 B, 8-way associative
desc: LL cache:         268435456 B, 64 B, direct-mapped
cmd: /usr/bin/python3 -m host.cpu.cachegrind --batch 1 --heads 1 --seq 64 --dim 16 --causal 0 --seed 0 --measured
events: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw\x20
fl= ???
fn=0x0000000000001090
0 7 1 1 2 0 0 1 0 0
fl= /usr/src/python/Objects/obmalloc.c
fn=pymalloc_alloc
1443 120 0 0 40 2 0 10 1 0
summary: 557784234 6594666 27481 163722454 5118967 97818 80879749 790492 251550
"""

BASELINE = {"Ir": 557397503, "I1mr": 6584357, "ILmr": 27481, "Dr": 163581119, "D1mr": 5113203, "DLmr": 97818,
            "Dw": 80810395, "D1mw": 788622, "DLmw": 251547}


def test_parse_out_reads_events_summary_and_ll():
    totals, ll = parse_out(SAMPLE)
    assert totals == {"Ir": 557784234, "I1mr": 6594666, "ILmr": 27481, "Dr": 163722454, "D1mr": 5118967,
                      "DLmr": 97818, "Dw": 80879749, "D1mw": 790492, "DLmw": 251550}
    assert ll == "268435456 B, 64 B, direct-mapped"


def test_parse_out_rejects_broken_files():
    with pytest.raises(ValueError, match="summary"):
        parse_out(SAMPLE.replace("summary:", "totals:"))
    with pytest.raises(ValueError, match="9 events"):
        parse_out(SAMPLE.replace("summary: 557784234 ", "summary: "))


def test_mapping_is_full_minus_baseline():
    full, ll = parse_out(SAMPLE)
    counters = counters_from_totals(full, BASELINE, ll)
    assert counters.instructions == 557784234 - 557397503
    assert counters.llc_loads == (5118967 - 5113203) + (790492 - 788622)  # D1mr + D1mw
    assert counters.llc_misses == (97818 - 97818) + (251550 - 251547)  # DLmr + DLmw
    assert counters.cycles is None and counters.ipc() is None
    assert counters.source == SOURCE == "cachegrind (simulated)"
    assert "cycles are not simulated" in counters.reason and "direct-mapped" in counters.reason
    fields = counters.as_fields()
    assert fields["cpu_cycles"] is None and fields["counters_source"] == SOURCE


def test_a_negative_difference_is_missing_with_a_reason_not_a_number():
    full, _ = parse_out(SAMPLE)
    baseline = dict(BASELINE, DLmw=BASELINE["DLmw"] + 100)
    counters = counters_from_totals(full, baseline)
    assert counters.llc_misses is None and counters.llc_loads is not None
    assert "llc_misses below the run-to-run noise" in counters.reason


def test_missing_events_say_so():
    full, _ = parse_out(SAMPLE)
    counters = counters_from_totals({"Ir": full["Ir"]}, BASELINE)
    assert counters == Counters.missing(counters.reason) and "D1mr" in counters.reason


def test_both_runs_have_command_lines_of_one_length():
    problem = AttentionProblem(batch=2, heads=3, seq=17, dim=59, causal=True, seed=7)
    full, base = cachegrind.probe_args(problem, False), cachegrind.probe_args(problem, True)
    assert len(full) == len(base) and sum(map(len, full)) == sum(map(len, base))
    assert base[-1] == "--baseline" and full[:-1] == base[:-1]
    assert full[:-1] == ["--batch", "2", "--heads", "3", "--seq", "17", "--dim", "59", "--causal", "1", "--seed", "7"]


def test_probe_runs_in_process_and_rejects_both_modes(capsys):
    assert cachegrind.main(["--batch", "1", "--heads", "2", "--seq", "5", "--dim", "3", "--causal", "1", "--seed",
                            "1", "--baseline"]) == 0
    assert cachegrind.main(["--batch", "1", "--heads", "1", "--seq", "5", "--dim", "3", "--causal", "0", "--seed",
                            "1", "--baseline", "--measured"]) == 2
    assert capsys.readouterr().err.startswith("kbench: error: argument --measured: not allowed with argument")


def test_child_env_pins_one_thread_and_finds_the_project(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = cachegrind.child_env()
    assert env["OPENBLAS_NUM_THREADS"] == env["OMP_NUM_THREADS"] == "1" and env["PYTHONHASHSEED"] == "0"
    assert env["PYTHONPATH"].split(os.pathsep) == [str(cachegrind.PROJECT_ROOT), "/elsewhere"]
    assert (cachegrind.PROJECT_ROOT / "host" / "cpu" / "cachegrind.py").is_file()


def test_no_valgrind_is_a_reason(monkeypatch):
    monkeypatch.setattr(cachegrind.shutil, "which", lambda name: None)
    assert cachegrind.cachegrind_available() == (False, "valgrind not installed (apt install valgrind)")
    counters = simulate_reference(AttentionProblem(seq=64, dim=16))
    assert counters == Counters.missing("valgrind not installed (apt install valgrind)")


def _fake_valgrind(tmp_path, monkeypatch, body: str) -> None:
    script = tmp_path / "valgrind"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")


def test_a_failing_valgrind_gives_its_last_stderr_line(tmp_path, monkeypatch):
    _fake_valgrind(tmp_path, monkeypatch, "echo 'first line' >&2\necho 'valgrind: m_debuginfo: boom' >&2\nexit 3\n")
    counters = simulate_reference(AttentionProblem(seq=64, dim=16))
    assert (counters.llc_loads, counters.llc_misses, counters.instructions, counters.cycles) == (None,) * 4
    assert "exit 3" in counters.reason and counters.reason.endswith("valgrind: m_debuginfo: boom")


def test_a_valgrind_that_writes_no_out_file(tmp_path, monkeypatch):
    _fake_valgrind(tmp_path, monkeypatch, "exit 0\n")
    counters = simulate_reference(AttentionProblem(seq=64, dim=16))
    assert counters.instructions is None and "no usable out file" in counters.reason


def test_a_valgrind_past_its_timeout_is_stopped(tmp_path, monkeypatch):
    _fake_valgrind(tmp_path, monkeypatch, "exec sleep 30\n")
    start = time.monotonic()
    counters = simulate_reference(AttentionProblem(seq=64, dim=16), timeout_s=0.5)
    assert time.monotonic() - start < 10
    assert counters.instructions is None and "timeout_s=0.5" in counters.reason


@pytest.mark.slow
def test_real_cachegrind_run():
    ok, reason = cachegrind.cachegrind_available()
    if not ok:
        pytest.skip(reason)
    start = time.monotonic()
    small = simulate_reference(AttentionProblem(seq=64, dim=16, heads=1))
    mid = time.monotonic()
    large = simulate_reference(AttentionProblem(seq=256, dim=16, heads=1))
    end = time.monotonic()
    print(f"\nseq=64:  {small} ({mid - start:.1f} s)\nseq=256: {large} ({end - mid:.1f} s)")
    for counters in (small, large):
        assert counters.source == SOURCE, counters.reason
        assert counters.instructions is not None and counters.instructions > 0
        assert counters.llc_loads is not None and counters.llc_misses is not None
        assert counters.llc_loads >= counters.llc_misses >= 0
        assert counters.cycles is None and "cycles are not simulated" in counters.reason
    assert large.instructions > small.instructions
