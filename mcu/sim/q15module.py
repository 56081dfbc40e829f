"""The board twin's `q15attn` module: the native binding's API (mcu/native/modq15attn.c) over the emulated kernel
(mcu/sim/q15emu.py), for the twin's board namespace. The frame server's crc16 and cobs_encode (framing, untimed:
no cycles) are the standard library's CRC-16/CCITT (binascii.crc_hqx) and PyPI's `cobs`, to which the tests hold
the natmod's C (mcu/native/kbench_frame.c) byte for byte, behind the binding's argument checks (mcu/frame_c.py).

Arguments are taken as the binding takes them, with its messages: ints as machine words (a float is a TypeError, a
value beyond int32 an OverflowError naming it and its range), row0 and key0 within 0..32767, buffers by the buffer
protocol (a bytearray, or a writable memoryview of one, is raw int16 and must start on a 2-byte boundary; a streamed
head's state on an 8-byte one; oshift, the rows' output shifts, a writable bytearray or array('B')); everything else
is validated by the emulated kernel itself, whose ValueError carries its own message.
"""

from __future__ import annotations

import array
import binascii
import types
from typing import Callable

import numpy as np
from cobs import cobs

from host import q15
from mcu import frame_c
from mcu.sim.q15emu import BOARD_CLOCK_HZ, shared_emulator

SEQ_MAX, DIM_MAX, BC_MAX = q15.SEQ_MAX, q15.DIM_MAX, q15.BC_MAX
#: The range the binding names for each int argument (modq15attn.c params_arg, position_arg, state_bytes).
RANGES = {"seq": (1, SEQ_MAX), "dim": (1, DIM_MAX), "causal": (0, 1), "bc": (1, BC_MAX),
          "score_mult": (q15.MULT_MIN, q15.MULT_MAX), "score_shift": (q15.SHIFT_MIN, q15.SHIFT_MAX),
          "row0": (0, SEQ_MAX - 1), "key0": (0, SEQ_MAX - 1), "rows": (1, SEQ_MAX)}
PARAMS = ("seq", "dim", "causal", "bc", "score_mult", "score_shift")
#: The binding's Q15ATTN_VERSION (mcu/native/attention_q15.h): 4, contract v2 (each output row's shift in oshift).
VERSION = 4


def make_module(clock_hz: int = BOARD_CLOCK_HZ, cycle_sink: Callable[[int], None] | None = None):
    """A `q15attn` module with the native module's API, for the twin's namespace."""
    emulator = shared_emulator()
    module = types.ModuleType("q15attn", "Q15 attention, the Cortex-M4 kernel executed by the board twin's emulator")

    def attention(*args, at=None, **kwargs):
        positional("attention", args, kwargs, 11, 12)
        buffers = [tensor(name, value, name == "o") for name, value in zip(("q", "k", "vt", "o"), args[:4])]
        buffers.append(shift_buffer(args[4]))
        values = tuple(machine_int(x, name) for x, name in zip(args[5:11], PARAMS))
        row0 = position(args[11], "row0") if len(args) > 11 else 0
        out, shift, cycles, stats = emulator.attention(values, buffers, row0, len(buffers[3][1]), at)
        memoryview(args[3]).cast("B")[:] = out
        memoryview(args[4]).cast("B")[:] = shift
        if cycle_sink is not None:
            cycle_sink(stats.cycles)
        return cycles

    def stream(*args, at=None, **kwargs):
        positional("stream", args, kwargs, 14, 14)
        buffers = [tensor(name, value, name == "o") for name, value in zip(("q", "k", "vt", "o"), args[:4])]
        buffers.append(shift_buffer(args[4]))
        state = args[5]
        buffers.append(state_buffer(state))
        values = tuple(machine_int(x, name) for x, name in zip(args[6:12], PARAMS))
        row0, key0 = position(args[12], "row0"), position(args[13], "key0")
        out, shift, held, cycles, stats = emulator.stream(values, buffers, row0, key0, at)
        memoryview(args[3]).cast("B")[:] = out
        memoryview(args[4]).cast("B")[:] = shift
        memoryview(state).cast("B")[:] = held
        if cycle_sink is not None:
            cycle_sink(stats.cycles)
        return cycles

    def state_bytes(dim, rows):
        dim, rows = machine_int(dim, "dim"), machine_int(rows, "rows")
        for name, value in (("dim", dim), ("rows", rows)):
            low, high = RANGES[name]
            if not low <= value <= high:
                raise ValueError(f"{name}={value} is out of range; allowed: {low}..{high}")
        return emulator.state_bytes(dim, rows)

    def crc16(*args, **kwargs):
        positional("crc16", args, kwargs, 4, 4)
        view, crc, start, end = frame_c.crc16_args(*args)
        return binascii.crc_hqx(view[start:end], crc)

    def cobs_encode(*args, **kwargs):
        positional("cobs_encode", args, kwargs, 5, 5)
        out, data, at, start, end = frame_c.cobs_args(*args)
        encoded = cobs.encode(bytes(data[start:end]))  # the input copied first: in place is safe
        out[at:at + len(encoded)] = encoded
        return at + len(encoded)

    for function in (attention, stream, state_bytes, crc16, cobs_encode):
        function.__name__ = function.__qualname__ = function.__name__
        setattr(module, function.__name__, function)
    crc16.framing = cobs_encode.framing = True  # the frame server's helpers, microseconds: not the timed kernel
    module.limits = lambda: (SEQ_MAX, DIM_MAX, BC_MAX)
    module.version = lambda: VERSION
    module.CLOCK_HZ = clock_hz
    return module


