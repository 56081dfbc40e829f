# q15attn in the twin's VM (mcu/sim/vm/twin.mjs): the native module's API (mcu/native/modq15attn.c, version 4) with
# each call done by the twin's Python side (mcu/sim/vm_bridge.py): the kernel by the Cortex-M4 build in the emulator,
# its cycles the emulator's; crc16 and cobs_encode there too. A natmod cannot load in the WebAssembly port. At
# import it takes a ballast of the heap the native module's code takes on a board (a natmod's code lives in the GC
# heap), as the Python side says.
import struct
import uctypes

import _twin_bridge as _bridge

_ballast = bytearray(_bridge.call(_bridge.HELLO))
_framing = open("/dev/twinjs", "wb")  # noqa: SIM115 - the framing helpers in Node (mcu/sim/vm/twin.mjs)
_null = open("/dev/null", "wb")  # noqa: SIM115 - what a write of a buffer returns is its length in bytes
_request = bytearray(16)
_CRC16, _COBS = 1, 2


def version():
    return 4


def limits():
    return (32768, 256, 64)


def _ints(*values):
    # the binding's mp_obj_get_int: an int that fits the board's machine word
    for value in values:
        if not isinstance(value, int):
            raise TypeError("can't convert %s to int" % type(value).__name__)
        if not -0x80000000 <= value <= 0x7FFFFFFF:
            raise OverflowError("overflow converting long int to machine word")
    return values


def _positional(args, low, high):
    # the binding's functions take positional arguments only (MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN)
    if not low <= len(args) <= high:
        raise TypeError("function expected at most %d arguments, got %d" % (high, len(args)) if len(args) > high
                        else "function missing %d required positional arguments" % (low - len(args)))


def _shifts(oshift):
    # the binding's shift_arg: oshift must be a writable buffer (TypeError), of bytes: a bytearray, array('B') or a
    # memoryview of bytes; another typecode is refused (ValueError) as the kernel refuses it (a memoryview's own
    # typecode is not visible here: '?'). Its length, a byte per row, is the emulated kernel's to check
    if isinstance(oshift, bytearray):
        return
    try:
        nbytes = None if isinstance(oshift, (bytes, str)) else _null.write(oshift)
    except TypeError:
        nbytes = None
    if nbytes is None:
        raise TypeError("oshift is %s; allowed: a writable bytearray or array('B'), a byte per row"
                        % type(oshift).__name__)
    code = repr(oshift)[7] if type(oshift).__name__ == "array" else ("B" if nbytes == len(oshift) else "?")
    if code != "B":
        raise ValueError("oshift has typecode '%s'; allowed: 'B' (bytearray or array('B'), uint8)" % code)


def state_bytes(dim, rows):
    _ints(dim, rows)
    return _bridge.call(_bridge.STATE_BYTES, dim, rows)


def attention(*args):
    _positional(args, 11, 12)
    q, k, vt, o, oshift, seq, dim, causal, bc, score_mult, score_shift = args[:11]
    row0 = args[11] if len(args) > 11 else 0
    _shifts(oshift)
    _ints(seq, dim, causal, bc, score_mult, score_shift, row0)
    return _bridge.call(_bridge.ATTENTION, seq, dim, causal, bc, score_mult, score_shift, row0, 0,
                        sent=(q, k, vt, o, oshift), filled=(o, oshift))


def stream(*args):
    _positional(args, 14, 14)
    q, k, vt, o, oshift, state, seq, dim, causal, bc, score_mult, score_shift, row0, key0 = args
    _shifts(oshift)
    _ints(seq, dim, causal, bc, score_mult, score_shift, row0, key0)
    return _bridge.call(_bridge.STREAM, seq, dim, causal, bc, score_mult, score_shift, row0, key0,
                        sent=(q, k, vt, o, oshift, state), filled=(o, oshift, state))


def _span(start, end, length):
    if not 0 <= start <= length:
        raise ValueError("start=%d is out of range; allowed: 0..%d" % (start, length))
    if not -1 <= end <= length:
        raise ValueError("end=%d is out of range; allowed: -1..%d" % (end, length))
    end = length if end < 0 else end
    if end < start:
        raise ValueError("end=%d is out of range; allowed: %d..%d" % (end, start, length))
    return start, end


def _helper(op, a, b, c):
    struct.pack_into("<4i", _request, 0, op, a, b, c)
    _framing.write(_request)
    return struct.unpack_from("<i", _request, 0)[0]


def crc16(data, crc, start, end):
    # CRC-16/CCITT-FALSE of data[start:end] (end -1: to the end) from `crc`, as kbench_frame.c computes it
    _ints(crc, start, end)
    if not 0 <= crc <= 0xFFFF:
        raise ValueError("crc=%d is out of range; allowed: 0..65535" % crc)
    start, end = _span(start, end, len(data))
    return _helper(_CRC16, crc, uctypes.addressof(data) + start, end - start)


def cobs_encode(out, at, data, start, end):
    # COBS of data[start:end] into out from `at`, as kbench_frame.c encodes it: where it ends
    _ints(at, start, end)
    start, end = _span(start, end, len(data))
    n = end - start
    most = n + 1 + n // 254
    if len(out) < most:
        raise ValueError("out holds %d bytes; allowed: at least %d for COBS of %d bytes" % (len(out), most, n))
    if not 0 <= at <= len(out) - most:
        raise ValueError("at=%d is out of range; allowed: 0..%d" % (at, len(out) - most))
    target = uctypes.addressof(out) + at
    return at + _helper(_COBS, target, uctypes.addressof(data) + start, n)
