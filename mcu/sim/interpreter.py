"""The twin's MicroPython interpreter: what code sent over the REPL runs in, shaped like MicroPython's STM32 port.

Code runs in CPython with `exec`, in a globals dict that a soft reset replaces and that persists between commands
otherwise. Its builtins (the board's `builtins` module, made anew at each soft reset, as are sys.stdin/stdout and
every board module) are CPython's with `__import__`, `open`, `print`, `input` and `help` replaced: `import`
returns the board's modules (mcu.sim.modules.BOARD_MODULES, with the `u`-prefixed aliases), `.py` modules found on
the board's `sys.path` inside the sandboxed folder, or `q15attn` (the Cortex-M4 kernel run by mcu.sim.q15emu); any
other name raises ImportError "no module named 'x'". Tracebacks are printed as MicroPython prints them; stdin and
stdout are mcu.sim.stdio's. A heap estimate stands in for the GC heap (`gc.mem_free`, MemoryError).

Board code never takes the twin down: what the REPL itself prints (tracebacks, the values of expressions, print())
goes straight to the link, as the firmware's HAL printer does, never through objects board code can replace; and
formatting an exception runs the exception's own code (`__str__`) in the worker, interruptible and guarded, so a
failing one prints `<exception str() failed>` as MicroPython does. Exceptions carry `.value` and `.errno` (their
first argument), as MicroPython's do, through a rewrite of those attribute loads at compile time.

Each command runs in a fresh worker thread so that the link's reader can raise KeyboardInterrupt in it
(repl.Link.feed) while the REPL thread waits. docs/twin.md lists what is modelled and what is not.
"""

from __future__ import annotations

import array as _array
import ast
import builtins
import collections
import errno as _errno
import random as _random
import re
import sys
import threading
import types
from pathlib import Path
from typing import Callable

from mcu.sim.modules import BOARD_MODULES, BUILD_DATE, HEAP_BYTES, MACHINE, MPY_ABI, VERSION
from mcu.sim.peripherals import Peripherals
from mcu.sim.repl import Link
from mcu.sim.sandbox import Sandbox
from mcu.sim.stdio import TextIn, TextOut

HEAP_BASELINE = 3 * 1024  # what a freshly reset interpreter already holds
HEAP_SCAN_LIMIT = 20_000
DEFAULT_CLOCK_HZ = 168_000_000
REPL_PRINT = "_kbench_repl_print"
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
EXCEPTION_ATTR = "_kbench_exception_attr"
CAUGHT = "_kbench_caught"
MICROPYTHON_EMITTERS = ("native", "viper", "bytecode")  # decorators the twin compiles as plain bytecode
STR_FAILED = "<exception str() failed>"
HELP_TEXT = """Welcome to the kbench twin of MicroPython (STM32 port).

The board's filesystem is the folder the twin was started with; '/' and '/flash' are its root.
Modules: array binascii collections errno gc hashlib heapq io json machine math micropython os
pyb q15attn random re select struct sys time (u-prefixed names work too).
Control commands: CTRL-A raw REPL, CTRL-B friendly REPL, CTRL-C interrupt, CTRL-D soft reset,
CTRL-E paste mode.
"""
ALIASES = {"u" + name: name for name in (
    "array", "binascii", "collections", "errno", "hashlib", "heapq", "io", "json", "os", "random", "re", "select",
    "struct", "sys", "time")}



# -- exceptions as MicroPython prints them ----------------------------------------------------------------------

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


def _printed(node: ast.Expr) -> ast.Expr:
    """The expression statement `node` with its value printed by the REPL (never through host sys.displayhook)."""
    return ast.copy_location(ast.Expr(ast.Call(ast.Name(REPL_PRINT, ast.Load()), [node.value], [])), node)


class _SingleInput(ast.NodeTransformer):
    """Expression statements of a "single" input printed, those inside functions and classes left alone."""

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        return _printed(node)

    def _scope(self, node: ast.AST) -> ast.AST:
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = _scope


