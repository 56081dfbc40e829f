"""The twin's own tests: its REPL in-process over a Link (`wire`), at the raw REPL's prompt (`raw`), and its
emulated Cortex-M4 (`emulator`: Unicorn, imported only by the tests that use it)."""

from __future__ import annotations

import pytest

from helpers.twin import Wire


@pytest.fixture
def wire(tmp_path):
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
