# The board's side of the link framing (docs/protocol.md), in MicroPython: COBS-encoded, 0x00-delimited frames of
# version, type, sequence number, length, payload and CRC-16/CCITT-FALSE. No libraries beyond the firmware's:
# COBS and the CRC are written here, and the same file runs under CPython for the tests. Deployed to the board as
# kbench_framing.mpy; kbench_server.py is its user.

import sys
from array import array

VERSION = 1
HEADER_SIZE = 6
MAX_PAYLOAD = 0xFFFF
MAX_ENCODED = HEADER_SIZE + MAX_PAYLOAD + 2 + (HEADER_SIZE + MAX_PAYLOAD + 2) // 254 + 2



# CRC-16/CCITT-FALSE (poly x^16 + x^12 + x^5 + 1, init 0xFFFF; crc16(b"123456789") == 0x29B1) by a table loop two
# bytes per step, over a bytes-like object between two indices. Nothing is allocated: the words are read by index
# (no struct tuple), and the loop runs on small integers. (An earlier fold on big integers was faster in C but
# allocated about 23 KB per 1 KB frame under MicroPython; on a nearly full, fragmented heap that failed.)
#
# Nothing else here allocates per frame either: a frame is COBS-decoded block by block into the Decoder's one
# buffer, and a reply is built, CRC-checked and COBS-encoded in place in an Encoder's one buffer. encode() and
# Decoder.feed() return new objects: they are for the tests. With q15attn 3 on the board, use_native() swaps crc16
# and cobs_encode_into for its C ones (the per-byte loops here cost a bytecode dispatch per operation: about 130 µs
# a 1 KB frame under CPython, the twin).


def _crc_tables():
    # T1[x]: the register after one byte whose XOR with the register's high byte is x (the usual 256-entry table);
    # T2[x]: the same after a second byte that leaves the low byte unchanged (x, then 0). Two bytes (b0, b1) move
    # a register (hi, lo) to T2[hi ^ b0] ^ T1[lo ^ b1]. Both are kept byte-swapped, so that crc16 can XOR
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


def crc16(data, crc=0xFFFF, start=0, end=-1):
    # the CRC of data[start:end] (end -1: to the end), continuing from `crc`
    t1, t2 = _CRC_T1, _CRC_T2
    if end < 0:
        end = len(data)
    s = (crc & 0xFF) << 8 | crc >> 8  # the register byte-swapped throughout: lo << 8 | hi
    for i in range(start, end - 1, 2):
        s ^= data[i] | data[i + 1] << 8
        s = t2[s & 0xFF] ^ t1[s >> 8]
    if (end - start) & 1:  # the last byte alone: hi ^ byte through T1, lo becomes the high byte
        s ^= data[end - 1]
        s = s >> 8 ^ t1[s & 0xFF]
    return (s & 0xFF) << 8 | s >> 8


def cobs_encode_into(out, at, data, start, end):
    # COBS of data[start:end] written to out from index `at`; returns the index after it. out may be data itself
    # when at + 1 + (end - start) // 254 <= start: the output never overtakes the input (in place, forwards).
    code_at, o, code = at, at + 1, 1
    for i in range(start, end):
        b = data[i]
        if code == 0xFF:  # 254 bytes without a zero: the block ends (code 0xFF: no zero implied)
            out[code_at] = 0xFF
            code_at, o, code = o, o + 1, 1
        if b:
            out[o] = b
            o += 1
            code += 1
        else:  # a block ending in a zero (implied by its code)
            out[code_at] = code
            code_at, o, code = o, o + 1, 1
    out[code_at] = code
    return o


