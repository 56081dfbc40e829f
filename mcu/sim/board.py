"""The twin's board namespace: what code sent over the REPL sees, shaped like MicroPython's STM32 port.

Code runs in CPython with `exec`, in a globals dict that a soft reset replaces and that persists between commands
otherwise. Its builtins are CPython's with `__import__`, `open`, `print`, `input` and `help` replaced: `import`
returns the board's modules (BOARD_MODULES, with the `u`-prefixed aliases), `.py` modules found on the board's
`sys.path` inside the sandboxed folder, or `q15attn` (the Cortex-M4 kernel run by mcu.sim.q15emu); any other name
raises ImportError "no module named 'x'". `print` and `sys.stdout.write` are cooked (\\n -> \\r\\n),
`sys.stdout.buffer.write` is raw, and tracebacks are printed as MicroPython prints them.

Each command runs in a fresh worker thread so that the link's reader can raise KeyboardInterrupt in it
(repl.Link.feed) while the REPL thread waits. docs/twin.md lists what is modelled and what is not.
"""

from __future__ import annotations

import array as _array
import ast
import binascii as _binascii
import builtins
import calendar
import collections
import errno as _errno
import hashlib as _hashlib
import heapq
import io
import json
import math
import random as _random
import re
import struct
import threading
import time as _time
import types
from pathlib import Path
from typing import Callable

from mcu.sim.peripherals import Peripherals
from mcu.sim.repl import Link
from mcu.sim.sandbox import EPOCH_2000, Sandbox, board_error

VERSION = (1, 27, 0, "")
BUILD_DATE = "2026-01-01"
MACHINE = "kbench twin of F4DISC with STM32F407"
MPY_ABI = 7942  # .mpy version 6.3, arch armv7emsp: (7 << 10) | (3 << 8) | 6
HEAP_BYTES = 100 * 1024
HEAP_BASELINE = 3 * 1024  # what a freshly reset interpreter already holds
HEAP_SCAN_LIMIT = 20_000
TICKS_PERIOD = 1 << 30  # MICROPY_PY_TIME_TICKS_PERIOD: ticks_* wrap at 2**30
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
)
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


# -- stdio ------------------------------------------------------------------------------------------------------

class RawOut:
    """sys.stdout.buffer: bytes straight to the link."""

    def __init__(self, link: Link):
        self._link = link

    def write(self, data) -> int:
        data = bytes(memoryview(data).cast("B"))
        self._link.write(data)
        return len(data)

    def flush(self) -> None:
        pass


class TextOut:
    """sys.stdout / sys.stderr: text, cooked (\\n -> \\r\\n) as mp_hal_stdout_tx_strn_cooked does."""

    def __init__(self, link: Link):
        self.buffer = RawOut(link)
        self._link = link

    def write(self, text) -> int:
        if not isinstance(text, str):
            raise TypeError(f"can't convert '{type(text).__name__}' object to str implicitly")
        self._link.write(text.replace("\n", "\r\n").encode("utf-8", "surrogateescape"))
        return len(text)

    def flush(self) -> None:
        pass


class RawIn:
    """sys.stdin.buffer: blocking reads of the bytes the host sends."""

    def __init__(self, link: Link):
        self._link = link

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            data = self._link.read_some(1)
            return data + self._link.read_some(4096, timeout=0) if self._link.available() else data
        return self._link.read(size)

    def readinto(self, buf, size: int | None = None) -> int:
        view = memoryview(buf).cast("B")
        n = len(view) if size is None else min(size, len(view))
        view[:n] = self._link.read(n)
        return n

    def readline(self) -> bytes:
        line = bytearray()
        while not line.endswith(b"\n"):
            line += self._link.read(1)
        return bytes(line)


class TextIn:
    """sys.stdin: the same bytes decoded as UTF-8."""

    def __init__(self, link: Link):
        self.buffer = RawIn(link)

    def read(self, size: int = -1) -> str:
        return self.buffer.read(size).decode("utf-8", "replace")

    def readline(self) -> str:
        return self.buffer.readline().decode("utf-8", "replace")


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


# -- the board --------------------------------------------------------------------------------------------------

