"""mcu/native_build.py (build-if-stale of mcu/native's outputs) and the Makefile's one-line refusals: what is stale,
what a failed make says, and the `mpy` target naming the Python it would use when that Python lacks pyelftools.
Builds go to the gitignored mcu/native/build/ only; the fake MicroPython tree and Python live in tmp_path."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from mcu import native_build
from host.errors import UnavailableError
from mcu.native_build import NATIVE, built, stale

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def test_an_output_is_stale_when_missing_or_older_than_a_source(tmp_path):
    output = tmp_path / "out.bin"
    assert stale(output)
    output.write_bytes(b"x")
    newest = max((NATIVE / name).stat().st_mtime for name in native_build.SOURCES)
    os.utime(output, (newest + 10, newest + 10))
    assert not stale(output)
    os.utime(output, (newest - 10, newest - 10))
    assert stale(output)


def test_a_fresh_output_is_returned_without_running_make(tmp_path, monkeypatch):
    output = tmp_path / "fresh.so"
    shutil.copyfile(built("host", native_build.BUILD / "libq15attn.so"), output)  # a whole ELF file
    newest = max((NATIVE / name).stat().st_mtime for name in native_build.SOURCES)
    os.utime(output, (newest + 10, newest + 10))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("make ran for a fresh output"))
    assert built("host", output) == output


@pytest.mark.parametrize("keep", [0, 3, 63, 0.5, -1])
def test_a_library_cut_short_is_stale_and_removed_so_that_make_builds_it_again(tmp_path, keep):
    """Loading a truncated shared library newer than its sources killed the process with SIGBUS (a hostile review of
    issue 30's block hook): such a file is now stale, whatever it was cut to (keep: bytes, a fraction, or all but
    the last byte)."""
    whole = built("host", native_build.BUILD / "libq15attn.so").read_bytes()
    cut = tmp_path / "cut.so"
    cut.write_bytes(whole[:int(len(whole) * keep) if isinstance(keep, float) else keep])
    newest = max((NATIVE / name).stat().st_mtime for name in native_build.SOURCES)
    os.utime(cut, (newest + 10, newest + 10))
    assert stale(cut) and not cut.exists()
    assert native_build.whole_elf(native_build.BUILD / "libq15attn.so")
    (tmp_path / "text.so").write_text("not an ELF file at all, but long enough to hold an ELF header " * 4)
    assert not native_build.whole_elf(tmp_path / "text.so")


def test_a_failed_make_names_the_target_and_its_last_stderr_line(tmp_path):
    with pytest.raises(UnavailableError, match=r"^make -C mcu/native no-such-target failed: .*no-such-target"):
        built("no-such-target", tmp_path / "never")


def test_the_host_library_builds_into_the_ignored_build_folder():
    assert built("host", native_build.BUILD / "libq15attn.so").is_file()


def test_mpy_says_which_python_lacks_pyelftools(tmp_path):
    (tmp_path / "micropython" / "py").mkdir(parents=True)
    (tmp_path / "micropython" / "py" / "dynruntime.mk").write_text("")
    python = tmp_path / "python-without-elftools"
    python.write_text("#!/bin/sh\nexit 1\n")  # any `python -c "import elftools"` fails
    python.chmod(0o755)
    done = subprocess.run(["make", "-C", str(NATIVE), "mpy", f"MPY_DIR={tmp_path / 'micropython'}",
                           f"PYTHON={python}"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    [line] = [line for line in done.stderr.splitlines() if "***" in line]
    assert f"PYTHON={python} (given on the command line) has no pyelftools" in line
    assert f"{python} -m pip install pyelftools" in line
