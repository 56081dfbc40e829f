"""The hardware markers: registered, and a test carrying one is skipped with the missing capability's reason."""

import os
import subprocess
import sys

from helpers import ROOT, board_missing, gpu_missing

PROBE = '''
import pytest

@pytest.mark.gpu
def test_needs_gpu():
    pass

@pytest.mark.board
def test_needs_board():
    pass
'''


def test_markers_skip_with_the_reason(tmp_path):
    probe = ROOT / "tests" / f"test_zz_marker_probe_{os.getpid()}.py"
    probe.write_text(PROBE)
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", "--strict-markers",
                               str(probe)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "KBENCH_SERIAL": ""})
    finally:
        probe.unlink()
    assert "PytestUnknownMarkWarning" not in done.stdout
    gpu_reason = gpu_missing()
    if gpu_reason:
        assert "SKIPPED" in done.stdout and "no usable CUDA GPU" in done.stdout, done.stdout
    assert "KBENCH_SERIAL" in done.stdout, "the board test is skipped, saying how to enable it"


def test_board_reason_names_the_missing_port(monkeypatch):
    monkeypatch.setenv("KBENCH_SERIAL", "/dev/does-not-exist")
    assert "/dev/does-not-exist does not exist" in board_missing()
    monkeypatch.delenv("KBENCH_SERIAL")
    assert "set KBENCH_SERIAL" in board_missing()
