"""The Q15 C kernel (mcu/native/attention_q15.c and its streamed entry) built for this machine (`make -C
mcu/native host`), via ctypes.

Tests use it to hold the C source to host/q15.py bit for bit (values and each row's output shift, `Q15Out`) before
the same file runs on the Cortex-M4; it is built on demand when missing or older than its sources
(mcu/native_build.py).
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from host.errors import SpecError, TargetError
from mcu.native_build import BUILD, built
from host.q15 import Q15Out, Q15Params

LIBRARY = BUILD / "libq15attn.so"


class Params(ctypes.Structure):
    """q15attn_params of attention_q15.h."""

    _fields_ = [(name, ctypes.c_int32) for name in ("seq", "dim", "causal", "bc", "score_mult", "score_shift")]


class Buffer(ctypes.Structure):
    """q15attn_buffer of attention_q15.h."""

    _fields_ = [("typecode", ctypes.c_int32), ("nbytes", ctypes.c_int32)]


@functools.lru_cache(maxsize=None)
def library() -> ctypes.CDLL:
    """The host build, its functions' argument types declared."""
    lib = ctypes.CDLL(str(built("host", LIBRARY)))
    i16p = np.ctypeslib.ndpointer(dtype=np.int16, flags="C_CONTIGUOUS")
    u8p = np.ctypeslib.ndpointer(dtype=np.uint8, flags="C_CONTIGUOUS")
    lib.q15attn_rows.argtypes = [ctypes.POINTER(Params), ctypes.c_int32, ctypes.c_int32, i16p, i16p, i16p, i16p,
                                 u8p]
    lib.q15attn_rows.restype = ctypes.c_int
    lib.q15attn_exp2.argtypes = [ctypes.c_uint32]
    lib.q15attn_exp2.restype = ctypes.c_int32
    lib.q15attn_check_buffers.argtypes = [ctypes.POINTER(Params), ctypes.c_int32, ctypes.POINTER(Buffer * 5),
                                          ctypes.POINTER(ctypes.c_int32)]
    lib.q15attn_check_buffers.restype = ctypes.c_int
    lib.q15attn_describe.argtypes = [ctypes.c_int, ctypes.POINTER(Params), ctypes.c_int32,
                                     ctypes.POINTER(Buffer * 5), ctypes.c_char_p, ctypes.c_int32]
    lib.q15attn_describe.restype = ctypes.c_int32
    lib.q15attn_state_bytes.argtypes = [ctypes.c_int32, ctypes.c_int32]
    lib.q15attn_state_bytes.restype = ctypes.c_int32
    i64p = np.ctypeslib.ndpointer(dtype=np.int64, flags="C_CONTIGUOUS")
    lib.q15attn_stream.argtypes = [ctypes.POINTER(Params), ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                                   ctypes.c_int32, i16p, i16p, i16p, i64p, i16p, u8p]
    lib.q15attn_stream.restype = ctypes.c_int
    lib.q15attn_check_stream_buffers.argtypes = [ctypes.POINTER(Params), ctypes.c_int32, ctypes.c_int32,
                                                 ctypes.POINTER(Buffer * 6), ctypes.POINTER(ctypes.c_int32),
                                                 ctypes.POINTER(ctypes.c_int32)]
    lib.q15attn_check_stream_buffers.restype = ctypes.c_int
    lib.q15attn_describe_stream.argtypes = [ctypes.c_int, ctypes.POINTER(Params), ctypes.c_int32, ctypes.c_int32,
                                            ctypes.POINTER(Buffer * 6), ctypes.c_char_p, ctypes.c_int32]
    lib.q15attn_describe_stream.restype = ctypes.c_int32
    return lib


def c_params(params: Q15Params | dict) -> Params:
    """q15attn_params from the model's parameters (or a dict of the same fields)."""
    fields = params if isinstance(params, dict) else params.__dict__
    return Params(**{name: int(fields[name]) for name, _ in Params._fields_})


def attention_rows(params: Q15Params, q: np.ndarray, k: np.ndarray, v: np.ndarray, row0: int = 0) -> Q15Out:
    """The C kernel's rows row0 .. row0+len(q)-1 for one head; q (rows, dim), k and v (seq, dim), all int16. Returns
    the rows' int16 values (rows, dim) and their output shifts (rows,) uint8."""
    lib = library()
    q = np.ascontiguousarray(q, dtype=np.int16)
    vt = np.ascontiguousarray(np.asarray(v, dtype=np.int16).T)  # (dim, seq): the kernel's V layout
    out = np.zeros_like(q)
    shift = np.zeros(q.shape[0], dtype=np.uint8)
    status = lib.q15attn_rows(ctypes.byref(c_params(params)), row0, q.shape[0], q,
                              np.ascontiguousarray(k, dtype=np.int16), vt, out, shift)
    if status != 0:
        raise TargetError(f"q15attn_rows returned status {status}", status="error")
    return Q15Out(out, shift)


