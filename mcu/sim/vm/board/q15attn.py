# q15attn in the twin's VM (mcu/sim/vm/twin.mjs): the native module's API (mcu/native/modq15attn.c, version 3) with
# each call done by the twin's Python side (mcu/sim/vm_bridge.py): the kernel by the Cortex-M4 build in the emulator,
# its cycles the emulator's; crc16 and cobs_encode there too. A natmod cannot load in the WebAssembly port. At
# import it takes a ballast of the heap the native module's code takes on a board (a natmod's code lives in the GC
# heap), as the Python side says.
import _twin_bridge as _bridge

_ballast = bytearray(_bridge.call(_bridge.HELLO))
_crc = bytearray(4)
_count = bytearray(4)


def version():
    return 3


def limits():
    return (32767, 256, 256)


def _ints(*values):
    for value in values:
        if not isinstance(value, int):
            raise TypeError("can't convert %s to int" % type(value).__name__)
    return values


def state_bytes(dim, rows):
    _ints(dim, rows)
    return _bridge.call(_bridge.STATE_BYTES, dim, rows)


def attention(q, k, vt, o, seq, dim, causal, bc, score_mult, score_shift, row0=0):
    _ints(seq, dim, causal, bc, score_mult, score_shift, row0)
    return _bridge.call(_bridge.ATTENTION, seq, dim, causal, bc, score_mult, score_shift, row0, 0,
                        sent=(q, k, vt, o), filled=(o,))


def stream(q, k, vt, o, state, seq, dim, causal, bc, score_mult, score_shift, row0, key0):
    _ints(seq, dim, causal, bc, score_mult, score_shift, row0, key0)
    return _bridge.call(_bridge.STREAM, seq, dim, causal, bc, score_mult, score_shift, row0, key0,
                        sent=(q, k, vt, o, state), filled=(o, state))


def crc16(data, crc, start, end):
    _ints(crc, start, end)
    return _bridge.call(_bridge.CRC16, crc, start, end, sent=(data,))


def cobs_encode(out, at, data, start, end):
    _ints(at, start, end)
    n = _bridge.call(_bridge.COBS, at, start, end, len(out), sent=(data,))
    view = memoryview(out)
    _bridge._line.readinto(view[at:at + n])
    return at + n
