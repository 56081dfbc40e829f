# The board's side of the link framing (docs/protocol.md), in MicroPython: COBS-encoded, 0x00-delimited frames of
# version, type, sequence number, length, payload and CRC-16/CCITT-FALSE. No libraries beyond the firmware's:
# COBS and the CRC are written here, and the same file runs under CPython for the tests. Deployed to the board as
# kbench_framing.mpy; kbench_server.py is its user.

VERSION = 1
HEADER_SIZE = 6
MAX_PAYLOAD = 0xFFFF
MAX_ENCODED = HEADER_SIZE + MAX_PAYLOAD + 2 + (HEADER_SIZE + MAX_PAYLOAD + 2) // 254 + 2


BREAK_PIECE_BYTE = b"\x03"  # two or more of these alone between delimiters ask the server to stop (never a frame)


def _crc_table():
    table = []
    for top in range(256):
        crc = top << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
        table.append(crc)
    return table


_CRC_TABLE = _crc_table()


def crc16(data, crc=0xFFFF):
    # CRC-16/CCITT-FALSE, a byte at a time through a 256-entry table (poly 0x1021, init 0xFFFF);
    # crc16(b"123456789") == 0x29B1
    table = _CRC_TABLE
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ table[(crc >> 8) ^ byte]
    return crc


def cobs_encode(data):
    out = bytearray(b"\x00")
    code_at, code = 0, 1
    last = len(data) - 1
    for i, byte in enumerate(data):
        if byte:
            out.append(byte)
            code += 1
        if not byte or (code == 0xFF and i < last):  # a full block ends without a zero unless more data follows
            out[code_at] = code
            code_at, code = len(out), 1
            out.append(0)
    out[code_at] = code
    return bytes(out)


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
        frames = []
        self.buffer.extend(data)
        while True:
            end = self.buffer.find(b"\x00")
            if end < 0:
                if len(self.buffer) > self.limit:
                    self.rejected += 1
                    self.buffer = bytearray()
                return frames
            chunk = bytes(self.buffer[:end])
            self.buffer = self.buffer[end + 1:]
            if not chunk:
                continue
            if len(chunk) > self.limit:
                self.rejected += 1
                continue
            if is_break(chunk):
                self.interrupted = True
                continue
            try:
                frames.append(decode_body(chunk))
            except ValueError:
                self.rejected += 1