class _BoardSemantics(ast.NodeTransformer):
    """What CPython compiles differently from MicroPython, rewritten in the tree: `x.value` and `x.errno` loads
    become `_kbench_exception_attr(x, 'value')` (stores are left alone); each `except ... as e:` body starts with
    `_kbench_caught(e)`; the compile-time decorators `@micropython.native`, `.viper` and `.bytecode` are dropped (code
    runs as bytecode), and the inline assemblers are a SyntaxError, as in a firmware built without them."""

    def __init__(self, filename: str):
        self.filename = filename

    def _decorators(self, node):
        kept = []
        for decorator in node.decorator_list:
            if isinstance(decorator, ast.Attribute) and isinstance(decorator.value, ast.Name) \
                    and decorator.value.id == "micropython":
                if decorator.attr in MICROPYTHON_EMITTERS:
                    continue
                raise SyntaxError("invalid micropython decorator",
                                  (self.filename, decorator.lineno, decorator.col_offset + 1, None))
            kept.append(decorator)
        node.decorator_list = kept
        self.generic_visit(node)
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = _decorators

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if node.attr in EXCEPTION_ALIASES and isinstance(node.ctx, ast.Load):
            call = ast.Call(ast.Name(EXCEPTION_ATTR, ast.Load()), [node.value, ast.Constant(node.attr)], [])
            return ast.copy_location(call, node)
        return node

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> ast.AST:
        self.generic_visit(node)
        if node.name:
            call = ast.Call(ast.Name(CAUGHT, ast.Load()), [ast.Name(node.name, ast.Load())], [])
            node.body.insert(0, ast.copy_location(ast.Expr(call), node.body[0]))
        return node


def _console_name(exc: BaseException) -> str:
    """The exception's class name read without running any of its code (a metaclass may define __name__)."""
    try:
        return type.__dict__["__name__"].__get__(type(exc))
    except BaseException:  # noqa: BLE001 - a name is all this is for
        return "Exception"


