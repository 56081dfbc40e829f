"""What every factory of the twin's board modules (mcu/sim/modules.py, mcu/sim/modules_hardware.py) builds with: a
module of BoardFunctions, a firmware module whose attributes are read-only, a fresh class per soft reset, the
ticks period and the soft reset the reset functions ask for."""

from __future__ import annotations

import types

from mcu.sim.sealed import board_function

TICKS_PERIOD = 1 << 30  # MICROPY_PY_TIME_TICKS_PERIOD: ticks_* wrap at 2**30


def board_module(name: str, doc: str, **attrs) -> types.ModuleType:
    """A board module of `attrs`, its functions as BoardFunctions (mcu.sim.sealed): a closure's `__closure__` would
    lead to the interpreter, a function's `__globals__` or a builtin's `__self__` to host modules. Classes stay."""
    module = types.ModuleType(name, doc)
    for key, value in attrs.items():
        setattr(module, key, board_function(value))
    return module


class BuiltinModule(types.ModuleType):
    """A module MicroPython builds into the firmware: its attributes cannot be assigned or deleted (its globals are
    a const table), except the names `settable` lists ('module' object has no attribute … otherwise)."""

    settable: frozenset = frozenset()

    def __setattr__(self, name: str, value) -> None:
        if name not in type(self).settable and not name.startswith("__"):
            raise AttributeError(f"'module' object has no attribute '{name}'")
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"'module' object has no attribute '{name}'")


class SysModule(BuiltinModule):
    """The board's sys: MicroPython lets ps1, ps2 and tracebacklimit be set (attribute delegation), nothing else;
    `sys.stdout = x` is refused as on a board rather than accepted and ignored."""

    settable = frozenset({"ps1", "ps2", "tracebacklimit"})


def fresh_class(cls: type) -> type:
    """A new subclass of `cls` for one session: what board code assigns to it is gone at the next soft reset."""
    return type(cls.__name__, (cls,), {"__module__": cls.__module__, "__doc__": cls.__doc__})


def soft_reset() -> None:
    """machine.reset / soft_reset / pyb.hard_reset on the twin: a soft reset, which SystemExit asks the REPL for."""
    raise SystemExit()
