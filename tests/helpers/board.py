"""The board's side without a board: mcu/board/'s modules imported under the names they have on the board, and the
stand-ins its frame server is tested with (the board's gc, a q15attn that copies, a clock that moves on demand)."""

from __future__ import annotations

import importlib.util
import sys
import types

from helpers import ROOT

BOARD_DIR = ROOT / "mcu" / "board"
#: The board's modules in import order: kbench_server imports the other two by their bare names, as on the board.
BOARD_MODULES = ("kbench_board", "kbench_framing", "kbench_server")


def board_module(name: str) -> types.ModuleType:
    """mcu/board/<name>.py imported as the board imports it, by its bare name (the modules it imports first), once."""
    for needed in BOARD_MODULES[:BOARD_MODULES.index(name) + 1]:
        if needed not in sys.modules:
            spec = importlib.util.spec_from_file_location(needed, BOARD_DIR / f"{needed}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[needed] = module
            spec.loader.exec_module(module)
    return sys.modules[name]


class FakeGc:
    """gc as the board has it (CPython's has no mem_free)."""

    def __init__(self, free: int = 90_000):
        self.free = free

    def collect(self) -> None:
        pass

    def mem_free(self) -> int:
        return self.free

    def mem_alloc(self) -> int:
        return 102_400 - self.free


class CopyKernel:
    """A stand-in q15attn of the version the server needs: o = q and each row's shift (row0 + i) % 32 (so the data
    path is visible), cycles 1000 + row0; counts its calls."""

    def __init__(self, version: int = 4):
        self.calls = 0
        self._version = version

    def version(self) -> int:
        return self._version

    def attention(self, q, k, vt, o, oshift, seq, dim, causal, bc, mult, shift, row0=0):
        self.calls += 1
        if bc > 64:
            raise ValueError(f"bc={bc} is out of range; allowed: 1..64")
        memoryview(o)[:] = memoryview(q)
        for i in range(len(oshift)):
            oshift[i] = (row0 + i) % 32
        return 1000 + row0

    def state_bytes(self, dim, rows):
        return 32 + rows * 8 * (2 * ((dim + 1) // 2) + 2)

    def stream(self, q, k, vt, o, oshift, state, seq, dim, causal, bc, mult, shift, row0, key0):
        """o = the chunk's first keys (so the K path is visible; ValueError when they are fewer than o's bytes),
        each row's shift key0 % 32, cycles 500 + key0 + len(state) (so the state's size is visible);
        test_protocol.py's WASM_PROGRAM mirrors it."""
        self.calls += 1
        memoryview(o)[:] = memoryview(k)[:len(o)]
        for i in range(len(oshift)):
            oshift[i] = key0 % 32
        return 500 + key0 + len(state)


def head_of(out, b: int = 0, h: int = 0):
    """Head (b, h) of a model output (host.q15.Q15Out, values (B, H, N, d), shifts (B, H, N)): values (N, d), shifts
    (N,)."""
    return type(out)(out.o[b, h], out.shift[b, h])


def mismatches(out, expected) -> str:
    """The first differences between two heads' Q15Out (values and row shifts), for an assertion's message."""
    where = [f"O[{i}, {j}] {out.o[i, j]} != {expected.o[i, j]}" for i, j in zip(*(out.o != expected.o).nonzero())]
    where += [f"g[{i}] {out.shift[i]} != {expected.shift[i]}" for (i,) in zip(*(out.shift != expected.shift).nonzero())]
    return ", ".join(where[:5])


class FakeClock:
    """time.monotonic and time.sleep for mcu.link and mcu.link_window: time moves only when the fake port waits or
    the link sleeps."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