class Board:
    """The interpreter state of the twin: sandboxed filesystem, board modules, globals, and how code runs."""

    def __init__(self, root: Path | str, link: Link, clock_hz: int = DEFAULT_CLOCK_HZ,
                 peripherals: Peripherals | None = None, mpy_abi: int = MPY_ABI):
        self.link = link
        self.clock_hz = clock_hz
        self.mpy_abi = mpy_abi
        self.sandbox = Sandbox(root)
        self.hw = peripherals or Peripherals(clock_hz)
        self.stdout = TextOut(link)
        self.stdin = TextIn(link)
        self.rtc_offset_s = 0
        self._board_files: set[str] = {"<stdin>"}
        self._q15_native: types.ModuleType | None = None
        self.reset()

    # -- what the REPL calls -------------------------------------------------------------------------------------

    def reset(self) -> None:
        """A soft reset: new globals, modules and builtins, open files closed, cwd back to '/'."""
        self.sandbox.close_all()
        self.modules: dict[str, types.ModuleType] = {}  # board modules made so far (ROM: not in sys.modules)
        self.sys_modules: dict[str, types.ModuleType] = {}  # modules loaded from the filesystem, and q15attn
        self.random = _random.Random()
        self.builtins = self._make_builtins()
        self.globals: dict = {"__name__": "__main__", "__builtins__": self.builtins}
        self.link.kbd_char = 0x03

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
                self.link.arm()
                try:
                    exec(self._compile(source, filename, interactive), self.globals)
                finally:
                    self.link.disarm()
            except BaseException as exc:  # noqa: BLE001 - everything the code raised is the board's to report
                outcome.append(exc)

        def guarded() -> None:
            try:
                run()
            except BaseException:  # noqa: BLE001 - an interrupt landing after the code ended
                pass

        worker = threading.Thread(target=guarded, name="twin-exec", daemon=True)
        worker.start()
        worker.join()
        self.link.disarm()
        return outcome[0] if outcome else None

    def format_exception(self, exc: BaseException) -> str:
        """The traceback as MicroPython prints it: board frames only, "Traceback" only when there are frames."""
        frames = []
        tb = exc.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_filename in self._board_files:
                frames.append(f'  File "{code.co_filename}", line {tb.tb_lineno}, in {code.co_name}')
            tb = tb.tb_next
        if isinstance(exc, SyntaxError) and exc.filename in self._board_files:
            frames.append(f'  File "{exc.filename}", line {exc.lineno}')
        lines = (["Traceback (most recent call last):"] if frames else []) + frames
        lines.append(f"{exception_name(exc)}: {exception_text(exc)}")
        return "\n".join(lines) + "\n"

    def write_exception(self, exc: BaseException) -> None:
        self.stdout.write(self.format_exception(exc))

    # -- compiling and importing ---------------------------------------------------------------------------------

    def _compile(self, source: bytes | str, filename: str, interactive: bool) -> types.CodeType:
        self._board_files.add(filename)
        try:
            if not interactive:
                return compile(source, filename, "exec", dont_inherit=True)
            tree = ast.parse(source, filename, "exec")
        except ValueError as exc:  # NUL bytes in the source
            raise SyntaxError(str(exc), (filename, 1, 0, "")) from None
        for i, node in enumerate(tree.body):
            if isinstance(node, ast.Expr):  # the REPL prints the value of each top-level expression
                call = ast.Call(ast.Name(REPL_PRINT, ast.Load()), [node.value], [])
                tree.body[i] = ast.copy_location(ast.Expr(call), node)
        return compile(ast.fix_missing_locations(tree), filename, "exec", dont_inherit=True)

    def _import(self, name: str, globals=None, locals=None, fromlist=(), level: int = 0):
        if level:
            raise ImportError("can't perform relative import")
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            self._module(".".join(parts[:depth]))
        module = self._module(name)
        if fromlist and hasattr(module, "__path__"):
            for attr in fromlist:
                if attr != "*" and not hasattr(module, attr):
                    try:
                        setattr(module, attr, self._module(f"{name}.{attr}"))
                    except ImportError:
                        pass  # `from pkg import name` then fails with the usual error
        return module if fromlist else self._module(parts[0])

    def _module(self, name: str) -> types.ModuleType:
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
                setattr(module, attr, self.hw.clock.excluding(self._native(value)) if callable(value) else value)
        return module

    def _native(self, fn: Callable) -> Callable:
        """`fn` as a native function: a Ctrl-C during the call is raised once it returns."""

        def call(*args, **kwargs):
            with self.link.deferred_interrupts():
                return fn(*args, **kwargs)

        return call

    def _load_source(self, name: str) -> types.ModuleType:
        """A .py module (or package) found on the board's sys.path, run in a module namespace of its own."""
        parent, _, leaf = name.rpartition(".")
        if parent:
            search = list(getattr(self._module(parent), "__path__", []))
        else:
            search = [entry for entry in self._module("sys").path if entry != ".frozen"]
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
            exec(compile(code, path, "exec", dont_inherit=True), module.__dict__)
        except BaseException:
            del self.sys_modules[name]
            raise
        return module

    # -- builtins ------------------------------------------------------------------------------------------------

    def _make_builtins(self) -> dict:
        table = dict(vars(builtins))
        for name in ("exit", "quit", "copyright", "credits", "license", "breakpoint"):
            table.pop(name, None)
        table.update(__import__=self._import, open=self.sandbox.open, print=self._print, input=self._input,
                     help=self._help)
        table[REPL_PRINT] = self._repl_print
        return table

    def _print(self, *args, sep=" ", end="\n", file=None, flush=False) -> None:
        text = (" " if sep is None else sep).join(map(str, args)) + ("\n" if end is None else end)
        (self.stdout if file is None else file).write(text)

    def _repl_print(self, value) -> None:
        if value is not None:
            self.stdout.write(repr(value) + "\n")

    def _input(self, prompt: str = "") -> str:
        """A line from the host, echoed, as the board's input() reads it."""
        self.stdout.write(str(prompt))
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
            self.stdout.write(HELP_TEXT)
        elif what == "modules":
            self.stdout.write(" ".join(sorted(BOARD_MODULES) + ["q15attn"]) + "\n")
        else:
            self.stdout.write(f"object {what!r} is of type {type(what).__name__}\n")

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