class Encoder:
    # One frame at a time in a buffer allocated once: the caller writes the payload at buffer[payload:], seal()
    # adds header and CRC and COBS-encodes the whole in place, after a pad byte (0x00: noise before a frame costs
    # nothing) and up to its delimiter: buffer[:length] is what goes on the line.

    def __init__(self, max_payload):
        self.max_payload = max_payload
        self.lead = 2 + (HEADER_SIZE + max_payload + 2) // 254  # the raw frame's start: COBS never overtakes it
        self.payload = self.lead + HEADER_SIZE
        self.buffer = bytearray(self.payload + max_payload + 3)
        self.length = 0

    def seal(self, kind, seq, n):
        buf, at = self.buffer, self.lead
        buf[at] = VERSION
        buf[at + 1] = kind
        buf[at + 2] = seq & 0xFF
        buf[at + 3] = seq >> 8
        buf[at + 4] = n & 0xFF
        buf[at + 5] = n >> 8
        end = self.payload + n
        check = crc16(buf, 0xFFFF, at, end)
        buf[end] = check & 0xFF
        buf[end + 1] = check >> 8
        buf[0] = 0
        o = cobs_encode_into(buf, 1, buf, at, end + 2)
        buf[o] = 0
        self.length = o + 1
        return self.length


def encode(kind, seq, payload=b""):
    if not 0 <= kind <= 0xFF or not 0 <= seq <= 0xFFFF or len(payload) > MAX_PAYLOAD:
        raise ValueError("frame field out of range")
    out = Encoder(len(payload))
    out.buffer[out.payload:out.payload + len(payload)] = payload
    return bytes(out.buffer[1:out.seal(kind, seq, len(payload))])


def check_body(buf, n):
    # buf[:n], a decoded frame: the payload's length, or -1 when it is corrupted
    if n < HEADER_SIZE + 2 or crc16(buf, 0xFFFF, 0, n - 2) != buf[n - 2] | buf[n - 1] << 8 or buf[0] != VERSION:
        return -1
    size = buf[4] | buf[5] << 8
    return size if size == n - HEADER_SIZE - 2 else -1


