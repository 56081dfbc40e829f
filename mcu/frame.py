"""Host side of the board link's framing (docs/protocol.md): COBS-encoded, 0x00-delimited frames carrying a
version, a message type, a sequence number, a length and a CRC-16/CCITT-FALSE, built on PyPI's `cobs` and the
standard library's CRC.

`encode` makes one frame; `Decoder` takes bytes as they arrive and returns whole frames, rejecting (and counting)
anything corrupted and resynchronising at the next delimiter, so line noise costs a retry, never the session.
"""

from __future__ import annotations

import binascii
import struct
from dataclasses import dataclass, field

from cobs import cobs

VERSION = 1
DELIMITER = b"\x00"
HEADER = struct.Struct("<BBHH")  # version, type, sequence number, payload length
CRC = struct.Struct("<H")
MAX_PAYLOAD = 0xFFFF
#: The longest encoded frame: COBS adds one byte per 254 and one in front; plus the delimiter.
MAX_ENCODED = HEADER.size + MAX_PAYLOAD + CRC.size + (HEADER.size + MAX_PAYLOAD + CRC.size) // 254 + 2



def crc16(data: bytes) -> int:
    """CRC-16/CCITT-FALSE of data (poly 0x1021, init 0xFFFF, not reflected; check value: crc16(b"123456789") ==
    0x29B1): the standard library's C implementation (binascii.crc_hqx), 2.6 µs per 1 KB frame where PyPI's `crc`
    took 700 µs and bounded the link's LOAD throughput on the host side (docs/performance.md, "Board link")."""
    return binascii.crc_hqx(data, 0xFFFF)


@dataclass(frozen=True)
class Frame:
    """One message: its type, sequence number (0..65535) and payload."""

    kind: int
    seq: int
    payload: bytes = b""


def encode(kind: int, seq: int, payload: bytes = b"") -> bytes:
    """The bytes on the wire for one frame, delimiter included."""
    if not 0 <= kind <= 0xFF:
        raise ValueError(f"kind={kind} is out of range; allowed: 0..255")
    if not 0 <= seq <= 0xFFFF:
        raise ValueError(f"seq={seq} is out of range; allowed: 0..65535")
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes is too long; allowed: 0..{MAX_PAYLOAD}")
    body = HEADER.pack(VERSION, kind, seq, len(payload)) + bytes(payload)
    return cobs.encode(body + CRC.pack(crc16(body))) + DELIMITER


def decode_body(encoded: bytes) -> Frame:
    """One frame from its encoded bytes (no delimiter); ValueError says what is wrong with it."""
    try:
        raw = cobs.decode(encoded)
    except cobs.DecodeError as exc:
        raise ValueError(f"bad COBS: {exc}") from None
    if len(raw) < HEADER.size + CRC.size:
        raise ValueError(f"frame of {len(raw)} bytes is shorter than a header and a CRC")
    body, (check,) = raw[:-CRC.size], CRC.unpack(raw[-CRC.size:])
    if crc16(body) != check:
        raise ValueError(f"CRC {crc16(body):#06x} does not match {check:#06x}")
    version, kind, seq, length = HEADER.unpack(body[:HEADER.size])
    if version != VERSION:
        raise ValueError(f"frame version {version}; this host speaks {VERSION}")
    if length != len(body) - HEADER.size:
        raise ValueError(f"length field {length} but {len(body) - HEADER.size} payload bytes")
    return Frame(kind, seq, bytes(body[HEADER.size:]))


@dataclass
class Decoder:
    """Incremental decoder: `feed` bytes, get whole frames; bad frames are counted in `rejected` with the reason
    of the last one in `last_error`, and the decoder carries on at the next delimiter."""

    rejected: int = 0
    last_error: str = ""
    _buffer: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes) -> list[Frame]:
        frames = []
        self._buffer.extend(data)
        while True:
            end = self._buffer.find(DELIMITER)
            if end < 0:
                if len(self._buffer) > MAX_ENCODED:  # garbage with no delimiter: drop it, keep listening
                    self._reject(f"{len(self._buffer)} bytes without a delimiter")
                    self._buffer.clear()
                return frames
            chunk = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            if not chunk:
                continue  # back-to-back delimiters: resynchronisation padding
            try:
                frames.append(decode_body(chunk))
            except ValueError as exc:
                self._reject(str(exc))

    def _reject(self, reason: str) -> None:
        self.rejected += 1
        self.last_error = reason
