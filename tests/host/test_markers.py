"""The hardware markers: registered, and a test carrying one is skipped with the missing capability's reason."""

import tomllib

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


def test_markers_skip_with_the_reason(pytester, monkeypatch):
    """The project's marker registrations (pyproject.toml) and its conftest, run by pytester on a probe in a
    folder of its own."""
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    pytester.makeini("[pytest]\nmarkers =\n" + "".join(f"    {marker}\n" for marker in markers))
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(test_probe=PROBE)
    monkeypatch.setenv("KBENCH_SERIAL", "")
    stdout = pytester.runpytest("-rs", "-p", "no:cacheprovider", "--strict-markers").stdout.str()
    assert "PytestUnknownMarkWarning" not in stdout
    gpu_reason = gpu_missing()
    if gpu_reason:
        assert "SKIPPED" in stdout and "no usable CUDA GPU" in stdout, stdout
    assert "KBENCH_SERIAL" in stdout, "the board test is skipped, saying how to enable it"


def test_board_reason_names_the_missing_port(monkeypatch):
    monkeypatch.setenv("KBENCH_SERIAL", "/dev/does-not-exist")
    assert "/dev/does-not-exist does not exist" in board_missing()
    monkeypatch.delenv("KBENCH_SERIAL")
    assert "set KBENCH_SERIAL" in board_missing()
