# The twin VM's line to its Python side (mcu/sim/vm_bridge.py): the device /dev/twin, which twin.mjs passes through
# byte for byte. A call writes a header of int32s and its buffers and reads the reply into preallocated buffers:
# nothing is allocated per call (a board's native call allocates nothing, and this port collects only between calls
# into the VM: a frame server's RUN makes heads × repeat calls in one step) but an error's message and, for a value
# beyond a small int (cycles past 2^30), its int.
#
# Wire: request = HEADER (op, ten int arguments, the byte lengths of up to six buffers, then their addresses in the
# VM's memory, so that the Python side lays out buffers that overlap here overlapping there too) and the buffers;
# reply = REPLY (status, value, n), then the buffers the op fills when status is 0, else n bytes of message raised
# as ERRORS[status]. A call that fails after its request went out (a reply it cannot read into a buffer, no memory
# for a message) reads the rest of the reply before it raises: the next call reads its own.
import micropython as _micropython
import struct
import uctypes

(HELLO, STATE_BYTES, ATTENTION, STREAM, CLOCK, TEMP_MILLI_C, VDDA_MILLI_V, CRC16, COBS, SERVING, MEM_READ,
 MEM_WRITE) = range(12)
HEADER = "<23i"  # 11 + 2 * _BUFFERS
_BUFFERS = 6  # the most a call sends: q, k, vt, o, oshift and state (q15attn.stream)
REPLY = "<iIi"
ERRORS = (None, ValueError, TypeError, OverflowError, RuntimeError)

_line = open("/dev/twin", "r+b")  # noqa: SIM115 - open for the VM's life
_null = open("/dev/null", "wb")  # noqa: SIM115 - what a write of a buffer returns is its length in bytes
_header = bytearray(struct.calcsize(HEADER))
_LENGTHS = 4 * 11  # where HEADER's buffer lengths start, then their addresses
_reply = bytearray(struct.calcsize(REPLY))
_replied = uctypes.struct(uctypes.addressof(_reply), {"status": 0 | uctypes.INT32, "value": 4 | uctypes.UINT32,
                                                      "n": 8 | uctypes.INT32}, uctypes.LITTLE_ENDIAN)
_scratch = bytearray(64)  # where the rest of a reply goes when the call fails midway


_control = open("/dev/twinctl", "r+b")  # noqa: SIM115 - the interrupt character, and "I" to have Ctrl-Cs judged
_char = bytearray(1)


def call(op, a=0, b=0, c=0, d=0, e=0, f=0, g=0, h=0, i=0, j=0, sent=(), filled=()):
    # A call is a native call on a board: a Ctrl-C during it interrupts the code after it returns, never the
    # exchange with the Python side; so the interrupt character is off for the exchange, and the Ctrl-Cs that came
    # meanwhile are judged once it is back, with nothing left to do here before the caller's next check raises
    _control.readinto(_char)
    masked = _char[0] != 0xFF
    if masked:
        _micropython.kbd_intr(-1)
    try:
        return _exchange(op, a, b, c, d, e, f, g, h, i, j, sent, filled)
    finally:
        if masked:
            _micropython.kbd_intr(_char[0])
            _control.write(b"I")


def _exchange(op, a, b, c, d, e, f, g, h, i, j, sent, filled):
    # in bytes, whatever the buffer (an array's len() counts its items); a buffer without the protocol fails here,
    # before anything is sent. Loops over the buffers and packs into the header in place: no list, tuple or slice
    struct.pack_into("<11i", _header, 0, op, a, b, c, d, e, f, g, h, i, j)
    slot = 0
    for x in sent:
        struct.pack_into("<i", _header, _LENGTHS + 4 * slot, _nbytes(x))
        struct.pack_into("<i", _header, _LENGTHS + 4 * (_BUFFERS + slot), uctypes.addressof(x))
        slot += 1
    while slot < _BUFFERS:
        struct.pack_into("<i", _header, _LENGTHS + 4 * slot, 0)
        struct.pack_into("<i", _header, _LENGTHS + 4 * (_BUFFERS + slot), 0)
        slot += 1
    left = 0
    for x in filled:
        left += _nbytes(x)
    _line.write(_header)
    for buffer in sent:
        _line.write(buffer)
    _line.readinto(_reply)
    status, n = _replied.status, _replied.n
    if status:
        left = n  # the reply's bytes still on the line: the message instead of the buffers
    try:
        if status:
            message = bytearray(n)
            _line.readinto(message)
            left = 0
            raise ERRORS[status](message.decode())
        for buffer in filled:
            size = _nbytes(buffer)
            _line.readinto(buffer)  # a read-only buffer is refused before a byte is read
            left -= size
    except BaseException:
        _drain(left)  # whatever failed, the next call must read its own reply
        raise
    return _replied.value


def _nbytes(x):
    kind = type(x)  # not isinstance(x, (bytes, bytearray)): that tuple would be built at every call
    return len(x) if kind is bytes or kind is bytearray else _null.write(x)


def _drain(count):
    while count > 0:
        got = _line.readinto(_scratch, min(count, len(_scratch)))
        if not got:  # the Python side is gone: nothing left to keep in step with
            return
        count -= got
