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


SLOW_PROBE = '''
import sys

from helpers import run_module


def helper():
    return run_module("host.compare", "--help")


def test_in_process():
    assert 6 * 7 == 42


def test_through_a_helper():
    helper()


def test_a_python_child():
    print(sys.executable)


def test_a_sweep_on_the_twin():
    print(["--targets", "mcu", "--sim"])


def test_with_the_twin(fresh_twin):
    pass
'''


def test_tests_that_start_a_process_are_marked_slow(pytester):
    """tests/conftest.py marks `slow` from what a test's code, its helpers and its fixtures start; -m "not slow"
    keeps the rest. Collection only: nothing is started."""
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n    gpu: gpu\n    board: board\n")
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(test_slow_probe=SLOW_PROBE)
    fast = pytester.runpytest("--co", "-q", "-m", "not slow", "-p", "no:cacheprovider").stdout.str()
    slow = pytester.runpytest("--co", "-q", "-m", "slow", "-p", "no:cacheprovider").stdout.str()
    assert "test_in_process" in fast and "test_in_process" not in slow
    for name in ("test_through_a_helper", "test_a_python_child", "test_a_sweep_on_the_twin", "test_with_the_twin"):
        assert name in slow and name not in fast, name