class Interpreter:
    """The interpreter state of the twin: sandboxed filesystem, board modules, globals, and how code runs."""

    def __init__(self, root: Path | str, link: Link, clock_hz: int = DEFAULT_CLOCK_HZ,
                 peripherals: Peripherals | None = None, mpy_abi: int = MPY_ABI):
        self.link = link
        self.clock_hz = clock_hz
        self.mpy_abi = mpy_abi
        self.sandbox = Sandbox(root)
        self.hw = peripherals or Peripherals(clock_hz)
        self.rtc_offset_s = 0
        self._board_files: set[str] = {"<stdin>"}
        self._q15_native: types.ModuleType | None = None
        self._formatted: tuple[BaseException, str] | None = None  # the last exception and its text, made in its worker
        self.reset()

    # -- what the REPL calls -------------------------------------------------------------------------------------

    def reset(self) -> None:
        """A soft reset: new globals, modules and builtins, open files closed, cwd back to '/'."""
        self.sandbox.close_all()
        self.modules: dict[str, types.ModuleType] = {}  # board modules made so far (ROM: not in sys.modules)
        self.sys_modules: dict[str, types.ModuleType] = {}  # modules loaded from the filesystem, and q15attn
        self.random = _random.Random()
        self.stdout, self.stdin = self._make_stdio()
        self.builtins_module = self._make_builtins()
        self.builtins = vars(self.builtins_module)
        self.modules["builtins"] = self.builtins_module
        main = types.ModuleType("__main__")  # `import __main__` gives the namespace the REPL runs code in
        main.__builtins__ = self.builtins
        self.modules["__main__"] = main
        self.globals: dict = vars(main)
        self._formatted = None
        self.link.kbd_char = 0x03

    def _make_stdio(self) -> tuple[TextOut, TextIn]:
        """sys.stdout and sys.stdin for one session (native objects: board code cannot patch them)."""
        return TextOut(self.link), TextIn(self.link)

    def banner(self) -> bytes:
        version = ".".join(map(str, VERSION[:3]))
        return (f"MicroPython v{version} on {BUILD_DATE}; {MACHINE}\r\n"
                'Type "help()" for more information.\r\n').encode()

    def script(self, name: str) -> bytes | None:
        """The source of /name (boot.py, main.py) if the board has it."""
        path = "/" + name
        return self.sandbox.read_bytes(path) if self.sandbox.is_file(path) else None

    def execute(self, source: bytes | str, filename: str = "<stdin>",
                interactive: bool = False) -> BaseException | None:
        """Compile and run `source` in a worker thread that Ctrl-C can interrupt; the exception it raised, if any."""
        outcome: list[BaseException] = []

        def run() -> None:
            try:
                exec(self._compile(source, filename, interactive), self.globals)
            except BaseException as exc:  # noqa: BLE001 - everything the code raised is the board's to report
                outcome.append(exc)
                self._formatted = (exc, self.format_exception(exc))  # its __str__ runs here, interruptible

        if not self._in_worker(run):
            return MemoryError("memory allocation failed, starting the code's thread")
        return outcome[0] if outcome else None

    def _in_worker(self, body: Callable[[], None]) -> bool:
        """Run `body` in a worker thread that the interrupt character can interrupt, and wait for it; False when no
        thread could be started (board code holds the memory)."""

        def guarded() -> None:
            try:
                self.link.arm()
                try:
                    body()
                finally:
                    self.link.disarm()
            except BaseException:  # noqa: BLE001 - an interrupt landing after the code ended
                pass

        worker = threading.Thread(target=guarded, name="twin-exec", daemon=True)
        try:
            worker.start()
        except (RuntimeError, MemoryError):
            return False
        worker.join()
        self.link.disarm()
        return True

    def format_exception(self, exc: BaseException) -> str:
        """The traceback as MicroPython prints it: board frames only, "Traceback" only when there are frames. Never
        raises: board code that fails while the exception is formatted (a raising `__str__`, an interrupt, a
        recursion) gives `<exception str() failed>` in place of the message."""
        try:
            return self._format_exception(exc)
        except BaseException:  # noqa: BLE001 - the exception's own code failed; print what can be printed
            pass
        try:
            frames = self._frames(exc)
        except BaseException:  # noqa: BLE001
            frames = []
        lines = (["Traceback (most recent call last):"] if frames else []) + frames
        return "\n".join(lines + [f"{_console_name(exc)}: {STR_FAILED}"]) + "\n"

    def _frames(self, exc: BaseException) -> list[str]:
        frames = []
        tb = BaseException.__dict__["__traceback__"].__get__(exc)
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_filename in self._board_files:
                frames.append(f'  File "{code.co_filename}", line {tb.tb_lineno}, in {code.co_name}')
            tb = tb.tb_next
        return frames

    def _format_exception(self, exc: BaseException) -> str:
        frames = self._frames(exc)
        if isinstance(exc, SyntaxError) and exc.filename in self._board_files:
            frames.append(f'  File "{exc.filename}", line {exc.lineno}')
        lines = (["Traceback (most recent call last):"] if frames else []) + frames
        lines.append(f"{exception_name(exc)}: {exception_text(exc)}")
        return "\n".join(lines) + "\n"

    def write_exception(self, exc: BaseException) -> None:
        """Print `exc` to the console; the text made in the worker that caught it, or made now in a new one."""
        formatted, self._formatted = self._formatted, None
        if formatted is not None and formatted[0] is exc:
            text = formatted[1]
        else:
            made: list[str] = []
            self._in_worker(lambda: made.append(self.format_exception(exc)))
            text = made[0] if made else f"{_console_name(exc)}: {STR_FAILED}\n"
        self.console(text)

    def console(self, text: str) -> None:
        """Text to the host as the firmware's own printer sends it (cooked \\n -> \\r\\n), past any object that
        board code could have replaced."""
        self.link.write(text.replace("\n", "\r\n").encode("utf-8", "surrogateescape"))

    # -- compiling and importing ---------------------------------------------------------------------------------

    def _compile(self, source: bytes | str, filename: str, interactive: bool = False,
                 mode: str = "exec") -> types.CodeType:
        self._board_files.add(filename)
        try:
            tree = ast.parse(source, filename, mode)
        except ValueError as exc:  # NUL bytes in the source
            raise SyntaxError(str(exc), (filename, 1, 0, "")) from None
        if interactive and mode == "exec":
            for i, node in enumerate(tree.body):
                if isinstance(node, ast.Expr):  # the REPL prints the value of each top-level expression
                    tree.body[i] = _printed(node)
        if mode == "single":  # compile(..., "single"): each expression statement's value printed, as the REPL does
            tree, mode = ast.Module(_SingleInput().visit(tree).body, []), "exec"
        tree = _BoardSemantics(filename).visit(tree)
        return compile(ast.fix_missing_locations(tree), filename, mode, dont_inherit=True)

    def _board_compile(self, source, filename, mode, flags=0, dont_inherit=False, optimize=-1):
        """compile() of board code: its source through the same rewrites as code the REPL runs."""
        if mode not in ("exec", "eval", "single"):
            raise ValueError("compile() mode must be 'exec', 'eval' or 'single'")
        if isinstance(source, (str, bytes, bytearray)):
            return self._compile(bytes(source) if isinstance(source, bytearray) else source, str(filename),
                                 mode=mode)
        return builtins.compile(source, filename, mode, flags, dont_inherit, optimize)

    def _code_for(self, source, mode: str):
        if isinstance(source, (str, bytes, bytearray)):
            return self._compile(bytes(source) if isinstance(source, bytearray) else source, "<string>", mode=mode)
        return source

    def _board_exec(self, source, globals=None, locals=None):  # noqa: A002 - exec's own parameter names
        """exec() of board code: a string compiled as board code, run in the caller's namespace by default."""
        globals, locals = self._namespace(globals, locals)
        return builtins.exec(self._code_for(source, "exec"), globals, locals)

    def _board_eval(self, source, globals=None, locals=None):  # noqa: A002 - eval's own parameter names
        globals, locals = self._namespace(globals, locals)
        return builtins.eval(self._code_for(source, "eval"), globals, locals)

    def _namespace(self, globals, locals) -> tuple[dict, object]:  # noqa: A002
        """exec/eval's namespaces: the board caller's by default; a dict given without `__builtins__` gets the
        board's (CPython would put its own there, and a print() in it would reach the twin's host stdout)."""
        if globals is None:
            caller = sys._getframe(2)
            globals, locals = caller.f_globals, caller.f_locals if locals is None else locals
        if isinstance(globals, dict) and "__builtins__" not in globals:
            globals["__builtins__"] = self.builtins
        return globals, globals if locals is None else locals

    def _import(self, name: str, globals=None, locals=None, fromlist=(), level: int = 0):
        if level:
            raise ImportError("can't perform relative import")
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            self.module(".".join(parts[:depth]))
        module = self.module(name)
        if fromlist and hasattr(module, "__path__"):
            for attr in fromlist:
                if attr != "*" and not hasattr(module, attr):
                    try:
                        setattr(module, attr, self.module(f"{name}.{attr}"))
                    except ImportError:
                        pass  # `from pkg import name` then fails with the usual error
        return module if fromlist else self.module(parts[0])

    def module(self, name: str) -> types.ModuleType:
        """The module called `name`: made or loaded once per soft reset."""
        name = ALIASES.get(name, name)
        if name in self.modules:
            return self.modules[name]
        if name in self.sys_modules:
            return self.sys_modules[name]
        if name in BOARD_MODULES:
            module = self.modules[name] = BOARD_MODULES[name](self)
            return module
        if name == "q15attn":
            module = self.sys_modules[name] = self._q15attn()
            return module
        return self._load_source(name)

    def _q15attn(self) -> types.ModuleType:
        """The native module, emulated: its calls report cycles, their wall time is taken off the board clock, and a
        Ctrl-C waits for the call to return."""
        if self._q15_native is None:
            try:
                from mcu.sim.q15emu import make_module
            except ModuleNotFoundError as exc:
                if exc.name in ("mcu.sim.q15emu", "mcu.sim"):
                    raise ImportError("no module named 'q15attn'") from None
                raise
            self._q15_native = make_module(self.clock_hz, self.hw.add_cycles)
        module = types.ModuleType("q15attn", self._q15_native.__doc__)
        for attr, value in vars(self._q15_native).items():
            if not attr.startswith("__"):
                setattr(module, attr, self._native(value, attr) if callable(value) else value)
        return module

    def _native(self, fn: Callable, name: str) -> Callable:
        """`fn` as the natmod's function `name` (the binding, mcu.sim.q15emu, checks its arguments as
        modq15attn.c does): the call's wall time off the board clock, a Ctrl-C during the call raised once it
        returns, and no host name in its repr or its errors."""
        timed = self.hw.clock.excluding(fn)

        def call(*args, **kwargs):
            with self.link.deferred_interrupts():
                return timed(*args, **kwargs)

        call.__name__ = call.__qualname__ = name
        call.__module__ = "q15attn"
        return call

    def _load_source(self, name: str) -> types.ModuleType:
        """A .py module (or package) found on the board's sys.path, run in a module namespace of its own."""
        parent, _, leaf = name.rpartition(".")
        if parent:
            search = list(getattr(self.module(parent), "__path__", []))
        else:
            search = [entry for entry in self.module("sys").path if entry != ".frozen"]
        for entry in search:
            base = f"{entry.rstrip('/')}/{leaf}" if entry else leaf
            package = f"{base}/__init__.py"
            for path, is_package in ((package, True), (f"{base}.py", False)):
                if self.sandbox.is_file(path):
                    return self._exec_module(name, path, base if is_package else None)
            if self.sandbox.is_file(f"{base}.mpy"):
                return self._load_mpy(name, f"{base}.mpy")
        raise ImportError(f"no module named '{name}'")

    def _load_mpy(self, name: str, path: str) -> types.ModuleType:
        """A .mpy module: its header checked against the board's ABI as MicroPython checks it; then, since the twin
        has no MicroPython VM, run as the kbench board module whose mpy-cross output it is byte for byte."""
        from mcu.mpy import MpyAbi, board_source_for

        data = self.sandbox.read_bytes(path)
        board = MpyAbi.from_board(self.mpy_abi)
        if data[:1] != b"M" or len(data) < 4:
            raise ValueError("incompatible .mpy file")
        found = MpyAbi.from_file(data)
        if found.version != board.version or (found.arch and found.sub != board.sub):
            raise ValueError("incompatible .mpy file")
        if found.arch not in (0, board.arch):
            raise ValueError("incompatible .mpy arch")
        known = board_source_for(data) if found.arch == 0 else None
        if known is None:
            raise ImportError(f"kbench twin: cannot run '{path}': the twin runs only kbench's own board modules, "
                              "recognised by their mpy-cross output")
        return self._exec_module(name, f"{known[0]}.py", None, source=known[1])

    def _exec_module(self, name: str, path: str, package_dir: str | None,
                     source: bytes | None = None) -> types.ModuleType:
        module = types.ModuleType(name)
        module.__file__ = path
        if package_dir is not None:
            module.__path__ = [package_dir]
        module.__dict__["__builtins__"] = self.builtins
        self.sys_modules[name] = module
        self._board_files.add(path)
        try:
            code = self.sandbox.read_bytes(path) if source is None else source
            exec(self._compile(code, path), module.__dict__)
        except BaseException:
            del self.sys_modules[name]
            raise
        return module

    # -- builtins ------------------------------------------------------------------------------------------------

    def _make_builtins(self) -> types.ModuleType:
        """The board's `builtins` module, whose dict is the builtins of all board code until the next soft reset."""
        module = types.ModuleType("builtins")
        table = vars(module)
        table.update((k, v) for k, v in vars(builtins).items() if not k.startswith("__") or k == "__build_class__")
        for name in ("exit", "quit", "copyright", "credits", "license", "breakpoint"):
            table.pop(name, None)
        table.update(__name__="builtins", __import__=self._import, open=self.sandbox.open, print=self._print,
                     input=self._input, help=self._help, exec=self._board_exec, eval=self._board_eval,
                     compile=self._board_compile)
        table[REPL_PRINT] = self._repl_print
        table[EXCEPTION_ATTR] = exception_attr
        table[CAUGHT] = caught
        return module

    def _print(self, *args, sep=" ", end="\n", file=None, flush=False) -> None:
        sep, end = " " if sep is None else sep, "\n" if end is None else end
        if file is None:
            self.console(sep.join(map(str, args)) + end)  # print() writes to the HAL's stdout, not sys.stdout
            return
        for i, arg in enumerate(args):  # a stream gets each piece in its own write, as mp_builtin_print sends them
            if i:
                file.write(sep)
            file.write(str(arg))
        file.write(end)

    def _repl_print(self, value) -> None:
        if value is not None:
            self.console(repr(value) + "\n")

    def _input(self, prompt: str = "") -> str:
        """A line from the host, echoed, as the board's input() reads it."""
        self.console(str(prompt))
        line = bytearray()
        while True:
            c = self.link.read_byte()
            if c in (0x0D, 0x0A):
                self.link.write(b"\r\n")
                return line.decode("utf-8", "replace")
            if c in (0x08, 0x7F):
                if line:
                    line.pop()
                    self.link.write(b"\b \b")
            elif c == 0x04 and not line:
                raise EOFError()
            elif c >= 0x20:
                line.append(c)
                self.link.write(bytes([c]))

    def _help(self, what=None) -> None:
        if what is None:
            self.console(HELP_TEXT)
        elif what == "modules":
            self.console(" ".join(sorted(BOARD_MODULES) + ["builtins", "q15attn"]) + "\n")
        else:
            self.console(f"object {what!r} is of type {type(what).__name__}\n")

    # -- heap model ----------------------------------------------------------------------------------------------

    def heap_used(self) -> int:
        """An estimate of the GC heap in use: what the globals (and loaded modules) reach, buffers at their size."""
        total, seen, count = HEAP_BASELINE, set(), 0
        stack: list = [self.globals] + [vars(m) for m in self.sys_modules.values()]
        while stack and count < HEAP_SCAN_LIMIT:
            obj = stack.pop()
            if id(obj) in seen or obj is self.builtins or isinstance(obj, types.ModuleType):
                continue
            seen.add(id(obj))
            count += 1
            if isinstance(obj, (bytes, bytearray, str)):
                total += 16 + len(obj)
            elif isinstance(obj, _array.array):
                total += 16 + len(obj) * obj.itemsize
            elif isinstance(obj, dict):
                total += 16 + 16 * len(obj)
                stack.extend(obj.values())
            elif isinstance(obj, (list, tuple, set, frozenset, collections.deque)):
                total += 16 + 4 * len(obj)
                stack.extend(obj)
            elif isinstance(obj, (types.FunctionType, type)):
                total += 64
            elif hasattr(obj, "__dict__"):
                total += 16
                stack.append(vars(obj))
            else:
                total += 16
        return total

    def mem_free(self) -> int:
        return max(0, HEAP_BYTES - self.heap_used())

    def check_alloc(self, nbytes: int) -> None:
        if nbytes > self.mem_free():
            raise MemoryError(f"memory allocation failed, allocating {nbytes} bytes")
