# q15attn in the twin's VM (mcu/sim/vm/twin.mjs): the native module's API (mcu/native/modq15attn.c, version 4) with
# each call done by the twin's Python side (mcu/sim/vm_bridge.py): the kernel by the Cortex-M4 build in the emulator,
# its cycles the emulator's; crc16 and cobs_encode there too. A natmod cannot load in the WebAssembly port. The twin
# compiles it at boot (_twin_boot.py); board code's import takes a ballast of the heap the native module's code takes
# on a board (a natmod's code lives in the GC heap), as the Python side says. The binding's argument checks
# (modq15attn.c) are made here, in its order and with its messages, before anything goes to the Python side.
import array
import struct
import uctypes

import _twin_bridge as _bridge

_ballast = None
_framing = open("/dev/twinjs", "wb")  # noqa: SIM115 - the framing helpers in Node (mcu/sim/vm/twin.mjs)
_null = open("/dev/null", "wb")  # noqa: SIM115 - what a write of a buffer returns is its length in bytes
_request = bytearray(16)
_CRC16, _COBS = 1, 2


def _kbench_load():
    # board code's import (the twin compiled this module at boot, in its own share of the heap): the heap the native
    # module's code takes on a board, and the emulator started by the Python side's HELLO, as the module loads there
    global _ballast
    _ballast = bytearray(_bridge.call(_bridge.HELLO))


def version():
    return 4


def limits():
    return (32768, 256, 64)


_SEQ_MAX = 32768
#: the range the binding names for each int argument (modq15attn.c params_arg, position_arg, state_bytes, crc16)
_RANGES = {"seq": (1, _SEQ_MAX), "dim": (1, 256), "causal": (0, 1), "bc": (1, 64), "score_mult": (16384, 32767),
           "score_shift": (1, 62), "row0": (0, _SEQ_MAX - 1), "key0": (0, _SEQ_MAX - 1), "rows": (1, _SEQ_MAX),
           "crc": (0, 0xFFFF)}
_PARAMS = ("seq", "dim", "causal", "bc", "score_mult", "score_shift")
_INT16 = "'; allowed: 'h' (array('h'), int16)"
_UINT8 = "'; allowed: 'B' (bytearray or array('B'), uint8)"
_BYTEARRAY = 1  # MicroPython's BYTEARRAY_TYPECODE: a bytearray's buffer, and a memoryview's of one
_RW = 0x80  # MP_OBJ_ARRAY_TYPECODE_FLAG_RW: a memoryview of a writable buffer
_ARRAYS = (bytearray, array.array, memoryview)  # MicroPython's mp_obj_array_t


_WRITABLE = 0x100  # in what _buffer returns, beside the typecode


def _buffer(value):
    # the typecode as the binding's mp_get_buffer sees value, with _WRITABLE set for a writable buffer (an int, not a
    # tuple: these checks run on every kernel call and allocate nothing); -1 without the buffer protocol. A
    # bytearray, array or memoryview is an mp_obj_array_t, whose typecode byte (with the RW flag of a memoryview)
    # follows its type pointer: read there, as port code cannot see a memoryview's typecode otherwise. bytes and str
    # are read-only 'B'; an object of another type with a buffer (a subclass of one of these, a uctypes struct) is
    # taken as 'B', read-only too (the board may differ)
    kind = type(value)
    if kind is bytearray or kind is array.array or kind is memoryview:
        code = _memory[id(value) + _BASE]
        return (code & 0x7F) | (_WRITABLE if kind is not memoryview or code & _RW else 0)
    try:
        _null.write(value)
    except TypeError:
        return -1
    return 66


def _check_layout():
    # the typecode byte where _buffer reads it, or the twin stops here rather than judge buffers wrongly
    views = ((bytearray(2), _BYTEARRAY | _WRITABLE), (array.array("h", [0]), 104 | _WRITABLE),
             (memoryview(array.array("b", [0])), 98 | _WRITABLE), (memoryview(b"ab"), 66))
    for value, expected in views:
        if _buffer(value) != expected:
            raise RuntimeError("kbench twin: a memoryview's typecode is not at its object + %d in this port" % _BASE)


