"""The twin's built-in modules (os, sys, time, gc, micropython, select, ...; machine and pyb are in
mcu/sim/modules_hardware.py) and their registry BOARD_MODULES: one factory per module, called once per soft reset
with the interpreter (mcu.sim.interpreter.Interpreter) whose state the module serves.

Each module offers what MicroPython's STM32 port offers and host code uses, over the twin's sandboxed folder, its
peripherals (mcu.sim.peripherals: the board clock, DWT, ADC) and its link; docs/twin.md lists what is modelled.
The firmware's identity (version, machine name, .mpy ABI, heap size) is defined here, where the modules report it.
Every class a module hands out is a fresh subclass per soft reset (mcu.sim.module_kit.fresh_class), so that board
code that patches one (`type(sys.implementation).name = ...`) changes nothing after the next reset; every function
is a BoardFunction (mcu.sim.module_kit.board_module), printed `<function>` and with no attribute leading to the
interpreter or to host modules.
"""

from __future__ import annotations

import array as _array
import binascii as _binascii
import calendar
import collections
import errno as _errno
import hashlib as _hashlib
import heapq
import io
import json
import math
import re
import struct
import time as _time
import types
from typing import TYPE_CHECKING, Callable

from mcu.sim.module_kit import TICKS_PERIOD, SysModule, board_module as _module
from mcu.sim.module_kit import fresh_class as _fresh
from mcu.sim.modules_hardware import make_machine, make_pyb
from mcu.sim.sandbox import EPOCH_2000
from mcu.sim.sealed import board_error

if TYPE_CHECKING:
    from mcu.sim.interpreter import Interpreter

VERSION = (1, 27, 0, "")
BUILD_DATE = "2026-01-01"
MACHINE = "kbench twin of F4DISC with STM32F407"
MPY_ABI = 7942  # .mpy version 6.3, arch armv7emsp: (7 << 10) | (3 << 8) | 6
HEAP_BYTES = 100 * 1024
GC_BLOCK_BYTES = 16  # MICROPY_BYTES_PER_GC_BLOCK on a 32-bit port


