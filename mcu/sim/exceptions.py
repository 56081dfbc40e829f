"""Exceptions as MicroPython names and words them (MICROPY_ERROR_REPORTING_DETAILED, the STM32 port's level):
the class name a CPython-only exception folds to, the text after "Name: ", MicroPython's wording of the messages
host code matches, and `.value`/`.errno` as aliases of the first argument. The interpreter prints tracebacks with
these; the compile-time rewrites (mcu.sim.compiler) make board code call `exception_attr` and `caught`.
"""

from __future__ import annotations

import errno as _errno
import re

MICROPYTHON_EXCEPTIONS = frozenset((
    "ArithmeticError", "AssertionError", "AttributeError", "BaseException", "EOFError", "Exception",
    "GeneratorExit", "ImportError", "IndentationError", "IndexError", "KeyError", "KeyboardInterrupt",
    "LookupError", "MemoryError", "NameError", "NotImplementedError", "OSError", "OverflowError", "RuntimeError",
    "StopAsyncIteration", "StopIteration", "SyntaxError", "SystemExit", "TypeError", "UnicodeError", "ValueError",
    "ZeroDivisionError"))
MESSAGES = (  # CPython's wording -> MicroPython's, for the messages host code is likely to match
    (re.compile(r"^name '(.*)' is not defined$"), r"name '\1' isn't defined"),
    (re.compile(r"^(integer |float )?(division|modulo)( or modulo)? by zero$"), "divide by zero"),
    # MICROPY_ERROR_REPORTING_DETAILED (the STM32 port's ROM level): "%q() takes %d positional arguments but %d were
    # given", with the function's bare name; MicroPython's test runner reads the level from this message's length
    (re.compile(r"^(?:[\w<>]+\.)*([\w<>]+)\(\) takes (\d+) positional arguments? but (\d+) (?:was|were) given$"),
     r"\1() takes \2 positional arguments but \3 were given"),
    (re.compile(r"^maximum recursion depth exceeded.*$"), "maximum recursion depth exceeded"),
)
EXCEPTION_ALIASES = ("value", "errno")  # MicroPython: aliases of args[0] on every exception instance (objexcept.c)
STR_FAILED = "<exception str() failed>"


def exception_name(exc: BaseException) -> str:
    """The class name MicroPython would print: CPython-only builtin subclasses fold to their MicroPython base."""
    cls = type(exc)
    if cls.__module__ != "builtins":
        return cls.__name__
    for base in cls.__mro__:
        if base.__name__ in MICROPYTHON_EXCEPTIONS:
            return base.__name__
    return cls.__name__


def exception_text(exc: BaseException) -> str:
    """What follows "Name: ": the single argument as str, "[Errno N] ENAME" for an OSError, "" without arguments."""
    if isinstance(exc, SyntaxError):
        return exc.msg or "invalid syntax"
    args = exc.args
    if isinstance(exc, OSError) and 1 <= len(args) <= 2 and isinstance(args[0], int) and args[0] in _errno.errorcode:
        text = f"[Errno {args[0]}] {_errno.errorcode[args[0]]}"
        return text + (f": {args[1]}" if len(args) == 2 else "")
    if not args:
        return ""
    if len(args) == 1:
        text = str(args[0])
        for pattern, replacement in MESSAGES:
            text = pattern.sub(replacement, text)
        return text
    return repr(args)


def exception_attr(obj, name: str):
    """`obj.name` for the rewritten loads of .value / .errno: on an exception it is the first argument (None without
    arguments), as MicroPython's exceptions have it, unless board code gave the instance or its class one."""
    if isinstance(obj, BaseException):
        own = name in getattr(obj, "__dict__", {}) or any(
            name in vars(cls) for cls in type(obj).__mro__ if cls.__module__ != "builtins")
        if not own:
            return obj.args[0] if obj.args else None
    return getattr(obj, name)


def caught(exc: BaseException) -> None:
    """Called first in every `except ... as e:` of board code: a builtin exception raised by the host (CPython) gets
    MicroPython's wording in its message (MESSAGES), so that `str(e)` and `e.value` read as on a board."""
    if type(exc).__module__ != "builtins" or len(exc.args) != 1 or not isinstance(exc.args[0], str):
        return
    text = exc.args[0]
    for pattern, replacement in MESSAGES:
        text = pattern.sub(replacement, text)
    if text != exc.args[0]:
        exc.args = (text,)


def console_name(exc: BaseException) -> str:
    """The exception's class name read without running any of its code (a metaclass may define __name__)."""
    try:
        return type.__dict__["__name__"].__get__(type(exc))
    except BaseException:  # noqa: BLE001 - a name is all this is for
        return "Exception"