_BASE = 4  # mp_obj_base_t: one 4-byte pointer on wasm32
_memory = uctypes.bytearray_at(0, 1 << 30)  # the VM's memory as bytes, made once: a view per read would allocate
_check_layout()


def _int(value, name, low=None, high=None):
    # the binding's int32_arg: mp_obj_get_int_truncated's TypeError for a non-int, OverflowError beyond int32 naming
    # the value and the range the kernel allows (low..high, else the argument's own)
    if not isinstance(value, int):
        raise TypeError("can't convert %s to int" % type(value).__name__)
    if not -0x80000000 <= value <= 0x7FFFFFFF:
        low, high = _RANGES[name] if low is None else (low, high)
        raise OverflowError("%s=%d is out of range; allowed: %d..%d" % (name, value, low, high))
    return value


def _ranged(value, name, low=None, high=None):
    # the binding's position_arg and ranged_arg: int32_arg, then ValueError outside the range
    low, high = _RANGES[name] if low is None else (low, high)
    if not low <= _int(value, name, low, high) <= high:
        raise ValueError("%s=%d is out of range; allowed: %d..%d" % (name, value, low, high))
    return value


def _positional(count, low, high):
    # the binding's functions take positional arguments only (MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN): `count` given
    if not low <= count <= high:
        raise TypeError("function expected at most %d arguments, got %d" % (high, count) if count > high
                        else "function missing %d required positional arguments" % (low - count))


def _tensor(value, name, write):
    # the binding's buffer_arg: TypeError without a buffer (o: without a writable one); a bytearray's raw int16 on a
    # 2-byte boundary; the typecode the kernel is given
    got = _buffer(value)
    if got < 0 or (write and not got & _WRITABLE):
        raise TypeError("%s is %s; allowed: %s" % (name, type(value).__name__, "a writable array('h') or bytearray"
                                                   if write else "array('h') or bytearray"))
    if got & 0x7F != _BYTEARRAY:
        return got & 0x7F
    if uctypes.addressof(value) & 1:
        raise ValueError("%s starts at an odd address; allowed: a 2-byte boundary (a bytearray, or a memoryview of one "
                         "at an even offset)" % name)
    return 104  # 'h'


def _shifts(oshift):
    # the binding's shift_arg: a writable buffer (a bytearray's is 'B'), else TypeError; an int in its place is a
    # caller of q15attn 3's attention(q, k, vt, o, seq, ...)
    if type(oshift) is int:
        raise TypeError(_OLD_CALLER % oshift)
    got = _buffer(oshift)
    if got < 0 or not got & _WRITABLE:
        raise TypeError("oshift is %s; allowed: a writable bytearray or array('B'), a byte per row"
                        % type(oshift).__name__)
    return 66 if got & 0x7F == _BYTEARRAY else got & 0x7F


_OLD_CALLER = ("oshift=%d is an int: the caller predates q15attn 4 (contract v2 takes an oshift buffer after o); "
               "allowed: a writable bytearray or array('B'), a byte per row; re-deploy the board code with "
               "python -m mcu.deploy")


def _check_state(state):
    # the binding's checks of a streamed head's state: writable, a bytearray's or 'h', on 8 bytes
    got = _buffer(state)
    if got < 0 or not got & _WRITABLE:
        raise TypeError("state is %s; allowed: a bytearray of state_bytes(dim, rows)" % type(state).__name__)
    if got & 0x7F != _BYTEARRAY and got & 0x7F != 104:
        raise ValueError("state has typecode '%s'; allowed: a bytearray of state_bytes(dim, rows)" % chr(got & 0x7F))
    offset = uctypes.addressof(state) & 7
    if offset:
        raise ValueError("state starts at an address = %d mod 8; allowed: 0 mod 8 (a whole bytearray, or a memoryview "
                         "of one at a multiple of 8)" % offset)


