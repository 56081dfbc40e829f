"""kernels.sweep and its --out lock (host/out_lock.py): a second sweep into a folder another is writing is refused in
one line and changes nothing there, a killed sweep's lock is taken over; SIGTERM exits 143 and SIGINT 130 (also
where a shell started the sweep with SIGINT ignored), each in one line with the rows kept. No GPU: the fake."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, folder_bytes
from host.out_lock import LOCK_NAME
from kernels import sweep

HOST = socket.gethostname()
SMALL = ["--gpu-device", "fake", "--br", "16", "--bc", "16,32", "--seq", "17", "--heads", "1", "--iters", "1"]
#: Cells of seconds each on the fake, so a signal sent after the first lands while the sweep still runs.
SLOWER = ["--gpu-device", "fake", "--br", "16", "--bc", "16,32,64", "--seq", "1024", "--heads", "2", "--iters", "3"]


@pytest.fixture(autouse=True)
def _signals(keep_signals):
    """Every test here may run a sweep in this process: its signal handlers are undone after each (conftest)."""


def test_a_second_sweep_into_a_held_out_exits_1_naming_the_holder_and_changes_nothing(tmp_path, capsys):
    out = tmp_path / "s"
    assert sweep.main([*SMALL, "--out", str(out)]) == 0
    lock = out / LOCK_NAME
    lock.write_text(f"{os.getpid()} {HOST} host.compare\n")  # a running sweep: this test's own process
    before = folder_bytes(out)
    capsys.readouterr()
    assert sweep.main([*SMALL, "--out", str(out)]) == 1
    assert capsys.readouterr().err == (f"kbench: --out {out}: another sweep is writing there (host.compare, PID "
                                       f"{os.getpid()} on {HOST}, {lock})\n")
    assert folder_bytes(out) == before  # nothing moved aside to .prev, no run recorded


def test_a_killed_sweeps_lock_is_taken_over_in_one_line(tmp_path, capsys):
    out = tmp_path / "s"
    out.mkdir()
    pid = int(Path("/proc/sys/kernel/pid_max").read_text()) - 1
    while Path(f"/proc/{pid}").exists():
        pid -= 1
    lock = out / LOCK_NAME
    lock.write_text(f"{pid} {HOST} kernels.sweep\n")
    assert sweep.main([*SMALL, "--out", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert f"kbench: kernels.sweep: took over the stale lock {lock} (PID {pid} of kernels.sweep is not running)" in err
    assert (out / sweep.RESULTS_NAME).exists() and not lock.exists()


def _stopped_after_the_first_cell(out: Path, signum: int, **popen) -> tuple[int, str]:
    process = subprocess.Popen([sys.executable, "-m", "kernels.sweep", *SLOWER, "--out", str(out)], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **popen)
    try:
        seen = []
        for line in process.stderr:  # the progress line of the first cell: the sweep is in its grid
            seen.append(line)
            if line.startswith("[1/3, "):
                break
        assert process.poll() is None, "".join(seen)
        process.send_signal(signum)
        rest = process.communicate(timeout=300)[1]
    finally:
        process.kill()
    return process.returncode, "".join(seen) + rest


@pytest.mark.parametrize("signum,code,line", [(signal.SIGTERM, 143, "terminated (SIGTERM)"),
                                              (signal.SIGINT, 130, "interrupted")])
def test_a_signal_ends_the_sweep_in_one_line_with_the_rows_kept(tmp_path, signum, code, line):
    out = tmp_path / "s"
    returncode, err = _stopped_after_the_first_cell(out, signum)
    kept = [text for text in err.splitlines() if text.startswith("kbench:")]
    assert returncode == code and len(kept) == 1, err
    assert kept[0].startswith(f"kbench: {line}; ") and kept[0].endswith(f" of 3 rows kept in {out / 'results.csv'}")
    assert "Traceback" not in err and not (out / LOCK_NAME).exists()


def test_ctrl_c_stops_a_sweep_a_shell_started_in_the_background(tmp_path):
    """`python -m kernels.sweep ... &` from a non-interactive shell starts with SIGINT ignored: kill -INT still
    stops it."""
    out = tmp_path / "s"
    returncode, err = _stopped_after_the_first_cell(out, signal.SIGINT,
                                                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert returncode == 130, err
    assert [text for text in err.splitlines() if text.startswith("kbench: interrupted; ")], err
    assert not (out / LOCK_NAME).exists()
