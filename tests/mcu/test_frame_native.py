"""The frame server's C steps (mcu/native/kbench_frame.c, q15attn.crc16 and q15attn.cobs_encode) against the Python
ones of mcu/board/kbench_framing.py, the standard library's CRC and PyPI's COBS; the twin's q15attn functions of the
same names against both; and the binding's argument checks, which name the bad value and the allowed range."""

from __future__ import annotations

import binascii
import random

import pytest
from cobs import cobs

from mcu import frame_c
from mcu.board import kbench_framing as board
from mcu.sim.q15module import make_module

SIZES = list(range(0, 260)) + [507, 508, 509, 762, 1024, 1035, 4096]


@pytest.fixture(scope="module")
def twin():
    return make_module()


def test_the_c_crc_is_the_check_value_and_the_standard_librarys_for_every_length_and_start():
    assert frame_c.crc16(b"123456789", 0xFFFF, 0, -1) == 0x29B1  # CRC-16/CCITT-FALSE's check value
    rng = random.Random(5)
    for size in SIZES:
        data = bytearray(rng.randbytes(size))
        crc = rng.randrange(0x10000)
        i = rng.randrange(size + 1)
        j = rng.randrange(i, size + 1)
        assert frame_c.crc16(data, crc, 0, -1) == binascii.crc_hqx(data, crc) == board.crc16(data, crc), size
        assert frame_c.crc16(bytes(data), crc, i, j) == binascii.crc_hqx(data[i:j], crc) \
            == board.PYTHON_CRC16(data, crc, i, j), (size, i, j)


def test_the_c_cobs_is_the_librarys_and_the_boards_including_in_place():
    rng = random.Random(6)
    for size in SIZES:
        # zero-rich, zero-free and random data: blocks of every length, 254-byte runs (code 0xFF) among them
        for data in (rng.randbytes(size), bytes(rng.choice((0, 1, 2)) for _ in range(size)),
                     bytes(rng.randrange(1, 256) for _ in range(size))):
            want = cobs.encode(data)
            out = bytearray(frame_c.cobs_max(size) + 3)
            assert frame_c.cobs_encode(out, 2, data, 0, size) == 2 + len(want)
            assert bytes(out[2:2 + len(want)]) == want, size
            # in place, forwards, as Encoder.seal does: the output from index 1, the input from the lead
            lead = 2 + size // 254
            buf = bytearray(lead) + bytearray(data) + bytearray(2)
            assert frame_c.cobs_encode(buf, 1, buf, lead, lead + size) == 1 + len(want)
            assert bytes(buf[1:1 + len(want)]) == want
            py = bytearray(lead) + bytearray(data) + bytearray(2)
            assert board.PYTHON_COBS_ENCODE_INTO(py, 1, py, lead, lead + size) == 1 + len(want)
            assert py[1:1 + len(want)] == buf[1:1 + len(want)]


def test_the_twins_functions_give_the_same_bytes(twin):
    rng = random.Random(7)
    for size in SIZES:
        data = bytearray(rng.randbytes(size))
        assert twin.crc16(data, 0xFFFF, 0, -1) == frame_c.crc16(data, 0xFFFF, 0, -1)
        lead = 2 + size // 254
        buf = bytearray(lead) + data + bytearray(2)
        c_buf = bytearray(buf)
        assert twin.cobs_encode(buf, 1, buf, lead, lead + size) == frame_c.cobs_encode(c_buf, 1, c_buf, lead,
                                                                                      lead + size)
        assert buf == c_buf


@pytest.mark.parametrize("side", ["c", "twin"])
@pytest.mark.parametrize("call, error, text", [
    (lambda f: f.crc16(bytearray(8), 0x10000, 0, -1), ValueError, "crc=65536 is out of range; allowed: 0..65535"),
    (lambda f: f.crc16(bytearray(8), 0, 9, -1), ValueError, "start=9 is out of range; allowed: 0..8"),
    (lambda f: f.crc16(bytearray(8), 0, 5, 3), ValueError, "end=3 is out of range; allowed: 5..8"),
    (lambda f: f.crc16(bytearray(8), 0, 0, 1 << 40), OverflowError, "end=1099511627776 is out of range"),
    (lambda f: f.crc16(bytearray(8), 0, 0.5, 3), TypeError, "can't convert float to int"),
    (lambda f: f.crc16(42, 0, 0, -1), TypeError, "buffer protocol required for data"),
    (lambda f: f.cobs_encode(bytes(16), 0, b"abc", 0, 3), TypeError, "required for out"),
    (lambda f: f.cobs_encode(bytearray(4), 1, b"abc", 0, 3), ValueError, "at=1 is out of range; allowed: 0..0"),
    (lambda f: f.cobs_encode(bytearray(3), 0, b"abc", 0, 3), ValueError,
     "out holds 3 bytes; allowed: at least 4 for COBS of 3 bytes"),
])
def test_bad_arguments_name_the_value_and_the_range(twin, side, call, error, text):
    with pytest.raises(error, match=text.replace(".", r"\.").replace("(", r"\(")):
        call(frame_c if side == "c" else twin)


@pytest.mark.parametrize("side", ["c", "twin"])
def test_an_overlap_that_would_overtake_the_input_is_refused(twin, side):
    buf = bytearray(300)
    functions = frame_c if side == "c" else twin
    with pytest.raises(ValueError, match="at=1 overlaps the data"):
        functions.cobs_encode(buf, 1, buf, 1, 255)  # the output would start on the input itself
    assert functions.cobs_encode(buf, 1, buf, 3, 258) > 1  # 1 + 255 // 254 = 2 bytes ahead: in place is allowed


def test_use_native_swaps_both_or_neither(twin):
    try:
        assert board.use_native(twin) is True
        assert board.crc16 is twin.crc16 and board.cobs_encode_into is twin.cobs_encode
        frame = board.encode(3, 9, b"\x00abc" * 300)
    finally:
        assert board.use_native(type("OnlyCrc", (), {"crc16": staticmethod(frame_c.crc16)})()) is False
    assert board.crc16 is board.PYTHON_CRC16 and board.cobs_encode_into is board.PYTHON_COBS_ENCODE_INTO
    assert board.encode(3, 9, b"\x00abc" * 300) == frame  # the same frame, native or not
