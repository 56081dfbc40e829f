"""host.compare and its --out lock (host/out_lock.py): a second sweep into a folder another is writing is refused in
one line and changes nothing there; a killed sweep's lock is taken over; two resumes started together measure each
configuration once. And its signals: SIGTERM 143, SIGINT 130 even where a shell started it with SIGINT ignored."""

from __future__ import annotations

import csv
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import ROOT, folder_bytes
from host.out_lock import LOCK_NAME
from host.sweep import cli as compare

HOST = socket.gethostname()
#: A CPU sweep of a few small rows (seconds), and the command line that runs it as `python -m host.compare`.
SMALL = ["--targets", "cpu", "--seq", "8,16", "--dim", "4", "--heads", "1", "--causal", "0", "--iters", "2",
         "--warmup", "0"]
COMMAND = [sys.executable, "-m", "host.compare"]
#: Enough rows that a sweep is still running when a second one starts: 24 configurations.
LONGER = ["--targets", "cpu", "--seq", "8,16,24,32,40,48,56,64,72,80,88,96", "--dim", "4", "--heads", "1",
          "--causal", "both", "--iters", "3", "--warmup", "0"]


@pytest.fixture(autouse=True)
def _signals(keep_signals):
    """Every test here may run a sweep in this process: its signal handlers are undone after each (conftest)."""


def configurations(out: Path) -> list[tuple[str, ...]]:
    """Each row's configuration (target, kernel, dtype, B, H, N, d, causal) in results.csv, in file order."""
    with open(out / "results.csv", newline="", encoding="utf-8") as handle:
        return [tuple(row[k] for k in ("target", "kernel", "dtype", "batch", "heads", "seq", "dim", "causal"))
                for row in csv.DictReader(handle)]


def dead_pid() -> int:
    """A PID no process holds now, as a killed sweep's lock leaves."""
    pid = int(Path("/proc/sys/kernel/pid_max").read_text()) - 1
    while Path(f"/proc/{pid}").exists():
        pid -= 1
    return pid