class Decoder:
    # One buffer, allocated once, that a frame is COBS-decoded into as it arrives, a block at a time: each block's
    # data is copied in by C (a slice assignment of the whole source buffer when the block starts it, as Reader's
    # reads do) and only the code bytes are handled one by one, so no loop runs per data byte and nothing is
    # allocated. .ready says a frame came whole (.kind, .seq, and its payload at buffer[HEADER_SIZE:HEADER_SIZE +
    # .size]); corrupted or too long frames are counted in .rejected and skipped; a break piece sets .interrupted.
    # `spare`: bytes past `limit` that push() may overwrite when it copies a whole source buffer of that length.

    def __init__(self, limit=MAX_ENCODED, spare=0):
        self.limit = limit  # longest decoded frame accepted: a board keeps this below its free heap
        self.buffer = bytearray(limit + spare)
        self.fill = 0  # decoded bytes of the frame so far
        self.need = 0  # data bytes left in the current COBS block; 0: the next byte is a code byte or a delimiter
        self.code = 0  # the current block's code byte; 0 before the frame's first
        self.raw = 0  # encoded bytes of the frame so far
        self.bad = False  # too long, or a zero inside a block: rejected at the delimiter
        self.breaking = True  # every encoded byte so far is 0x03: two or more alone are a break piece, never a frame
        self.ready = False
        self.kind = self.seq = self.size = 0
        self.rejected = 0
        self.interrupted = False

    def wanted(self):
        # bytes to read next so that a read ends on a block's last data byte and the byte after it (the next code
        # byte, or the delimiter every frame has): one read per block. Not while the piece may be a break piece
        # (every byte so far 0x03, and 00 03 03 00 is one): nothing need follow its block.
        need = self.need
        if need > 2 or (need and not self.breaking):
            return need + 1
        return need or 1

    def push(self, src, start, end):
        # Takes src[start:end] up to and including the first delimiter; returns the index after what it took.
        self.ready = False
        i = start
        while i < end:
            need = self.need
            if need == 0:  # a code byte, or the delimiter
                code = src[i]
                i += 1
                if code == 0:
                    self.frame()
                    return i
                self.raw += 1
                if code != 3:
                    self.breaking = False
                if self.code and self.code < 0xFF:  # the block before ended in a zero
                    self.put_zero()
                self.code, self.need = code, code - 1
                continue
            k = min(need, end - i)
            zero = src.find(b"\x00", i, i + k)
            if zero >= 0:  # a delimiter inside a block: the frame is cut short, and ends here
                k, self.bad = zero - i, True
            if self.breaking:
                for j in range(i, i + k):
                    if src[j] != 3:
                        self.breaking = False
            self.take(src, i, k)
            self.raw += k
            i += k
            self.need = 0 if zero >= 0 else need - k
        return end

    def put_zero(self):
        if self.fill < self.limit:
            self.buffer[self.fill] = 0
            self.fill += 1
        else:
            self.bad = True

    def take(self, src, i, k):
        # src[i:i + k], a block's data, appended to the frame
        fill = self.fill
        if self.bad or fill + k > self.limit:
            self.bad = True
        elif i == 0 and fill + len(src) <= len(self.buffer):
            self.buffer[fill:fill + len(src)] = src  # in C; what lies past k is overwritten later
            self.fill = fill + k
        else:
            buf = self.buffer
            for j in range(k):
                buf[fill + j] = src[i + j]
            self.fill = fill + k

    def frame(self):
        # the delimiter came: what arrived since the last is a frame, a break piece, or nothing
        raw, fill = self.raw, self.fill
        whole = self.need == 0 and not self.bad
        breaking = self.breaking
        self.fill = self.need = self.code = self.raw = 0
        self.bad, self.breaking = False, True
        if raw == 0:
            return
        if breaking and raw >= 2:
            self.interrupted = True
            return
        size = check_body(self.buffer, fill) if whole else -1
        if size < 0:
            self.rejected += 1
        else:
            buf = self.buffer
            self.kind = buf[1]  # one by one: MicroPython packs four targets into a tuple
            self.seq = buf[2] | buf[3] << 8
            self.size = size
            self.ready = True

    def feed(self, data):
        # every frame data completes, as a list of (kind, seq, payload)
        frames = []
        i, n = 0, len(data)
        while i < n:
            i = self.push(data, i, n)
            if self.ready:
                frames.append((self.kind, self.seq, bytes(self.buffer[HEADER_SIZE:HEADER_SIZE + self.size])))
        return frames


READ_BLOCK = 256  # the most a Reader reads at once: a COBS block (254 data bytes at most), its code and one more
# MicroPython's streams read into a buffer's start with readinto(buf, n): no memoryview per read
SIZED_READINTO = sys.implementation.name == "micropython"


class Reader:
    # Reads the line for a Decoder, a COBS block at a time rather than a byte at a time (Decoder.wanted), into one
    # buffer of its own: each read's bytes start that buffer, so the decoder copies a block's data in one C call.

    def __init__(self, stream, decoder):
        self.stream = stream
        self.decoder = decoder
        self.buffer = bytearray(READ_BLOCK)  # a block's data and the byte after it

    def read(self):
        # the count of bytes read into .buffer; 0 when the stream ended
        want = self.decoder.wanted()
        if SIZED_READINTO:
            return self.stream.readinto(self.buffer, want) or 0
        return self.stream.readinto(memoryview(self.buffer)[:want]) or 0


PYTHON_CRC16, PYTHON_COBS_ENCODE_INTO = crc16, cobs_encode_into


def use_native(module):
    # The C crc16 and cobs_encode of q15attn (version 3 and later: mcu/native/kbench_frame.c) in place of the
    # Python ones here when the module has both (True), else the Python ones (False). Same arguments, same results.
    global crc16, cobs_encode_into
    native_crc, native_cobs = getattr(module, "crc16", None), getattr(module, "cobs_encode", None)
    if native_crc is None or native_cobs is None:
        crc16, cobs_encode_into = PYTHON_CRC16, PYTHON_COBS_ENCODE_INTO
        return False
    crc16, cobs_encode_into = native_crc, native_cobs
    return True
