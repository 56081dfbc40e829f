"""The twin's MicroPython interpreter: what code sent over the REPL runs in, shaped like MicroPython's STM32 port.

Code runs in CPython with `exec`, in a globals dict that a soft reset replaces and that persists between commands
otherwise. Its builtins are mcu.sim.board_builtins' (made anew at each soft reset, as are sys.stdin/stdout and
every board module) and its source goes through mcu.sim.compiler's rewrites. `import` (`import_module`) returns
the board's modules (mcu.sim.modules.BOARD_MODULES, with the `u`-prefixed aliases), `.py` modules found on the
board's `sys.path` inside the sandboxed folder, or `q15attn` (the Cortex-M4 kernel run by mcu.sim.q15emu); any
other name raises ImportError "no module named 'x'". Tracebacks are printed as MicroPython prints them
(mcu.sim.exceptions); stdin and stdout are mcu.sim.stdio's. A heap estimate stands in for the GC heap
(`gc.mem_free`, MemoryError).

Board code never takes the twin down: what the REPL itself prints (tracebacks, the values of expressions, print())
goes straight to the link, as the firmware's HAL printer does, never through objects board code can replace; and
formatting an exception runs the exception's own code (`__str__`) in the worker, interruptible and guarded, so a
failing one prints `<exception str() failed>` as MicroPython does.

Each command runs in a fresh worker thread so that the link's reader can raise KeyboardInterrupt in it
(mcu.sim.uart.Link.feed) while the REPL thread waits. docs/twin.md lists what is modelled and what is not.
"""

from __future__ import annotations

import array as _array
import collections
import random as _random
import threading
import types
from pathlib import Path
from typing import Callable

from mcu.sim.board_builtins import make_builtins
from mcu.sim.compiler import compile_board
from mcu.sim.exceptions import STR_FAILED, console_name, exception_name, exception_text
from mcu.sim.modules import BOARD_MODULES, BUILD_DATE, HEAP_BYTES, MACHINE, MPY_ABI, VERSION
from mcu.sim.peripherals import Peripherals
from mcu.sim.sandbox import Sandbox
from mcu.sim.sealed import BoardFunction
from mcu.sim.stdio import TextIn, TextOut
from mcu.sim.uart import KBD_INTR_DEFAULT, Link

HEAP_BASELINE = 3 * 1024  # what a freshly reset interpreter already holds
HEAP_SCAN_LIMIT = 20_000
DEFAULT_CLOCK_HZ = 168_000_000
ALIASES = {"u" + name: name for name in (
    "array", "binascii", "collections", "errno", "hashlib", "heapq", "io", "json", "os", "random", "re", "select",
    "struct", "sys", "time")}


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
        self.builtins_module = make_builtins(self)
        self.builtins = vars(self.builtins_module)
        self.modules["builtins"] = self.builtins_module
        main = types.ModuleType("__main__")  # `import __main__` gives the namespace the REPL runs code in
        main.__builtins__ = self.builtins
        self.modules["__main__"] = main
        self.globals: dict = vars(main)
        self._formatted = None
        self.link.kbd_char = KBD_INTR_DEFAULT

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
                exec(self.compile(source, filename, interactive), self.globals)
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
        return "\n".join(lines + [f"{console_name(exc)}: {STR_FAILED}"]) + "\n"

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
            text = made[0] if made else f"{console_name(exc)}: {STR_FAILED}\n"
        self.console(text)

    def console(self, text: str) -> None:
        """Text to the host as the firmware's own printer sends it (cooked \\n -> \\r\\n), past any object that
        board code could have replaced."""
        self.link.write(text.replace("\n", "\r\n").encode("utf-8", "surrogateescape"))

    # -- compiling and importing ---------------------------------------------------------------------------------

    def compile(self, source: bytes | str, filename: str, interactive: bool = False,
                mode: str = "exec") -> types.CodeType:
        """`source` compiled as board code (mcu.sim.compiler), its frames listed in tracebacks."""
        self._board_files.add(filename)
        return compile_board(source, filename, interactive, mode)

    def import_module(self, name: str, globals=None, locals=None, fromlist=(), level: int = 0):
        """The board's `__import__`."""
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
                from mcu.sim.q15module import make_module
            except ModuleNotFoundError as exc:
                if exc.name in ("mcu.sim.q15module", "mcu.sim.q15emu", "mcu.sim"):
                    raise ImportError("no module named 'q15attn'") from None
                raise
            self._q15_native = make_module(self.clock_hz, self.hw.add_cycles)
        module = types.ModuleType("q15attn", self._q15_native.__doc__)
        for attr, value in vars(self._q15_native).items():
            if not attr.startswith("__"):
                wrapped = value if not callable(value) else \
                    BoardFunction(self._native(value, attr, kernel=not getattr(value, "framing", False)))
                setattr(module, attr, wrapped)
        return module

    def _native(self, fn: Callable, name: str, kernel: bool = True) -> Callable:
        """`fn` as the natmod's function `name` (the binding, mcu.sim.q15emu, checks its arguments as
        modq15attn.c does), with no host name in its repr or its errors. A kernel call (emulated, reporting its own
        cycles) has its wall time taken off the board clock and a Ctrl-C during it raised once it returns; the
        framing helpers (microseconds of host C) run as they are."""
        if kernel:
            timed = self.hw.clock.excluding(fn)

            def call(*args, **kwargs):
                with self.link.deferred_interrupts():
                    return timed(*args, **kwargs)
        else:
            def call(*args, **kwargs):
                return fn(*args, **kwargs)

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
            exec(self.compile(code, path), module.__dict__)
        except BaseException:
            del self.sys_modules[name]
            raise
        return module

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