@pytest.mark.parametrize("resume", [False, True])
def test_a_second_sweep_into_a_held_out_exits_1_naming_the_holder_and_changes_nothing(tmp_path, capsys, resume):
    out = tmp_path / "o"
    assert compare.main([*SMALL, "--out", str(out)]) == 0
    (out / "results.csv").write_bytes((out / "results.csv").read_bytes() + b"torn,row")  # a resume would repair it
    lock = out / LOCK_NAME
    lock.write_text(f"{os.getpid()} {HOST} host.compare\n")  # a running sweep: this test's own process
    before = folder_bytes(out)
    capsys.readouterr()
    assert compare.main([*SMALL, *(["--resume"] if resume else []), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == (f"kbench: --out {out}: another sweep is writing there (host.compare, PID {os.getpid()} on {HOST}, "
                   f"{lock})\n")
    assert folder_bytes(out) == before  # results.csv (torn tail and all) and runs.jsonl as they were, nothing aside


def test_the_cluster_path_takes_the_lock_before_it_connects(tmp_path, capsys):
    pytest.importorskip("distributed")
    out = tmp_path / "o"
    out.mkdir()
    lock = out / LOCK_NAME
    lock.write_text(f"{os.getpid()} {HOST} kernels.sweep\n")
    assert compare.main([*SMALL, "--cluster", "tcp://127.0.0.1:9", "--out", str(out)]) == 1
    assert capsys.readouterr().err == (f"kbench: --out {out}: another sweep is writing there (kernels.sweep, PID "
                                       f"{os.getpid()} on {HOST}, {lock})\n")
    assert folder_bytes(out) == {LOCK_NAME: f"{os.getpid()} {HOST} kernels.sweep\n".encode()}


def test_a_killed_sweeps_lock_is_taken_over_in_one_line_and_the_sweep_runs(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    dead = dead_pid()
    lock = out / LOCK_NAME
    lock.write_text(f"{dead} {HOST} host.compare\n")
    assert compare.main([*SMALL, "--out", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert f"kbench: host.compare: took over the stale lock {lock} (PID {dead} of host.compare is not running)" in err
    assert len(configurations(out)) == 2 and not lock.exists()


def test_two_resumes_started_together_measure_each_configuration_once(tmp_path):
    out = tmp_path / "o"
    argv = [*COMMAND, *LONGER, "--resume", "--out", str(out)]
    runs = [subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    ends = [(run.wait(timeout=300), run.communicate()[1]) for run in runs]
    keys = configurations(out)
    assert len(keys) == 24 and len(set(keys)) == 24, "one set of rows, no configuration twice"
    refused = [err for code, err in ends if code == 1]
    # the one that came second is refused; should the first have ended before the second began, that one found
    # nothing left to measure: either way no row is measured twice
    assert sorted(code for code, _ in ends) in ([0, 1], [0, 0]), ends
    if refused:
        assert refused[0].splitlines()[-1].startswith(f"kbench: --out {out}: another sweep is writing there "
                                                      "(host.compare, PID ")
    else:
        assert any("nothing left to measure" in err for _, err in ends), ends
    assert not (out / LOCK_NAME).exists()


def test_a_sweep_started_while_another_holds_out_is_refused(tmp_path):
    """The first sweep is stopped (SIGSTOP) once it holds the lock, so the second surely finds it held."""
    out = tmp_path / "o"
    first = subprocess.Popen([*COMMAND, *LONGER, "--out", str(out)], cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        while not (out / LOCK_NAME).exists():
            assert first.poll() is None, first.communicate()[1]
            time.sleep(0.01)
        first.send_signal(signal.SIGSTOP)
        before = folder_bytes(out)
        second = subprocess.run([*COMMAND, *LONGER, "--resume", "--out", str(out)], cwd=ROOT, capture_output=True,
                                text=True, timeout=300)
        assert second.returncode == 1, second.stderr
        assert second.stderr.splitlines()[-1] == (f"kbench: --out {out}: another sweep is writing there "
                                                  f"(host.compare, PID {first.pid} on {HOST}, {out / LOCK_NAME})")
        assert folder_bytes(out) == before
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait(timeout=300) == 0, first.communicate()[1]
    keys = configurations(out)
    assert len(keys) == 24 and len(set(keys)) == 24 and not (out / LOCK_NAME).exists()


def test_ctrl_c_stops_a_sweep_a_shell_started_in_the_background(tmp_path):
    """A non-interactive shell starts `python -m host.compare ... &` with SIGINT ignored; `kill -INT` still stops it:
    130, its one line, the lock released. The test hook sends the signal after the first row."""
    out = tmp_path / "o"
    env = {**os.environ, compare.STOP_AFTER_ROWS_ENV: "1", compare.STOP_SIGNAL_ENV: "INT"}
    done = subprocess.run([*COMMAND, *SMALL, "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert done.returncode == 130, done.stderr
    assert done.stderr.splitlines()[-1] == (f"kbench: interrupted; 1 rows measured now and the 0 from before are kept "
                                            f"in {out / 'results.csv'}: rerun with --resume to complete the sweep")
    assert len(configurations(out)) == 1 and not (out / LOCK_NAME).exists()


def test_sigterm_exits_143_in_one_line_keeping_the_rows(tmp_path):
    out = tmp_path / "o"
    env = {**os.environ, compare.STOP_AFTER_ROWS_ENV: "1", compare.STOP_SIGNAL_ENV: "TERM"}
    done = subprocess.run([*COMMAND, *SMALL, "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 143, done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("kbench:")] == [
        f"kbench: terminated (SIGTERM); 1 rows measured now and the 0 from before are kept in {out / 'results.csv'}: "
        "rerun with --resume to complete the sweep"]
    assert len(configurations(out)) == 1 and not (out / LOCK_NAME).exists()