# -- board modules: one factory per module, called once per soft reset -------------------------------------------

def _module(name: str, doc: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name, doc)
    for key, value in attrs.items():
        setattr(module, key, value)
    return module


def make_os(board: Board) -> types.ModuleType:
    box = board.sandbox
    uname = collections.namedtuple("uname_result", "sysname nodename release version machine")
    version = ".".join(map(str, VERSION[:3]))
    return _module(
        "os", "os on the board's sandboxed volume",
        stat=box.stat, ilistdir=box.ilistdir, listdir=box.listdir, mkdir=box.mkdir, rmdir=box.rmdir,
        remove=box.remove, unlink=box.remove, rename=box.rename, getcwd=box.getcwd, chdir=box.chdir,
        statvfs=box.statvfs, sep="/", sync=lambda: None, urandom=lambda n: board.random.randbytes(n),
        uname=lambda: uname("pyboard", "pyboard", version, f"v{version} on {BUILD_DATE}", MACHINE),
        dupterm=lambda *args: None)


class Implementation:
    """sys.implementation as MicroPython prints it."""

    name = "micropython"
    version = VERSION
    _machine = MACHINE

    def __init__(self, mpy_abi: int = MPY_ABI):
        self._mpy = mpy_abi

    def __repr__(self) -> str:
        return f"(name='micropython', version={VERSION!r}, _machine='{MACHINE}', _mpy={self._mpy})"


def make_sys(board: Board) -> types.ModuleType:
    version = ".".join(map(str, VERSION[:3]))

    def exit(code=0):
        raise SystemExit(code)

    def print_exception(exc, file=None):
        (board.stdout if file is None else file).write(board.format_exception(exc))

    return _module(
        "sys", "sys of the board", argv=[], byteorder="little", maxsize=2**31 - 1, platform="pyboard",
        implementation=Implementation(board.mpy_abi), version=f"3.4.0; MicroPython v{version} on {BUILD_DATE}",
        version_info=(3, 4, 0), path=["", ".frozen", "/flash", "/flash/lib"], modules=board.sys_modules,
        stdin=board.stdin, stdout=board.stdout, stderr=board.stdout, exit=exit, print_exception=print_exception)


