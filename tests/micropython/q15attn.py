# q15attn for the WebAssembly board (tests/micropython/board.mjs): the native module cannot load in wasm, so each
# call goes to the host through the device /dev/q15 (passed through to the harness, tests/helpers/wasm_board.py,
# which computes with the host build of the C kernel, mcu/q15_c.py, and returns cycles modelled by mcu/cycles.py).
# Only the tests deploy it. Per call it writes a header of int32s and the buffers, and reads the reply into
# preallocated buffers: nothing is allocated but small ints, and an error's message. At import it takes a ballast of
# the heap the native module's code would take on a board (a natmod's code lives in the GC heap), as the host says.
#
# Wire: request = HEADER_FMT (op, seq, dim, causal, bc, score_mult, score_shift, row0, key0, nrows, nkeys, then the
# byte lengths of q, k, vt, o, oshift, state), then q, k, vt (attention, stream) and o, oshift, state (stream); reply =
# REPLY_FMT (status, value, n), then o, oshift and state (stream) when status is 0, else n bytes of message (a
# ValueError, as the native module raises). Version 4: the kernel of Q15 contract v2, a shift byte per output row.

import struct

HELLO, STATE_BYTES, ATTENTION, STREAM = 0, 1, 2, 3
HEADER_FMT = "<17i"
REPLY_FMT = "<iIi"

_line = open("/dev/q15", "r+b")  # noqa: SIM115 - open for the module's life
_header = bytearray(struct.calcsize(HEADER_FMT))
_reply = bytearray(struct.calcsize(REPLY_FMT))


def _call(op, seq, dim, causal, bc, mult, shift, row0, key0, nrows, nkeys, q=b"", k=b"", vt=b"", o=b"", oshift=b"",
          state=b""):
    struct.pack_into(HEADER_FMT, _header, 0, op, seq, dim, causal, bc, mult, shift, row0, key0, nrows, nkeys,
                     len(q), len(k), len(vt), len(o), len(oshift), len(state))
    _line.write(_header)
    if op >= ATTENTION:
        _line.write(q)
        _line.write(k)
        _line.write(vt)
    if op == STREAM:
        _line.write(o)
        _line.write(oshift)
        _line.write(state)
    _line.readinto(_reply)
    status, value, n = struct.unpack_from(REPLY_FMT, _reply, 0)
    if status:
        message = bytearray(n)
        _line.readinto(message)
        raise ValueError(message.decode())
    if op >= ATTENTION:
        _line.readinto(o)
        if len(oshift):
            _line.readinto(oshift)
    if op == STREAM:
        _line.readinto(state)
    return value


_ballast = bytearray(_call(HELLO, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))


def version():
    return 4


def state_bytes(dim, rows):
    return _call(STATE_BYTES, 0, dim, 0, 0, 0, 0, 0, 0, rows, 0)


def attention(q, k, vt, o, oshift, seq, dim, causal, bc, score_mult, score_shift, row0=0):
    nrows = len(q) // (2 * dim)
    return _call(ATTENTION, seq, dim, causal, bc, score_mult, score_shift, row0, 0, nrows, len(k) // (2 * dim),
                 q, k, vt, o, oshift)


def stream(q, k, vt, o, oshift, state, seq, dim, causal, bc, score_mult, score_shift, row0, key0):
    nrows = len(q) // (2 * dim)
    return _call(STREAM, seq, dim, causal, bc, score_mult, score_shift, row0, key0, nrows, len(k) // (2 * dim),
                 q, k, vt, o, oshift, state)
