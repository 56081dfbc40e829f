"""The twin's cycle model counted in C: Unicorn's block hook as mcu/native/twin_blockcount.c, for mcu/sim/q15emu.py.

The model itself stays in q15emu.py (a block's cost from its instructions, a refill when a block does not follow
the last one); this file only moves the per-block addition out of Python. Python costs each new block once, when
the C hook asks (`cost(address, size) -> (cycles, instructions)`); afterwards a block inside the table (the kernel
image) is counted without leaving C. `NativeCounter.open` returns None with the reason when the library cannot be
built or Unicorn's C API is not where the binding keeps it; the emulator then counts in its Python hook.
"""

from __future__ import annotations

import ctypes
from typing import Callable

import numpy as np

from host.errors import UnavailableError
from mcu.native_build import BUILD, built

LIBRARY = BUILD / "libkbench_blockcount.so"
SOURCES = ("twin_blockcount.c", "Makefile")

MISS = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_uint64, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32),
                        ctypes.POINTER(ctypes.c_uint32))


class _Counter(ctypes.Structure):
    # kb_counter in twin_blockcount.c, field for field
    _fields_ = [("base", ctypes.c_uint64), ("slots", ctypes.c_uint64), ("cycles", ctypes.c_void_p),
                ("instructions", ctypes.c_void_p), ("miss", MISS), ("refill", ctypes.c_uint32),
                ("has_previous", ctypes.c_uint32), ("previous_end", ctypes.c_uint64), ("cycles_total", ctypes.c_uint64),
                ("instructions_total", ctypes.c_uint64), ("blocks", ctypes.c_uint64), ("current", ctypes.c_uint64),
                ("current_start", ctypes.c_uint64)]


class NativeCounter:
    """A C block hook on one Unicorn engine, counting the model's cycles for blocks in [base, base + size)."""

    def __init__(self, library: ctypes.CDLL, uclib, block_hook: int, uc, base: int, size: int,
                 cost: Callable[[int, int], tuple[int, int]], refill: int):
        self._tables = (np.zeros(size // 2, dtype=np.uint32), np.zeros(size // 2, dtype=np.uint32))

        self.error: BaseException | None = None  # what the costing raised during the call (`raise_error`)
        self.cost = cost  # costs a block the table does not hold: (address, size) -> (cycles, instructions)

        def miss(address, size_, cycles, instructions):
            # An exception cannot cross C: ctypes would print it and return 0, and the call would go on uncounted.
            try:
                cycles[0], instructions[0] = self.cost(address, size_)
                return 1
            except BaseException as exc:  # noqa: BLE001 - kept and raised by raise_error after the call
                self.error = self.error or exc
                uc.emu_stop()
                return 0

        self._miss = MISS(miss)  # kept: C holds the pointer
        self._state = _Counter(base=base, slots=size // 2, cycles=self._tables[0].ctypes.data,
                               instructions=self._tables[1].ctypes.data, miss=self._miss, refill=refill)
        self._hook_fn = ctypes.cast(library.kb_on_block, ctypes.c_void_p)
        handle = ctypes.c_size_t()
        status = uclib.uc_hook_add(uc._uch, ctypes.byref(handle), block_hook,
                                   self._hook_fn, ctypes.c_void_p(ctypes.addressof(self._state)),
                                   ctypes.c_uint64(1), ctypes.c_uint64(0))
        if status != 0:
            raise OSError(f"uc_hook_add failed with status {status}")

    @classmethod
    def open(cls, uc, base: int, size: int, cost: Callable[[int, int], tuple[int, int]],
             refill: int) -> tuple[NativeCounter | None, str]:
        """(a counter hooked on `uc`, "") or (None, why the Python hook counts instead)."""
        try:
            from unicorn import UC_HOOK_BLOCK
            from unicorn.unicorn_py3.unicorn import uclib
            library = ctypes.CDLL(str(built("twin", LIBRARY, SOURCES)))
            return cls(library, uclib, UC_HOOK_BLOCK, uc, base, size, cost, refill), ""
        except (UnavailableError, ImportError, OSError, AttributeError) as exc:
            return None, f"the C block hook is unavailable ({exc}): the cycle model counts in Python"

    def raise_error(self) -> None:
        """Raise what costing a block raised during the call (the emulation was stopped there), once."""
        error, self.error = self.error, None
        if error is not None:
            raise error

    def reset(self) -> None:
        """A new call: nothing counted, no block before the first."""
        self.error = None
        state = self._state
        state.has_previous = state.cycles_total = state.instructions_total = state.blocks = 0
        state.current = state.current_start = 0

    @property
    def cycles(self) -> int:
        return self._state.cycles_total

    @property
    def instructions(self) -> int:
        return self._state.instructions_total

    @property
    def blocks(self) -> int:
        return self._state.blocks

    def running(self) -> tuple[int, int] | None:
        """(the running block's address, cycles before it), or None before the call's first block."""
        state = self._state
        return (state.current, state.current_start) if state.blocks else None