def make_time(board: Board) -> types.ModuleType:
    clock, hz = board.hw.clock, board.clock_hz
    mask, half = TICKS_PERIOD - 1, TICKS_PERIOD // 2

    def ticks_cpu() -> int:
        board.hw.dwt.enable()
        return board.hw.dwt.cyccnt() & mask

    def ticks_diff(end: int, start: int) -> int:
        return ((int(end) - int(start) + half) & mask) - half

    def now() -> int:
        return board.sandbox.board_time() + board.rtc_offset_s

    def localtime(secs=None) -> tuple:
        t = _time.gmtime((now() if secs is None else int(secs)) + EPOCH_2000)
        return (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, t.tm_wday, t.tm_yday)

    def mktime(t) -> int:
        return calendar.timegm((t[0], t[1], t[2], t[3], t[4], t[5], 0, 0, 0)) - EPOCH_2000

    return _module(
        "time", "time on the board clock",
        ticks_ms=lambda: clock.cycles() * 1000 // hz & mask, ticks_us=lambda: clock.cycles() * 1_000_000 // hz & mask,
        ticks_cpu=ticks_cpu, ticks_diff=ticks_diff, ticks_add=lambda t, delta: (int(t) + int(delta)) & mask,
        sleep=lambda s: board.link.pause(s), sleep_ms=lambda ms: board.link.pause(ms / 1e3),
        sleep_us=lambda us: board.link.pause(us / 1e6), time=now, time_ns=lambda: now() * 10**9,
        localtime=localtime, gmtime=localtime, mktime=mktime)


class Mem:
    """machine.mem8 / mem16 / mem32: aligned loads and stores of the modelled addresses."""

    def __init__(self, board: Board, width: int):
        self._memory = board.hw.memory
        self._width = width

    def _address(self, address) -> int:
        if not isinstance(address, int):
            raise TypeError("address must be an int")
        address &= 0xFFFFFFFF
        if address % self._width:
            raise ValueError(f"address {address:08x} is not aligned to {self._width} bytes")
        return address

    def __getitem__(self, address) -> int:
        value = self._memory.read(self._address(address), self._width)
        return value - (1 << 32) if self._width == 4 and value >= 1 << 31 else value  # mem32 is signed

    def __setitem__(self, address, value) -> None:
        self._memory.write(self._address(address), self._width, int(value) & ((1 << 8 * self._width) - 1))

    def __repr__(self) -> str:
        return f"<{8 * self._width}-bit memory>"


