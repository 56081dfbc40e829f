# The board's side of the link framing (docs/protocol.md), in MicroPython: COBS-encoded, 0x00-delimited frames of
# version, type, sequence number, length, payload and CRC-16/CCITT-FALSE. No libraries beyond the firmware's:
# COBS and the CRC are written here, and the same file runs under CPython for the tests. Deployed to the board as
# kbench_framing.mpy; kbench_server.py is its user.

import struct
from array import array

VERSION = 1
HEADER_SIZE = 6
MAX_PAYLOAD = 0xFFFF
MAX_ENCODED = HEADER_SIZE + MAX_PAYLOAD + 2 + (HEADER_SIZE + MAX_PAYLOAD + 2) // 254 + 2


BREAK_PIECE_BYTE = b"\x03"  # two or more of these alone between delimiters ask the server to stop (never a frame)


# CRC-16/CCITT-FALSE (poly P = x^16 + x^12 + x^5 + 1, init 0xFFFF; crc16(b"123456789") == 0x29B1) two ways, with
# the same result (docs/performance.md, "Board link", has the measurements):
# - crc16_words: a table loop two bytes per step, the words unpacked by struct in one call; no allocation per byte.
# - crc16_fold: the CRC is the remainder of the message (a polynomial over GF(2), first bit highest) times x^16
#   modulo P. Found as integers: the whole message becomes one integer v (int.from_bytes), and each step replaces
#   v's high part hi (v >> a) by hi * (x^b + x^c + 1), where x^a = x^b + x^c + 1 modulo P with b, c < FOLD_SPAN:
#   the remainder stays the same and v loses about half its bits. Seven steps take a 1 KB frame to 26 bytes, which
#   the table loop finishes. A few dozen operations on big integers, in the firmware's C, instead of a loop per
#   byte: for a 1 KB frame 9x faster than a byte-at-a-time loop under MicroPython (its WebAssembly port) and
#   under CPython (the twin), but its temporaries allocate about 23 KB under MicroPython where the table loop
#   allocates 2 KB: on a board with a full heap that means more garbage collections (not measured: no board).
# crc16 folds data of FOLD_MIN bytes or more where the firmware's integers hold a frame (checked at import).

FOLD_MIN = 64
FOLD_SPAN = 64


def _crc_tables():
    # T1[x]: the register after one byte whose XOR with the register's high byte is x (the usual 256-entry table);
    # T2[x]: the same after a second byte that leaves the low byte unchanged (x, then 0). Two bytes (b0, b1) move
    # a register (hi, lo) to T2[hi ^ b0] ^ T1[lo ^ b1]. Both are kept byte-swapped, so that crc16_words can XOR
    # little-endian words (b0 | b1 << 8) straight into a byte-swapped register.
    t1 = []
    for top in range(256):
        crc = top << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
        t1.append((crc & 0xFF) << 8 | crc >> 8)
    t2 = [t1[x] >> 8 ^ t1[t1[x] & 0xFF] for x in range(256)]
    return array("H", t1), array("H", t2)


_CRC_T1, _CRC_T2 = _crc_tables()


def crc16_words(data, crc=0xFFFF):
    t1, t2 = _CRC_T1, _CRC_T2
    n = len(data)
    s = (crc & 0xFF) << 8 | crc >> 8  # the register byte-swapped throughout: lo << 8 | hi
    if n > 1:
        for w in struct.unpack_from("<%dH" % (n >> 1), data):
            s ^= w
            s = t2[s & 0xFF] ^ t1[s >> 8]
    if n & 1:  # the last byte alone: hi ^ byte through T1, lo becomes the high byte
        s ^= data[n - 1]
        s = s >> 8 ^ t1[s & 0xFF]
    return (s & 0xFF) << 8 | s >> 8


# The fold's steps, largest first: (a, b, c) with x^a = x^b + x^c + 1 modulo P and 0 < b < c < FOLD_SPAN, each a
# at most twice the next one less FOLD_SPAN (so one step leaves at most a bits), from the frame's longest
# (8 * MAX_ENCODED bits) down to 3 * FOLD_SPAN bits. tests/mcu/test_frame.py checks each relation and finds them again.
_LADDER = ((524345, 26, 36), (262209, 26, 36), (131141, 26, 36), (65607, 26, 36), (32840, 26, 36), (16453, 13, 55),
           (8277, 9, 19), (4180, 37, 39), (2147, 9, 56), (1107, 2, 56), (587, 5, 10), (329, 13, 41), (206, 2, 54))
_FOLD_LEFT = (_LADDER[-1][0] + 7) // 8  # bytes left for the table loop


