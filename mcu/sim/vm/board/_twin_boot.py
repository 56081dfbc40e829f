# The twin's boot code, run by mcu/sim/vm/twin.mjs in each fresh VM before its REPL starts: what makes the
# WebAssembly port stand for the STM32F407 firmware. Board code imports `sys`, `gc`, `os`, `machine`, `pyb` and
# `q15attn` through the hook below and gets the board's: sys.implementation and sys.platform of the F407 build,
# gc.mem_free() without the port's split-heap allowance, OSError numbers as MicroPython's (the port's C library
# numbers them as Emscripten does), and the stand-in modules of /twin (mcu/sim/vm/board/) whose calls go to the
# twin's Python side through /dev/twin (q15attn's Cortex-M4 kernel, the modelled peripherals).
import builtins as _builtins
import gc as _gc
import os as _os
import sys as _sys
import micropython as _micropython

import js as _js

_SPLIT = 1 << 27  # the port's gc_get_max_new_split(), which its gc.mem_free() adds to the real figure
_STANDINS = ("machine", "pyb", "q15attn")
# Emscripten's errno numbers -> MicroPython's (Linux's)
_ERRNO = {63: 1, 44: 2, 29: 5, 60: 6, 8: 9, 6: 11, 48: 12, 2: 13, 10: 16, 20: 17, 75: 18, 54: 20, 31: 21, 28: 22,
          33: 24, 51: 28, 69: 30, 37: 36, 55: 39, 32: 40}


class _Implementation:
    # sys.implementation as the F407 firmware prints it
    name = "micropython"
    version = _sys.implementation.version
    _machine = "STM32F4DISC with STM32F407"
    _mpy = 7942  # .mpy 6.3, armv7emsp
    _build = "STM32F4DISC"

    def __repr__(self):
        return "(name='micropython', version=%r, _machine='%s', _mpy=%d, _build='%s')" % (
            self.version, self._machine, self._mpy, self._build)


class _BoardSys:
    implementation = _Implementation()
    platform = "pyboard"
    path = _sys.path

    def __getattr__(self, name):
        return getattr(_sys, name)


_kept = [0]  # bytes the twin itself holds in the VM's heap beyond a plain VM's (its boot code, stand-ins, ballast)


class _BoardGc:
    # gc as a board has it: mem_free without the split-heap allowance (the twin's heap cannot grow: capped), and
    # mem_alloc without what the twin itself holds
    collect = staticmethod(_gc.collect)

    @staticmethod
    def mem_alloc():
        return _gc.mem_alloc() - _kept[0]

    enable = staticmethod(_gc.enable)
    disable = staticmethod(_gc.disable)
    isenabled = staticmethod(_gc.isenabled)
    threshold = staticmethod(_gc.threshold)

    @staticmethod
    def mem_free():
        return _gc.mem_free() - _SPLIT


def _board_errors(function):
    def call(*args):
        try:
            return function(*args)
        except OSError as exc:
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
            if code in _ERRNO:
                raise OSError(_ERRNO[code]) from None
            raise
    return call


class _BoardOs:
    sep = "/"

    def __init__(self):
        for name in ("chdir", "getcwd", "ilistdir", "listdir", "mkdir", "remove", "rename", "rmdir", "stat",
                     "statvfs", "unlink"):
            setattr(self, name, _board_errors(getattr(_os, name)))

    def uname(self):
        version = "%d.%d.%d" % _sys.implementation.version[:3]
        return ("pyboard", "pyboard", version, "v%s on the kbench twin" % version, _Implementation._machine)

    def sync(self):
        pass

    def urandom(self, n):
        import random
        return bytes(random.getrandbits(8) for _ in range(n))

    def dupterm(self, *args):
        return None

    def __getattr__(self, name):
        return getattr(_os, name)


class _BoardMicropython:
    # micropython, with kbd_intr telling the twin first: the line's Ctrl-Cs so far are judged by the interrupt
    # character they arrived under, before it changes (mcu/sim/vm/twin.mjs)
    @staticmethod
    def kbd_intr(char):
        _js.kbenchInterruptCharChanging()
        _micropython.kbd_intr(char)

    def __getattr__(self, name):
        return getattr(_micropython, name)


_board = {"sys": _BoardSys(), "gc": _BoardGc(), "os": _BoardOs(), "micropython": _BoardMicropython()}
_import = _builtins.__import__
_serving = [None]


def _standin(name):
    module = _sys.modules.get(name)
    if module is None:
        saved = _sys.path[:]
        _sys.path[:] = ["/twin"]
        try:
            module = _import(name)
        finally:
            _sys.path[:] = saved
    return module


def _stepped_serve(module, rx=None, tx=None, kernel=None):
    # kbench_server.serve() as the twin runs it: begun and announced here, then stepped from JS one read at a time,
    # with a garbage collection after each (the port collects only between calls into the VM)
    server = module.begin(rx, tx, kernel)
    _serving[0] = module
    server.announce()
    _js.kbenchServing()


def _kbench_import(name, *rest):
    if name in _board:
        return _board[name]
    if name in _STANDINS:
        return _standin(name)
    module = _import(name, *rest)
    if name == "kbench_server" and hasattr(module, "begin") and not hasattr(module, "_stepped"):
        module._stepped = True
        module.serve = lambda rx=None, tx=None, kernel=None: _stepped_serve(module, rx, tx, kernel)
    return module


def _kbench_step():
    module = _serving[0]
    try:
        going = module.active.step()
    except BaseException:
        module.end()
        _serving[0] = None
        raise
    finally:
        _gc.collect()  # runs once this call has returned to JS
    if not going:
        module.end()
        _serving[0] = None
    return 1 if going else 0


_open = _builtins.open
_builtins.open = _board_errors(_open)
_builtins.__import__ = _kbench_import


def _input(prompt=""):
    # the port's input() reads a stdin no callback feeds, and hangs: the line's, as a board's
    if prompt:
        _sys.stdout.write(prompt)
    line = _sys.stdin.readline()
    return line[:-1] if line.endswith("\n") else line


_builtins.input = _input


_ballast = []


def _kbench_settle(board_free, board_alloc):
    # a ballast that leaves board code `board_free` bytes and shows it `board_alloc` allocated (a plain VM's after
    # boot), the stand-ins already loaded as a board's firmware has machine and pyb
    extra = _BoardGc.mem_free() - board_free
    if extra > 16:
        _ballast.append(bytearray(extra - 16))  # a GC block of its own header rounds it up
    _kept[0] = _gc.mem_alloc() - board_alloc


for _name in ("_twin_bridge", "machine", "pyb"):
    _standin(_name)
_sys.path[:] = ["", ".frozen", "/flash", "/flash/lib"]
_os.chdir("/flash")
_gc.collect()