def make_machine(board: Board) -> types.ModuleType:
    hz = board.clock_hz

    class RTC:
        def datetime(self, value=None):
            if value is None:
                t = board.modules.get("time") or board._module("time")
                y, mo, d, h, mi, s, wd, _ = t.localtime()
                return (y, mo, d, wd + 1, h, mi, s, 0)
            y, mo, d, _wd, h, mi, s = value[:7]
            target = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) - EPOCH_2000
            board.rtc_offset_s = target - board.sandbox.board_time()

    return _module(
        "machine", "machine of the STM32 port",
        freq=lambda *args: (hz, hz, hz // 4, hz // 2), reset=_soft_reset, soft_reset=_soft_reset,
        unique_id=lambda: bytes.fromhex("3a0047000d51353532383431"), mem8=Mem(board, 1), mem16=Mem(board, 2),
        mem32=Mem(board, 4), idle=lambda: board.link.pause(0), disable_irq=lambda: 0, enable_irq=lambda state=0: None,
        reset_cause=lambda: 5, PWRON_RESET=1, HARD_RESET=2, WDT_RESET=3, DEEPSLEEP_RESET=4, SOFT_RESET=5, RTC=RTC)


def make_pyb(board: Board) -> types.ModuleType:
    adc, clock, hz = board.hw.adc, board.hw.clock, board.clock_hz

    class ADCAll:
        """pyb.ADCAll(resolution, mask): the internal channels (16 temperature, 17 VREFINT, 18 VBAT)."""

        def __init__(self, resolution: int, mask: int = 0xFFFFFFFF):
            if resolution not in (6, 8, 10, 12):
                raise ValueError(f"resolution {resolution} not supported")
            self._resolution = resolution
            self._mask = mask

        def read_channel(self, channel: int) -> int:
            return adc.raw(channel) >> (12 - self._resolution)

        def read_core_temp(self) -> float:
            return adc.core_temp()

        def read_core_vbat(self) -> float:
            return adc.core_vbat()

        def read_core_vref(self) -> float:
            return adc.core_vref()

        def read_vref(self) -> float:
            return adc.vref()

    class LED:
        def __init__(self, number: int):
            if not 1 <= number <= 4:
                raise ValueError(f"LED({number}) doesn't exist")
            self._on = False

        def on(self):
            self._on = True

        def off(self):
            self._on = False

        def toggle(self):
            self._on = not self._on

        def intensity(self, value=None):
            return 255 if self._on else 0

    def millis() -> int:
        return clock.cycles() * 1000 // hz & (TICKS_PERIOD - 1)

    def micros() -> int:
        return clock.cycles() * 1_000_000 // hz & (TICKS_PERIOD - 1)

    return _module(
        "pyb", "pyb of the STM32 port (ADCAll, LED and timing only)", ADCAll=ADCAll, LED=LED, millis=millis,
        micros=micros, elapsed_millis=lambda start: (millis() - start) & (TICKS_PERIOD - 1),
        elapsed_micros=lambda start: (micros() - start) & (TICKS_PERIOD - 1),
        delay=lambda ms: board.link.pause(ms / 1e3), udelay=lambda us: board.link.pause(us / 1e6),
        freq=lambda *args: (hz, hz, hz // 4, hz // 2), unique_id=lambda: bytes.fromhex("3a0047000d51353532383431"),
        hard_reset=_soft_reset)


def _soft_reset() -> None:
    """machine.reset / soft_reset / pyb.hard_reset on the twin: a soft reset, which SystemExit asks the REPL for."""
    raise SystemExit()


def make_gc(board: Board) -> types.ModuleType:
    state = {"enabled": True, "threshold": -1}
    return _module(
        "gc", "gc over the twin's heap estimate", collect=lambda: None, mem_free=board.mem_free,
        mem_alloc=lambda: min(HEAP_BYTES, board.heap_used()), enable=lambda: state.update(enabled=True),
        disable=lambda: state.update(enabled=False), isenabled=lambda: state["enabled"],
        threshold=lambda *amount: state.update(threshold=amount[0]) if amount else state["threshold"])


def make_micropython(board: Board) -> types.ModuleType:
    def kbd_intr(char: int) -> None:
        board.link.kbd_char = int(char)

    def mem_info(verbose=None) -> None:
        used = min(HEAP_BYTES, board.heap_used())
        board.stdout.write(f"stack: 512 out of 15360\nGC: total: {HEAP_BYTES}, used: {used}, "
                           f"free: {HEAP_BYTES - used}\n")

    def identity(fn):
        return fn

    return _module(
        "micropython", "micropython of the board", const=lambda value: value, kbd_intr=kbd_intr,
        opt_level=lambda *level: None if level else 0, mem_info=mem_info, qstr_info=lambda *v: None,
        stack_use=lambda: 512, heap_lock=lambda: 0, heap_unlock=lambda: 0, heap_locked=lambda: 0,
        alloc_emergency_exception_buf=lambda size: None, schedule=lambda fn, arg: fn(arg), native=identity,
        viper=identity)


class Sha256:
    """hashlib.sha256 as MicroPython has it: update() and digest()."""

    def __init__(self, data=b""):
        self._hash = _hashlib.sha256(bytes(data))

    def update(self, data) -> None:
        self._hash.update(bytes(data))

    def digest(self) -> bytes:
        return self._hash.digest()


def make_hashlib(board: Board) -> types.ModuleType:
    return _module("hashlib", "hashlib of the board (sha256)", sha256=Sha256)


def make_binascii(board: Board) -> types.ModuleType:
    def hexlify(data, sep=None) -> bytes:
        return _binascii.hexlify(bytes(data), sep) if sep else _binascii.hexlify(bytes(data))

    def b2a_base64(data, newline=True) -> bytes:
        return _binascii.b2a_base64(bytes(data), newline=newline)

    return _module(
        "binascii", "binascii of the board", hexlify=hexlify, unhexlify=_binascii.unhexlify,
        a2b_base64=_binascii.a2b_base64, b2a_base64=b2a_base64, crc32=_binascii.crc32)


def make_array(board: Board) -> types.ModuleType:
    class array(_array.array):  # noqa: N801 - the board's name
        """array.array whose construction is charged against the board's heap (MemoryError when it won't fit)."""

        def __new__(cls, typecode, initializer=()):
            made = super().__new__(cls, typecode, initializer)
            board.check_alloc(len(made) * made.itemsize)
            return made

    return _module("array", "array of the board", array=array)


def make_errno(board: Board) -> types.ModuleType:
    codes = {name: getattr(_errno, name) for name in (
        "EPERM", "ENOENT", "EIO", "EBADF", "EAGAIN", "ENOMEM", "EACCES", "EEXIST", "ENODEV", "ENOTDIR", "EISDIR",
        "EINVAL", "ENOSPC", "EROFS", "EOPNOTSUPP", "ETIMEDOUT", "EINPROGRESS", "EALREADY")}
    return _module("errno", "errno of the board", errorcode={v: k for k, v in codes.items()}, **codes)


def make_io(board: Board) -> types.ModuleType:
    return _module("io", "io of the board", BytesIO=io.BytesIO, StringIO=io.StringIO, IOBase=io.IOBase,
                   open=board.sandbox.open)


def make_select(board: Board) -> types.ModuleType:
    POLLIN, POLLOUT, POLLERR, POLLHUP = 1, 4, 8, 16  # noqa: N806 - the board's names

    class Poll:
        """select.poll() for sys.stdin / sys.stdout (the only streams the twin has)."""

        def __init__(self):
            self._objects: dict[int, tuple[object, int]] = {}

        def register(self, obj, mask=POLLIN | POLLOUT):
            if obj not in (board.stdin, board.stdin.buffer, board.stdout, board.stdout.buffer):
                raise TypeError("kbench twin: select.poll only serves sys.stdin and sys.stdout")
            self._objects[id(obj)] = (obj, mask)

        def modify(self, obj, mask):
            if id(obj) not in self._objects:
                raise board_error(_errno.ENOENT)
            self._objects[id(obj)] = (obj, mask)

        def unregister(self, obj):
            self._objects.pop(id(obj), None)

        def _ready(self) -> list:
            ready = []
            for obj, mask in self._objects.values():
                readable = obj in (board.stdin, board.stdin.buffer) and board.link.available() > 0
                writable = obj in (board.stdout, board.stdout.buffer)
                events = (POLLIN if readable else 0) | (POLLOUT if writable else 0)
                if events & mask:
                    ready.append((obj, events & mask))
            return ready

        def poll(self, timeout=-1) -> list:
            ready = self._ready()
            if ready or timeout == 0:
                return ready
            wants_input = any(obj in (board.stdin, board.stdin.buffer) and mask & POLLIN
                              for obj, mask in self._objects.values())
            if wants_input:
                board.link.wait_readable(None if timeout is None or timeout < 0 else timeout / 1e3)
            elif timeout is not None and timeout > 0:
                board.link.pause(timeout / 1e3)
            return self._ready()

        def ipoll(self, timeout=-1, flags=0):
            return iter(self.poll(timeout))

    return _module("select", "select of the board (poll on stdin/stdout)", poll=Poll, POLLIN=POLLIN,
                   POLLOUT=POLLOUT, POLLERR=POLLERR, POLLHUP=POLLHUP)


def make_random(board: Board) -> types.ModuleType:
    rng = board.random
    return _module("random", "random of the board", seed=rng.seed, getrandbits=rng.getrandbits,
                   randrange=rng.randrange, randint=rng.randint, choice=rng.choice, random=rng.random,
                   uniform=rng.uniform)


def _passthrough(name: str, source: types.ModuleType, attrs: tuple[str, ...]) -> Callable[[Board], types.ModuleType]:
    return lambda board: _module(name, f"{name} of the board", **{a: getattr(source, a) for a in attrs})


BOARD_MODULES: dict[str, Callable[[Board], types.ModuleType]] = {
    "array": make_array,
    "binascii": make_binascii,
    "collections": _passthrough("collections", collections, ("namedtuple", "OrderedDict", "deque")),
    "errno": make_errno,
    "gc": make_gc,
    "hashlib": make_hashlib,
    "heapq": _passthrough("heapq", heapq, ("heappush", "heappop", "heapify")),
    "io": make_io,
    "json": _passthrough("json", json, ("dumps", "loads", "dump", "load")),
    "machine": make_machine,
    "math": _passthrough("math", math, tuple(n for n in dir(math) if not n.startswith("_"))),
    "micropython": make_micropython,
    "os": make_os,
    "pyb": make_pyb,
    "random": make_random,
    "re": _passthrough("re", re, ("compile", "match", "search", "sub", "split")),
    "select": make_select,
    "struct": _passthrough("struct", struct, ("pack", "pack_into", "unpack", "unpack_from", "calcsize")),
    "sys": make_sys,
    "time": make_time,
}
