"""The board's `builtins` module, made anew at each soft reset: CPython's builtins with `exit`, `quit`,
`breakpoint` and the site helpers removed, and `__import__`, `open`, `print`, `input`, `help`, `exec`, `eval` and
`compile` replaced by the board's, plus the hooks the compile-time rewrites call (mcu.sim.compiler).

Every function in it is a BoardFunction (mcu.sim.sealed): printed `<function>`, with no `__self__` leading to the
interpreter (`print.__self__.sandbox` would re-root the twin) and no `__globals__` or builtin `__self__` leading to
host modules (`len.__self__` would be CPython's own `builtins`, with the host's `open`).
"""

from __future__ import annotations

import builtins
import sys
import types
from typing import TYPE_CHECKING

from mcu.sim.compiler import CAUGHT, EXCEPTION_ATTR, REPL_PRINT
from mcu.sim.exceptions import caught, exception_attr
from mcu.sim.modules import BOARD_MODULES
from mcu.sim.sealed import board_function

if TYPE_CHECKING:
    from mcu.sim.interpreter import Interpreter

REMOVED = ("exit", "quit", "copyright", "credits", "license", "breakpoint")
HELP_TEXT = """Welcome to the kbench twin of MicroPython (STM32 port).

The board's filesystem is the folder the twin was started with; '/' and '/flash' are its root.
Modules: array binascii collections errno gc hashlib heapq io json machine math micropython os
pyb q15attn random re select struct sys time (u-prefixed names work too).
Control commands: CTRL-A raw REPL, CTRL-B friendly REPL, CTRL-C interrupt, CTRL-D soft reset,
CTRL-E paste mode.
"""


def make_builtins(interp: Interpreter) -> types.ModuleType:
    """The builtins of all board code until the next soft reset; its dict is what `__builtins__` holds."""
    module = types.ModuleType("builtins")
    table = vars(module)

    def board_print(*args, sep=" ", end="\n", file=None, flush=False) -> None:
        sep, end = " " if sep is None else sep, "\n" if end is None else end
        if file is None:
            interp.console(sep.join(map(str, args)) + end)  # print() writes to the HAL's stdout, not sys.stdout
            return
        for i, arg in enumerate(args):  # a stream gets each piece in its own write, as mp_builtin_print sends them
            if i:
                file.write(sep)
            file.write(str(arg))
        file.write(end)

    def repl_print(value) -> None:
        if value is not None:
            interp.console(repr(value) + "\n")

    def board_input(prompt: str = "") -> str:
        """A line from the host, echoed, as the board's input() reads it."""
        link = interp.link
        interp.console(str(prompt))
        line = bytearray()
        while True:
            c = link.read_byte()
            if c in (0x0D, 0x0A):
                link.write(b"\r\n")
                return line.decode("utf-8", "replace")
            if c in (0x08, 0x7F):
                if line:
                    line.pop()
                    link.write(b"\b \b")
            elif c == 0x04 and not line:
                raise EOFError()
            elif c >= 0x20:
                line.append(c)
                link.write(bytes([c]))

    def board_help(what=None) -> None:
        if what is None:
            interp.console(HELP_TEXT)
        elif what == "modules":
            interp.console(" ".join(sorted(BOARD_MODULES) + ["builtins", "q15attn"]) + "\n")
        else:
            interp.console(f"object {what!r} is of type {type(what).__name__}\n")

    def board_compile(source, filename, mode, flags=0, dont_inherit=False, optimize=-1):
        """compile() of board code: its source through the same rewrites as code the REPL runs."""
        if mode not in ("exec", "eval", "single"):
            raise ValueError("compile() mode must be 'exec', 'eval' or 'single'")
        if isinstance(source, (str, bytes, bytearray)):
            return interp.compile(bytes(source) if isinstance(source, bytearray) else source, str(filename),
                                  mode=mode)
        return builtins.compile(source, filename, mode, flags, dont_inherit, optimize)

    def code_for(source, mode: str):
        if isinstance(source, (str, bytes, bytearray)):
            return interp.compile(bytes(source) if isinstance(source, bytearray) else source, "<string>", mode=mode)
        return source

    def namespace(globals, locals) -> tuple[dict, object]:
        """exec/eval's namespaces: the board caller's by default; a dict given without `__builtins__` gets the
        board's (CPython would put its own there, and a print() in it would reach the twin's host stdout)."""
        if globals is None:
            caller = sys._getframe(2)  # namespace <- board_exec/board_eval <- the board code calling it
            globals, locals = caller.f_globals, caller.f_locals if locals is None else locals
        if isinstance(globals, dict) and "__builtins__" not in globals:
            globals["__builtins__"] = table
        return globals, globals if locals is None else locals

    def board_exec(source, globals=None, locals=None):
        """exec() of board code: a string compiled as board code, run in the caller's namespace by default."""
        globals, locals = namespace(globals, locals)
        return builtins.exec(code_for(source, "exec"), globals, locals)

    def board_eval(source, globals=None, locals=None):
        globals, locals = namespace(globals, locals)
        return builtins.eval(code_for(source, "eval"), globals, locals)

    table.update((k, v) for k, v in vars(builtins).items() if not k.startswith("__") or k == "__build_class__")
    for name in REMOVED:
        table.pop(name, None)
    table.update(__import__=interp.import_module, open=interp.sandbox.open, print=board_print, input=board_input,
                 help=board_help, exec=board_exec, eval=board_eval, compile=board_compile)
    table.update({REPL_PRINT: repl_print, EXCEPTION_ATTR: exception_attr, CAUGHT: caught})
    table.update((k, board_function(v)) for k, v in list(table.items()))
    table["__name__"] = "builtins"
    return module