def positional(name: str, args: tuple, kwargs: dict, low: int, high: int) -> None:
    """MicroPython's TypeErrors for keyword arguments and a wrong count."""
    if kwargs:
        raise TypeError("function doesn't take keyword arguments")
    if not low <= len(args) <= high:
        count = f"{low}" if low == high else f"{low} or {high}"
        raise TypeError(f"{name}() takes {count} positional arguments but {len(args)} were given")


def binding_typecode(value) -> str:
    """The typecode modq15attn.c hands the kernel for `value`: an array's own; 'h' for a bytearray or a writable
    memoryview of bytes (MicroPython gives both BYTEARRAY_TYPECODE, which the binding takes as raw int16); 'B' for
    anything else with the buffer protocol (bytes), which the kernel refuses."""
    if isinstance(value, array.array):
        return value.typecode
    if isinstance(value, memoryview) and value.format != "B":
        return value.format
    if isinstance(value, bytearray) or (isinstance(value, memoryview) and not value.readonly):
        return "h"
    return "B"


#: The binding's refusal of an int in oshift's place (modq15attn.c shift_arg), % the int.
OLD_CALLER = ("oshift=%d is an int: the caller predates q15attn 4 (contract v2 takes an oshift buffer after o); "
              "allowed: a writable bytearray or array('B'), a byte per row; re-deploy the board code with "
              "python -m mcu.deploy")


def tensor(name: str, value, writable: bool) -> tuple[str, bytes]:
    """(typecode, bytes) of a tensor argument, or the binding's TypeError (no buffer, or none writable for o) and
    ValueError (raw int16 at an odd address)."""
    try:
        view = memoryview(value)
    except TypeError:
        view = None
    if view is None or (writable and view.readonly):
        allowed = "a writable array('h') or bytearray" if writable else "array('h') or bytearray"
        raise TypeError(f"{name} is {type(value).__name__}; allowed: {allowed}")
    code = binding_typecode(value)
    if code == "h" and not isinstance(value, array.array) and start_offset(value) % 2:
        raise ValueError(f"{name} starts at an odd address; allowed: a 2-byte boundary (a bytearray, or a memoryview "
                         "of one at an even offset)")
    return code, view.tobytes()


def shift_buffer(value) -> tuple[str, bytes]:
    """(typecode, bytes) of oshift, the rows' output shifts, or the binding's TypeError (no writable buffer: None,
    bytes; an int: a caller of q15attn 3, told to re-deploy). A bytearray or a writable memoryview of bytes is 'B' for
    the kernel, an array its own typecode; the kernel refuses any but 'B', and a length below one byte per row, with
    its own message."""
    if type(value) is int:  # a caller of q15attn 3's attention(q, k, vt, o, seq, ...)
        raise TypeError(OLD_CALLER % value)
    try:
        view = memoryview(value)
    except TypeError:
        view = None
    if view is None or view.readonly:
        raise TypeError(f"oshift is {type(value).__name__}; allowed: a writable bytearray or array('B'), a byte per "
                        "row")
    code = binding_typecode(value)
    return ("B" if code == "h" and not isinstance(value, array.array) else code), view.tobytes()


def state_buffer(value) -> tuple[str, bytes]:
    """(typecode, bytes) of a streamed head's state, or the binding's refusal: no writable buffer, a typecode other
    than a bytearray's or 'h', an address not on 8 bytes."""
    try:
        view = memoryview(value)
    except TypeError:
        view = None
    if view is None or view.readonly:
        raise TypeError(f"state is {type(value).__name__}; allowed: a bytearray of state_bytes(dim, rows)")
    code = binding_typecode(value)
    if code != "h":
        raise ValueError(f"state has typecode '{code}'; allowed: a bytearray of state_bytes(dim, rows)")
    offset = start_offset(value) % 8  # the heap's own buffers (bytearray, array) start 8-byte aligned; a slice may not
    if offset:
        raise ValueError(f"state starts at an address = {offset} mod 8; allowed: 0 mod 8 (a whole bytearray, or a "
                         "memoryview of one at a multiple of 8)")
    return code, view.tobytes()


def start_offset(value) -> int:
    """Where a memoryview starts within the object it views (0 for anything else): its alignment on the board."""
    if not isinstance(value, memoryview) or value.nbytes == 0:
        return 0
    address = np.frombuffer(value, dtype=np.uint8).__array_interface__["data"][0]
    return address - np.frombuffer(value.obj, dtype=np.uint8).__array_interface__["data"][0]


def machine_int(value, name: str) -> int:
    """An int argument as the binding reads it: a TypeError for a non-int (bools are ints), an OverflowError naming
    the value and the kernel's range for one beyond int32; the range itself is the kernel's to check."""
    if not isinstance(value, int):
        raise TypeError(f"can't convert {type(value).__name__} to int")
    if not -(1 << 31) <= value < (1 << 31):
        low, high = RANGES[name]
        raise OverflowError(f"{name}={value} is out of range; allowed: {low}..{high}")
    return int(value)


def position(value, name: str) -> int:
    """row0 or key0: refused by the binding itself beyond SEQ_MAX - 1 (ValueError naming it)."""
    v = machine_int(value, name)
    if v > SEQ_MAX - 1:
        raise ValueError(f"{name}={v} is out of range; allowed: 0..{SEQ_MAX - 1}")
    return v


def as_array(values: np.ndarray) -> array.array:
    """An int16 numpy array as the array('h') a board program would build."""
    return array.array("h", np.asarray(values, dtype=np.int16).ravel().tolist())
