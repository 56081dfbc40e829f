"""The Q15 C kernel (mcu/native/attention_q15.c) built for this machine (`make -C mcu/native host`), via ctypes.

Tests use it to hold the C source to host/q15.py bit for bit before the same file runs on the Cortex-M4; it is
built on demand when missing or older than its sources (host/native_build.py).
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from host.errors import TargetError
from host.native_build import BUILD, built
from host.q15 import Q15Params

LIBRARY = BUILD / "libq15attn.so"


class Params(ctypes.Structure):
    """q15attn_params of attention_q15.h."""

    _fields_ = [(name, ctypes.c_int32) for name in ("seq", "dim", "causal", "bc", "score_mult", "score_shift")]


class Buffer(ctypes.Structure):
    """q15attn_buffer of attention_q15.h."""

    _fields_ = [("typecode", ctypes.c_int32), ("nbytes", ctypes.c_int32)]


@functools.lru_cache(maxsize=None)
def library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(built("host", LIBRARY)))
    i16p = np.ctypeslib.ndpointer(dtype=np.int16, flags="C_CONTIGUOUS")
    lib.q15attn_rows.argtypes = [ctypes.POINTER(Params), ctypes.c_int32, ctypes.c_int32, i16p, i16p, i16p, i16p]
    lib.q15attn_rows.restype = ctypes.c_int
    lib.q15attn_exp2.argtypes = [ctypes.c_uint32]
    lib.q15attn_exp2.restype = ctypes.c_int32
    lib.q15attn_check_buffers.argtypes = [ctypes.POINTER(Params), ctypes.c_int32, ctypes.POINTER(Buffer * 4),
                                          ctypes.POINTER(ctypes.c_int32)]
    lib.q15attn_check_buffers.restype = ctypes.c_int
    lib.q15attn_describe.argtypes = [ctypes.c_int, ctypes.POINTER(Params), ctypes.c_int32,
                                     ctypes.POINTER(Buffer * 4), ctypes.c_char_p, ctypes.c_int32]
    lib.q15attn_describe.restype = ctypes.c_int32
    return lib


def c_params(params: Q15Params | dict) -> Params:
    fields = params if isinstance(params, dict) else params.__dict__
    return Params(**{name: int(fields[name]) for name, _ in Params._fields_})


def attention_rows(params: Q15Params, q: np.ndarray, k: np.ndarray, v: np.ndarray, row0: int = 0) -> np.ndarray:
    """The C kernel's rows row0 .. row0+len(q)-1 for one head; q (rows, dim), k and v (seq, dim), all int16."""
    lib = library()
    q = np.ascontiguousarray(q, dtype=np.int16)
    vt = np.ascontiguousarray(np.asarray(v, dtype=np.int16).T)  # (dim, seq): the kernel's V layout
    out = np.zeros_like(q)
    status = lib.q15attn_rows(ctypes.byref(c_params(params)), row0, q.shape[0], q,
                              np.ascontiguousarray(k, dtype=np.int16), vt, out)
    if status != 0:
        raise TargetError(f"q15attn_rows returned status {status}", status="error")
    return out


def exp2(delta: int) -> int:
    """The C kernel's exp step for one delta (Q.16, >= 0)."""
    return library().q15attn_exp2(delta)


def check_buffers(params: dict, row0: int, buffers: list[tuple[str, int]]) -> tuple[int, int, str]:
    """The binding's validation of (typecode, nbytes) for q, k, vt, o: (status, nrows, message)."""
    lib = library()
    p = c_params(params)
    bufs = (Buffer * 4)(*(Buffer(ord(code), nbytes) for code, nbytes in buffers))
    nrows = ctypes.c_int32(0)
    status = lib.q15attn_check_buffers(ctypes.byref(p), row0, ctypes.byref(bufs), ctypes.byref(nrows))
    text = ctypes.create_string_buffer(160)
    lib.q15attn_describe(status, ctypes.byref(p), row0, ctypes.byref(bufs), text, len(text))
    return status, nrows.value, text.value.decode()
