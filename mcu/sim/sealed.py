"""Sealed objects: what the twin hands board code instead of host objects, so that honest board code cannot follow
an attribute from the board's API to the twin's state or to host modules.

- `BoardOSError`: OSError as MicroPython raises it (args == (errno,), printed "[Errno 2] ENOENT").
- `BoardFunction`: a builtin-like function (printed `<function>`), without `__func__`, `__self__`, `__globals__`
  or `__closure__`, whose attributes cannot be set. `board_method` serves a method of the twin's as one,
  `board_function` wraps any host function or method (and leaves classes and other values alone).
- `Native`: an object MicroPython implements in C (a file, a stream): its host state kept out of its attributes
  (`hidden(obj)`), and assigning an attribute an AttributeError as on a board. `board_named` gives a Native class
  the name MicroPython prints for its type.

This is a convenience boundary for trusted code, not a security one (mcu.sim.sandbox, docs/twin.md).
"""

from __future__ import annotations

import errno
import functools
import types
import weakref
from typing import Any, Callable

HOST_FUNCTIONS = (types.FunctionType, types.MethodType, types.BuiltinFunctionType)


class BoardOSError(OSError):
    """OSError as MicroPython builds it: args == (errno,), `.errno` set, str() "[Errno 2] ENOENT"."""

    def __init__(self, code: int):
        super().__init__(code)
        self.errno = code

    def __str__(self) -> str:
        return f"[Errno {self.errno}] {errno.errorcode.get(self.errno, str(self.errno))}"


BoardOSError.__name__ = BoardOSError.__qualname__ = "OSError"


def board_error(code: int) -> BoardOSError:
    return BoardOSError(code)


class BoardFunction(functools.partial):
    """A function of the board's API (a builtin, `os.stat`, ...) as board code sees it: callable, printed
    `<function>` as MicroPython prints a builtin, and without the attributes that lead from a Python function or
    method to the host (`__func__`, `__self__`, `__globals__`, `__closure__`; partial's `func`, `__reduce__` and
    `__setstate__` are shut too). Its attributes cannot be set, as a builtin's cannot."""

    __slots__ = ()
    func = property()  # no getter: `f.func` is an AttributeError
    __reduce__ = __setstate__ = None
    __repr__ = "<function>".format  # a builtin method: no __func__ to follow, and any argument is ignored

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"'BoardFunction' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"'BoardFunction' object has no attribute '{name}'")


def board_function(value):
    """`value` as board code may see it: a host function, method or builtin (whose `__self__` is a host module)
    wrapped in a BoardFunction; anything else (a class, a constant, an object, a BoardFunction) as it is."""
    return BoardFunction(value) if isinstance(value, HOST_FUNCTIONS) else value


def board_method(method: Callable) -> property:
    """A Sandbox method that is part of the board's API: read from a Sandbox, it is a BoardFunction bound to it, so
    that `open.__self__` and `os.stat.__func__.__globals__` do not exist on the board."""
    return property(lambda box: BoardFunction(method.__get__(box)), doc=method.__doc__)


_HIDDEN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def hidden(obj: Native) -> Any:
    """The host state behind a Native object."""
    return _HIDDEN[obj]


class NativeType(type):
    """The type of a Native class: like a type built into the firmware, its attributes cannot be set or deleted
    (so `type(sys.stdout).write = f` cannot outlive a soft reset)."""

    def __setattr__(cls, name: str, value) -> None:
        raise AttributeError(f"type object '{cls.__name__}' has no attribute '{name}'")

    def __delattr__(cls, name: str) -> None:
        raise AttributeError(f"type object '{cls.__name__}' has no attribute '{name}'")


class Native(metaclass=NativeType):
    """An object MicroPython implements in C (a file, a stream): its host state is kept out of its attributes
    (`hidden(obj)`), and assigning or deleting an attribute raises AttributeError with MicroPython's message
    ("'FileIO' object has no attribute 'write'")."""

    __slots__ = ("__weakref__",)
    BOARD_TYPE = "FileIO"
    #: object's pickling hooks hand out copyreg's functions, whose globals reach the host's builtins.
    __reduce__ = __reduce_ex__ = __getstate__ = None

    def __init__(self, state) -> None:
        _HIDDEN[self] = state

    def _board_type(self) -> str:
        return self.BOARD_TYPE

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"'{self._board_type()}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"'{self._board_type()}' object has no attribute '{name}'")


def board_named(cls: NativeType) -> NativeType:
    """`cls` named as MicroPython names the type it stands for (its BOARD_TYPE): `str(type(obj))` is
    `<class 'TextIOWrapper'>`, as on a board."""
    for attr, value in (("__name__", cls.BOARD_TYPE), ("__qualname__", cls.BOARD_TYPE), ("__module__", "builtins")):
        type.__setattr__(cls, attr, value)
    return cls