def make_os(interp: Interpreter) -> types.ModuleType:
    box = interp.sandbox
    uname = collections.namedtuple("uname_result", "sysname nodename release version machine")
    version = ".".join(map(str, VERSION[:3]))
    return _module(
        "os", "os on the board's sandboxed volume",
        stat=box.stat, ilistdir=box.ilistdir, listdir=box.listdir, mkdir=box.mkdir, rmdir=box.rmdir,
        remove=box.remove, unlink=box.remove, rename=box.rename, getcwd=box.getcwd, chdir=box.chdir,
        statvfs=box.statvfs, sep="/", sync=lambda: None, urandom=lambda n: interp.random.randbytes(n),
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


def make_sys(interp: Interpreter) -> types.ModuleType:
    version = ".".join(map(str, VERSION[:3]))

    def exit(*code):
        raise SystemExit(*code[:1])

    def print_exception(exc, file=None):
        text = interp.format_exception(exc)
        interp.console(text) if file is None else file.write(text)

    module = _module(
        "sys", "sys of the board", argv=[], byteorder="little", maxsize=2**31 - 1, platform="pyboard",
        implementation=_fresh(Implementation)(interp.mpy_abi), version=f"3.4.0; MicroPython v{version} on {BUILD_DATE}",
        version_info=(3, 4, 0), path=["", ".frozen", "/flash", "/flash/lib"], modules=interp.sys_modules,
        stdin=interp.stdin, stdout=interp.stdout, stderr=interp.stdout, exit=exit, print_exception=print_exception)
    module.__class__ = SysModule  # after its attributes are in place
    return module


def make_time(interp: Interpreter) -> types.ModuleType:
    clock, hz = interp.hw.clock, interp.clock_hz
    mask, half = TICKS_PERIOD - 1, TICKS_PERIOD // 2

    def ticks_cpu() -> int:
        interp.hw.dwt.enable()
        return interp.hw.dwt.cyccnt() & mask

    def ticks_diff(end: int, start: int) -> int:
        return ((int(end) - int(start) + half) & mask) - half

    def now() -> int:
        return interp.sandbox.board_time() + interp.rtc_offset_s

    def localtime(secs=None) -> tuple:
        t = _time.gmtime((now() if secs is None else int(secs)) + EPOCH_2000)
        return (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, t.tm_wday, t.tm_yday)

    def mktime(t) -> int:
        return calendar.timegm((t[0], t[1], t[2], t[3], t[4], t[5], 0, 0, 0)) - EPOCH_2000

    return _module(
        "time", "time on the board clock",
        ticks_ms=lambda: clock.cycles() * 1000 // hz & mask, ticks_us=lambda: clock.cycles() * 1_000_000 // hz & mask,
        ticks_cpu=ticks_cpu, ticks_diff=ticks_diff, ticks_add=lambda t, delta: (int(t) + int(delta)) & mask,
        sleep=lambda s: interp.link.pause(s), sleep_ms=lambda ms: interp.link.pause(ms / 1e3),
        sleep_us=lambda us: interp.link.pause(us / 1e6), time=now, time_ns=lambda: now() * 10**9,
        localtime=localtime, gmtime=localtime, mktime=mktime)


def make_gc(interp: Interpreter) -> types.ModuleType:
    state = {"enabled": True, "threshold": -1}
    return _module(
        "gc", "gc over the twin's heap estimate", collect=lambda: None, mem_free=interp.mem_free,
        mem_alloc=lambda: min(HEAP_BYTES, interp.heap_used()), enable=lambda: state.update(enabled=True),
        disable=lambda: state.update(enabled=False), isenabled=lambda: state["enabled"],
        threshold=lambda *amount: state.update(threshold=_gc_blocks(amount[0])) if amount else state["threshold"])


def _gc_blocks(amount: int) -> int:
    """gc.threshold's value as the port keeps it: whole 16-byte GC blocks, or -1 for none."""
    return -1 if amount < 0 else int(amount) // GC_BLOCK_BYTES * GC_BLOCK_BYTES


def make_micropython(interp: Interpreter) -> types.ModuleType:
    def kbd_intr(char: int) -> None:
        interp.link.kbd_char = int(char)

    def mem_info(verbose=None) -> None:
        used = min(HEAP_BYTES, interp.heap_used())
        interp.console(f"stack: 512 out of 15360\nGC: total: {HEAP_BYTES}, used: {used}, "
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


def make_hashlib(interp: Interpreter) -> types.ModuleType:
    return _module("hashlib", "hashlib of the board (sha256)", sha256=_fresh(Sha256))


def make_binascii(interp: Interpreter) -> types.ModuleType:
    def hexlify(data, sep=None) -> bytes:
        return _binascii.hexlify(bytes(data), sep) if sep else _binascii.hexlify(bytes(data))

    def b2a_base64(data, newline=True) -> bytes:
        return _binascii.b2a_base64(bytes(data), newline=newline)

    return _module(
        "binascii", "binascii of the board", hexlify=hexlify, unhexlify=_binascii.unhexlify,
        a2b_base64=_binascii.a2b_base64, b2a_base64=b2a_base64, crc32=_binascii.crc32)


def make_array(interp: Interpreter) -> types.ModuleType:
    class array(_array.array):  # noqa: N801 - the board's name
        """array.array whose construction is charged against the board's heap (MemoryError when it won't fit)."""

        def __new__(cls, typecode, initializer=()):
            made = super().__new__(cls, typecode, initializer)
            interp.check_alloc(len(made) * made.itemsize)
            return made

    return _module("array", "array of the board", array=array)


def make_errno(interp: Interpreter) -> types.ModuleType:
    codes = {name: getattr(_errno, name) for name in (
        "EPERM", "ENOENT", "EIO", "EBADF", "EAGAIN", "ENOMEM", "EACCES", "EEXIST", "ENODEV", "ENOTDIR", "EISDIR",
        "EINVAL", "ENOSPC", "EROFS", "EOPNOTSUPP", "ETIMEDOUT", "EINPROGRESS", "EALREADY")}
    return _module("errno", "errno of the board", errorcode={v: k for k, v in codes.items()}, **codes)


def make_io(interp: Interpreter) -> types.ModuleType:
    return _module("io", "io of the board", BytesIO=io.BytesIO, StringIO=io.StringIO, IOBase=io.IOBase,
                   open=interp.sandbox.open)


def make_select(interp: Interpreter) -> types.ModuleType:
    POLLIN, POLLOUT, POLLERR, POLLHUP = 1, 4, 8, 16

    class Poll:
        """select.poll() for sys.stdin / sys.stdout (the only streams the twin has)."""

        def __init__(self):
            self._objects: dict[int, tuple[object, int]] = {}

        def register(self, obj, mask=POLLIN | POLLOUT):
            if obj not in (interp.stdin, interp.stdin.buffer, interp.stdout, interp.stdout.buffer):
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
                readable = obj in (interp.stdin, interp.stdin.buffer) and interp.link.available() > 0
                writable = obj in (interp.stdout, interp.stdout.buffer)
                events = (POLLIN if readable else 0) | (POLLOUT if writable else 0)
                if events & mask:
                    ready.append((obj, events & mask))
            return ready

        def poll(self, timeout=-1) -> list:
            ready = self._ready()
            if ready or timeout == 0:
                return ready
            wants_input = any(obj in (interp.stdin, interp.stdin.buffer) and mask & POLLIN
                              for obj, mask in self._objects.values())
            if wants_input:
                interp.link.wait_readable(None if timeout is None or timeout < 0 else timeout / 1e3)
            elif timeout is not None and timeout > 0:
                interp.link.pause(timeout / 1e3)
            return self._ready()

        def ipoll(self, timeout=-1, flags=0):
            return iter(self.poll(timeout))

    return _module("select", "select of the board (poll on stdin/stdout)", poll=Poll, POLLIN=POLLIN,
                   POLLOUT=POLLOUT, POLLERR=POLLERR, POLLHUP=POLLHUP)


def make_random(interp: Interpreter) -> types.ModuleType:
    rng = interp.random
    return _module("random", "random of the board", seed=rng.seed, getrandbits=rng.getrandbits,
                   randrange=rng.randrange, randint=rng.randint, choice=rng.choice, random=rng.random,
                   uniform=rng.uniform)


def _passthrough(name: str, source: types.ModuleType,
                 attrs: tuple[str, ...]) -> Callable[[Interpreter], types.ModuleType]:
    return lambda interp: _module(name, f"{name} of the board", **{a: getattr(source, a) for a in attrs})


BOARD_MODULES: dict[str, Callable[[Interpreter], types.ModuleType]] = {
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