def _typecode(name, code, want):
    # the kernel's first check (q15attn_check_buffers), buffer by buffer in the order q, k, vt, o, oshift: int16,
    # oshift uint8
    if code != want:
        raise ValueError("%s has typecode '%s%s" % (name, chr(code), _INT16 if want == 104 else _UINT8))


def state_bytes(dim, rows):
    _int(dim, "dim")
    _int(rows, "rows")
    return _bridge.call(_bridge.STATE_BYTES, _ranged(dim, "dim"), _ranged(rows, "rows"))


#: What attention (5 sent, 2 filled) and stream (6 and 3) pass to the bridge: filled in place and emptied after the
#: call, so that no tuple is made per call and no freed tensor is kept alive by a reference left here
_sent5, _filled2, _sent6, _filled3 = [None] * 5, [None] * 2, [None] * 6, [None] * 3
_codes = [0] * 5  # the typecodes _check_buffers found, for _check_typecodes (filled in place, as the lists above)
_ABSENT = object()  # an argument not given: the binding counts positional arguments, and *args would make a tuple
# (attention's and stream's parameters are named _q, _k, ...: the binding takes no keyword, and a caller's q= or
# score_shift= meets MicroPython's TypeError, as on a board; a keyword of these very names would pass here)


def _count(*args):
    # how many arguments a call gave, for the binding's count message (this tuple is made on that error only)
    n = 0
    for value in args:
        if value is _ABSENT:
            break
        n += 1
    return n


def _check_buffers(q, k, vt, o, oshift):
    # the binding's buffer_arg for q, k, vt and o, then shift_arg for oshift (one assignment each: a 4-tuple would
    # be allocated)
    _codes[0] = _tensor(q, "q", False)
    _codes[1] = _tensor(k, "k", False)
    _codes[2] = _tensor(vt, "vt", False)
    _codes[3] = _tensor(o, "o", True)
    _codes[4] = _shifts(oshift)


def _check_params(seq, dim, causal, bc, score_mult, score_shift):
    # the binding's params_arg: each an int32
    _int(seq, "seq")
    _int(dim, "dim")
    _int(causal, "causal")
    _int(bc, "bc")
    _int(score_mult, "score_mult")
    _int(score_shift, "score_shift")


def _check_typecodes():
    # the kernel's first check (q15attn_check_buffers), last of the VM's
    _typecode("q", _codes[0], 104)
    _typecode("k", _codes[1], 104)
    _typecode("vt", _codes[2], 104)
    _typecode("o", _codes[3], 104)
    _typecode("oshift", _codes[4], 66)


def attention(_q=_ABSENT, _k=_ABSENT, _vt=_ABSENT, _o=_ABSENT, _oshift=_ABSENT, _seq=_ABSENT, _dim=_ABSENT,
              _causal=_ABSENT, _bc=_ABSENT, _score_mult=_ABSENT, _score_shift=_ABSENT, _row0=_ABSENT, *more):
    # modq15attn.c's order: the buffers, the ints, row0, then the kernel's typecodes (the rest on the Python side);
    # nothing is sent before every check the VM can make has passed. Nothing is allocated on the way (a board's call
    # allocates nothing, and this port cannot collect inside a call into the VM)
    if more or _score_shift is _ABSENT:
        given = _count(_q, _k, _vt, _o, _oshift, _seq, _dim, _causal, _bc, _score_mult, _score_shift, _row0)
        _positional(given + len(more), 11, 12)
    _check_buffers(_q, _k, _vt, _o, _oshift)
    _check_params(_seq, _dim, _causal, _bc, _score_mult, _score_shift)
    _row0 = 0 if _row0 is _ABSENT else _ranged(_row0, "row0")
    _check_typecodes()
    _sent5[0] = _q  # one assignment each: more than three at once would build a tuple
    _sent5[1] = _k
    _sent5[2] = _vt
    _sent5[3] = _o
    _sent5[4] = _oshift
    _filled2[0] = _o
    _filled2[1] = _oshift
    try:
        return _bridge.call(_bridge.ATTENTION, _seq, _dim, _causal, _bc, _score_mult, _score_shift, _row0, 0,
                            sent=_sent5, filled=_filled2)
    finally:  # straight-line code: a Ctrl-C judged as the call returned raises in the caller, not in a loop here
        _sent5[0] = _sent5[1] = _sent5[2] = _sent5[3] = _sent5[4] = _filled2[0] = _filled2[1] = None


