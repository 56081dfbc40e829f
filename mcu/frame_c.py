"""The frame server's two C steps (mcu/native/kbench_frame.c: CRC-16/CCITT-FALSE and COBS encoding) built for this
machine, via ctypes, and the checks and messages of their binding (q15attn.crc16 and q15attn.cobs_encode in
modq15attn.c).

The tests hold the C to mcu/board/kbench_framing.py's Python versions and to the standard library byte for byte;
the twin's `q15attn` takes its argument checks from here (mcu/sim/q15module.py).
"""

from __future__ import annotations

import ctypes
import functools

from mcu.native_build import built
from mcu.q15_c import LIBRARY


@functools.lru_cache(maxsize=None)
def library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(built("host", LIBRARY)))
    lib.kbench_crc16.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint16]
    lib.kbench_crc16.restype = ctypes.c_uint16
    lib.kbench_cobs_encode.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32]
    lib.kbench_cobs_encode.restype = ctypes.c_int32
    return lib


def cobs_max(n: int) -> int:
    """KBENCH_COBS_MAX: the longest COBS encoding of n bytes, code bytes included, the delimiter not."""
    return n + 1 + n // 254


def crc16(data, crc: int, start: int, end: int) -> int:
    """q15attn.crc16(data, crc, start, end) on the C: the CRC of data[start:end] (end -1: to the end) continuing
    from crc."""
    view, crc, start, end = crc16_args(data, crc, start, end)
    keep, base = _address(view)
    return library().kbench_crc16(base + start, end - start, crc)


def cobs_encode(out, at: int, data, start: int, end: int) -> int:
    """q15attn.cobs_encode(out, at, data, start, end) on the C: COBS of data[start:end] written to out from `at`;
    the index after it."""
    target, source, at, start, end = cobs_args(out, at, data, start, end)
    keep_out, o_base = _address(target)
    keep_data, d_base = _address(source)
    return at + library().kbench_cobs_encode(o_base + at, d_base + start, end - start)


def crc16_args(data, crc, start, end) -> tuple[memoryview, int, int, int]:
    """crc16's arguments checked as the binding checks them: (data's bytes, crc, start, end with -1 resolved)."""
    view = _buffer(data, "data", writable=False)
    crc = _ranged(crc, "crc", 0, 0xFFFF)
    start, end = _span(start, end, len(view))
    return view, crc, start, end


def cobs_args(out, at, data, start, end) -> tuple[memoryview, memoryview, int, int, int]:
    """cobs_encode's arguments checked as the binding checks them: (out's bytes, data's bytes, at, start, end).
    out may be data's own buffer only when the output starts at least 1 + n // 254 bytes before the input (it then
    never overtakes it); any other overlap is a ValueError."""
    target = _buffer(out, "out", writable=True)
    source = _buffer(data, "data", writable=False)
    start, end = _span(start, end, len(source))
    n = end - start
    if len(target) < cobs_max(n):
        raise ValueError(f"out holds {len(target)} bytes; allowed: at least {cobs_max(n)} for COBS of {n} bytes")
    at = _ranged(at, "at", 0, len(target) - cobs_max(n))
    if not source.readonly:  # only a writable buffer can share out's memory
        o, d = _address(target)[1] + at, _address(source)[1] + start
        if o < d + n and d < o + cobs_max(n) and d - o < 1 + n // 254:
            raise ValueError(f"at={at} overlaps the data; allowed: in place only at least 1 + n // 254 bytes "
                             "before it")
    return target, source, at, start, end


def _buffer(value, name: str, writable: bool) -> memoryview:
    """The bytes behind value, as mp_get_buffer_raise takes them: a TypeError for no buffer (or none writable)."""
    try:
        view = memoryview(value).cast("B")
    except TypeError:
        raise TypeError(f"object with buffer protocol required for {name}") from None
    if writable and view.readonly:
        raise TypeError(f"object with buffer protocol required for {name}: {type(value).__name__} is read-only")
    return view


def _ranged(value, name: str, low: int, high: int) -> int:
    if not isinstance(value, int):
        raise TypeError(f"can't convert {type(value).__name__} to int")
    if not low <= value <= high:
        error = OverflowError if not -(1 << 31) <= value < (1 << 31) else ValueError
        raise error(f"{name}={value} is out of range; allowed: {low}..{high}")
    return int(value)


def _span(start, end, length: int) -> tuple[int, int]:
    start = _ranged(start, "start", 0, length)
    end = _ranged(end, "end", -1, length)
    end = length if end < 0 else end
    if end < start:
        raise ValueError(f"end={end} is out of range; allowed: {start}..{length}")
    return start, end


def _address(view: memoryview) -> tuple[object, int]:
    """(an object to keep while the C runs, the address of view's first byte); a read-only view is copied (the C
    only reads it)."""
    if view.readonly:
        keep = ctypes.create_string_buffer(view.tobytes(), max(len(view), 1))
    else:
        keep = (ctypes.c_char * len(view)).from_buffer(view)
    return keep, ctypes.addressof(keep)