def exp2(delta: int) -> int:
    """The C kernel's exp step for one delta (Q.16, >= 0)."""
    return library().q15attn_exp2(delta)


def check_buffers(params: dict, row0: int, buffers: list[tuple[str, int]]) -> tuple[int, int, str]:
    """The binding's validation of (typecode, nbytes) for q, k, vt, o and oshift: (status, nrows, message)."""
    if len(buffers) != 5:
        raise SpecError(f"{len(buffers)} buffers given; allowed: 5 (q, k, vt, o, oshift)")
    lib = library()
    p = c_params(params)
    bufs = (Buffer * 5)(*(Buffer(ord(code), nbytes) for code, nbytes in buffers))
    nrows = ctypes.c_int32(0)
    status = lib.q15attn_check_buffers(ctypes.byref(p), row0, ctypes.byref(bufs), ctypes.byref(nrows))
    text = ctypes.create_string_buffer(160)
    lib.q15attn_describe(status, ctypes.byref(p), row0, ctypes.byref(bufs), text, len(text))
    return status, nrows.value, text.value.decode()


def state_bytes(dim: int, nrows: int) -> int:
    """Bytes of q15attn_stream state for nrows query rows of dim (SpecError outside the kernel's limits)."""
    size = library().q15attn_state_bytes(dim, nrows)
    if size < 0:
        raise SpecError(f"state_bytes(dim={dim}, nrows={nrows}): allowed: dim 1..256, nrows 1..32768")
    return size


class StreamedRows:
    """Query rows row0 .. row0+len(q)-1 of one head through the C kernel's streamed entry: `take` one key chunk at a
    time (k, v: (keys, dim) int16, keys key0 ..); the chunk that reaches the rows' last key returns their output."""

    def __init__(self, params: Q15Params, q: np.ndarray, row0: int):
        self.params, self.row0 = params, row0
        self.q = np.ascontiguousarray(q, dtype=np.int16)
        self.state = np.zeros(state_bytes(params.dim, self.q.shape[0]) // 8, dtype=np.int64)
        self.out = np.zeros_like(self.q)
        self.shift = np.zeros(self.q.shape[0], dtype=np.uint8)

    def take(self, k: np.ndarray, v: np.ndarray, key0: int) -> Q15Out | None:
        """The chunk's status is raised as TargetError with the kernel's message; the output (values and row shifts)
        once the rows are done, else None."""
        k = np.ascontiguousarray(k, dtype=np.int16)
        vt = np.ascontiguousarray(np.asarray(v, dtype=np.int16).T)
        p = c_params(self.params)
        status = library().q15attn_stream(ctypes.byref(p), self.row0, self.q.shape[0], key0, k.shape[0], self.q, k,
                                          vt, self.state, self.out, self.shift)
        if status != 0:
            raise TargetError(f"q15attn_stream: {self._describe(status, key0, k.shape[0])}", status="error")
        end = self.row0 + self.q.shape[0] if self.params.causal else self.params.seq
        return Q15Out(self.out.copy(), self.shift.copy()) if key0 + k.shape[0] == end else None

    def _describe(self, status: int, key0: int, nkeys: int) -> str:
        dim, rows = self.params.dim, self.q.shape[0]
        sizes = (2 * rows * dim, 2 * nkeys * dim, 2 * nkeys * dim, 2 * rows * dim, rows, self.state.nbytes)
        return check_stream_buffers(self.params.__dict__, self.row0, key0, sizes, status)[3]


def check_stream_buffers(params: dict, row0: int, key0: int, nbytes: tuple[int, ...], status: int | None = None,
                         typecodes: str = "hhhhBh") -> tuple[int, int, int, str]:
    """The binding's validation of a streamed call's q, k, vt, o, oshift and state sizes (bytes): (status, nrows,
    nkeys, message); a given `status` is described instead of the check's own."""
    if len(nbytes) != 6 or len(typecodes) != 6:
        raise SpecError(f"{len(nbytes)} sizes and {len(typecodes)} typecodes given; allowed: 6 each (q, k, vt, o, "
                        "oshift, state)")
    lib = library()
    p = c_params(params)
    bufs = (Buffer * 6)(*(Buffer(ord(code), size) for code, size in zip(typecodes, nbytes)))
    nrows, nkeys = ctypes.c_int32(0), ctypes.c_int32(0)
    checked = lib.q15attn_check_stream_buffers(ctypes.byref(p), row0, key0, ctypes.byref(bufs), ctypes.byref(nrows),
                                               ctypes.byref(nkeys))
    status = checked if status is None else status
    text = ctypes.create_string_buffer(200)
    lib.q15attn_describe_stream(status, ctypes.byref(p), row0, key0, ctypes.byref(bufs), text, len(text))
    return status, nrows.value, nkeys.value, text.value.decode()