def crc16_fold(data, crc=0xFFFF):
    n = len(data)
    v = int.from_bytes(data, "big") ^ (crc << (8 * n - 16))  # the initial register XORed into the first two bytes
    bits = 8 * n
    for a, b, c in _LADDER:
        while bits > a:  # v - hi * (x^a + x^b + x^c + 1): the same remainder modulo P, in at most a bits
            hi = v >> a
            v ^= (hi << a) ^ (((hi << (c - b)) ^ hi) << b) ^ hi
            bits = max(a, bits - a + c)
    return crc16_words(v.to_bytes(_FOLD_LEFT, "big"), 0)


def _can_fold():
    # False where the firmware's integers cannot hold a frame (no long integers) or get the fold wrong
    try:
        sample = bytes(range(1, 3 * FOLD_MIN))
        return crc16_fold(sample) == crc16_words(sample)
    except Exception:  # noqa: BLE001 - OverflowError without long integers; anything else: the table loop
        return False


_FOLD = _can_fold()


def crc16(data, crc=0xFFFF):
    if _FOLD and len(data) >= FOLD_MIN:
        try:
            return crc16_fold(data, crc)
        except MemoryError:  # a nearly full heap (a board with its tensors loaded): the table loop needs less
            pass
    return crc16_words(data, crc)


def cobs_encode(data):
    # a block at a time: find the next zero within 254 bytes in C rather than test every byte in bytecode
    out = bytearray()
    i, n = 0, len(data)
    while True:
        end = min(i + 254, n)
        zero = data.find(b"\x00", i, end)
        if zero >= 0:  # a block ending in a zero (implied by its code)
            out.append(zero - i + 1)
            out += data[i:zero]
            i = zero + 1
        else:  # 254 bytes without a zero (code 0xFF: no zero implied), or the last block
            out.append(end - i + 1)
            out += data[i:end]
            if end == n:
                return bytes(out)
            i = end


def cobs_decode(data):
    # raises ValueError on a zero byte or a block running past the end
    out = bytearray()
    i, n = 0, len(data)
    while i < n:
        code = data[i]
        if code == 0:
            raise ValueError("zero byte in COBS data")
        end = i + code
        if end > n:
            raise ValueError("COBS block runs past the end")
        out.extend(data[i + 1:end])
        i = end
        if code < 0xFF and i < n:
            out.append(0)
    return bytes(out)


def encode(kind, seq, payload=b""):
    if not 0 <= kind <= 0xFF or not 0 <= seq <= 0xFFFF or len(payload) > MAX_PAYLOAD:
        raise ValueError("frame field out of range")
    n = len(payload)
    body = bytes((VERSION, kind, seq & 0xFF, seq >> 8, n & 0xFF, n >> 8)) + bytes(payload)
    check = crc16(body)
    return cobs_encode(body + bytes((check & 0xFF, check >> 8))) + b"\x00"


def decode_body(encoded):
    # (kind, seq, payload) of one frame without its delimiter; ValueError when it is corrupted
    raw = cobs_decode(encoded)
    if len(raw) < HEADER_SIZE + 2:
        raise ValueError("short frame")
    body = raw[:-2]
    if crc16(body) != raw[-2] | raw[-1] << 8:
        raise ValueError("bad CRC")
    if body[0] != VERSION:
        raise ValueError("bad version")
    if body[4] | body[5] << 8 != len(body) - HEADER_SIZE:
        raise ValueError("bad length")
    return body[1], body[2] | body[3] << 8, bytes(body[HEADER_SIZE:])


def is_break(piece):
    # a piece of two or more BREAK_PIECE_BYTEs: no frame encodes to it (its version byte would be 3)
    return len(piece) >= 2 and piece.count(BREAK_PIECE_BYTE) == len(piece)


class Decoder:
    # feed(bytes) -> list of (kind, seq, payload); corrupted frames are counted in .rejected and skipped;
    # a break piece sets .interrupted

    def __init__(self, limit=MAX_ENCODED):
        self.buffer = bytearray()
        self.rejected = 0
        self.interrupted = False
        self.limit = limit  # longest encoded frame accepted: a board keeps this below its free heap

    def feed(self, data):
        # Between calls the buffer holds no delimiter, so only `data` can end a frame: most calls (the server reads
        # a frame a COBS block at a time) just append.
        frames = []
        self.buffer.extend(data)
        end = self.buffer.find(b"\x00") if b"\x00" in data else -1
        while end >= 0:
            chunk = bytes(self.buffer[:end])
            self.buffer = self.buffer[end + 1:]
            end = self.buffer.find(b"\x00")
            if not chunk:
                continue
            if len(chunk) > self.limit:
                self.rejected += 1
            elif is_break(chunk):
                self.interrupted = True
            else:
                try:
                    frames.append(decode_body(chunk))
                except ValueError:
                    self.rejected += 1
        if len(self.buffer) > self.limit:
            self.rejected += 1
            self.buffer = bytearray()
        return frames
