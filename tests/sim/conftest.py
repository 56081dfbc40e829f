"""The twin's own tests: its REPL byte by byte on its pty (`wire`: a twin of the test's own on tmp_path), at the raw
REPL's prompt (`raw`), and its emulated Cortex-M4 (`emulator`: Unicorn, imported only by the tests that use it)."""

from __future__ import annotations

import pytest

from helpers.twin import Wire, twin_missing


@pytest.fixture
def wire(tmp_path):
    if twin_missing():
        pytest.skip(twin_missing())
    w = Wire(tmp_path)
    yield w
    w.close()


@pytest.fixture
def raw(wire):
    wire.raw()
    return wire


@pytest.fixture(scope="module")
def emulator():
    from mcu.sim.q15emu import Q15Emulator

    return Q15Emulator()