def stream(_q=_ABSENT, _k=_ABSENT, _vt=_ABSENT, _o=_ABSENT, _oshift=_ABSENT, _state=_ABSENT, _seq=_ABSENT,
           _dim=_ABSENT, _causal=_ABSENT, _bc=_ABSENT, _score_mult=_ABSENT, _score_shift=_ABSENT, _row0=_ABSENT,
           _key0=_ABSENT, *more):
    # as attention, with the streamed head's state after oshift and key0 after row0
    if more or _key0 is _ABSENT:
        given = _count(_q, _k, _vt, _o, _oshift, _state, _seq, _dim, _causal, _bc, _score_mult, _score_shift, _row0,
                       _key0)
        _positional(given + len(more), 14, 14)
    _check_buffers(_q, _k, _vt, _o, _oshift)
    _check_state(_state)
    _check_params(_seq, _dim, _causal, _bc, _score_mult, _score_shift)
    _row0 = _ranged(_row0, "row0")
    _key0 = _ranged(_key0, "key0")
    _check_typecodes()
    _sent6[0] = _q
    _sent6[1] = _k
    _sent6[2] = _vt
    _sent6[3] = _o
    _sent6[4] = _oshift
    _sent6[5] = _state
    _filled3[0] = _o
    _filled3[1] = _oshift
    _filled3[2] = _state
    try:
        return _bridge.call(_bridge.STREAM, _seq, _dim, _causal, _bc, _score_mult, _score_shift, _row0, _key0,
                            sent=_sent6, filled=_filled3)
    finally:
        _sent6[0] = _sent6[1] = _sent6[2] = _sent6[3] = _sent6[4] = _sent6[5] = None
        _filled3[0] = _filled3[1] = _filled3[2] = None


def _span(start, end, length):
    # the binding's span_args: start 0..length, end -1..length (-1: length), then end not before start
    start = _ranged(start, "start", 0, length)
    end = _ranged(end, "end", -1, length)
    end = length if end < 0 else end
    if end < start:
        raise ValueError("end=%d is out of range; allowed: %d..%d" % (end, start, length))
    return start, end


def _helper(op, a, b, c):
    struct.pack_into("<4i", _request, 0, op, a, b, c)
    _framing.write(_request)
    return struct.unpack_from("<i", _request, 0)[0]


def _bytes(value, write=False):
    # the binding's mp_get_buffer_raise: the buffer's length in bytes
    got = _buffer(value)
    if got < 0 or (write and not got & _WRITABLE):
        raise TypeError("object with buffer protocol required")
    return _null.write(value)


def crc16(data, crc, start, end):
    # CRC-16/CCITT-FALSE of data[start:end] (end -1: to the end) from `crc`, as kbench_frame.c computes it
    length = _bytes(data)
    _ranged(crc, "crc")
    start, end = _span(start, end, length)
    return _helper(_CRC16, crc, uctypes.addressof(data) + start, end - start)


def cobs_encode(out, at, data, start, end):
    # COBS of data[start:end] into out from `at`, as kbench_frame.c encodes it: where it ends
    room = _bytes(out, True)
    start, end = _span(start, end, _bytes(data))
    n = end - start
    most = n + 1 + n // 254
    if room < most:
        raise ValueError("out holds %d bytes; allowed: at least %d for COBS of %d bytes" % (room, most, n))
    _ranged(at, "at", 0, room - most)
    target = uctypes.addressof(out) + at
    return at + _helper(_COBS, target, uctypes.addressof(data) + start, n)
