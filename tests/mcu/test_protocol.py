"""The board's frame server (mcu/board/kbench_server.py) against the host's messages (mcu/messages.py): the
contract's values agree, every request is dispatched and answered, retries are answered from the reply cache (a
window's worth of LOADs), refusals carry their status and a message, corrupted input never kills the server, and the
same requests give the same replies under a real MicroPython (the WebAssembly port) as under CPython."""

from __future__ import annotations

import io
import random
import shutil
import struct
import subprocess

import numpy as np
import pytest

pytest.importorskip("cobs", reason="cobs is not installed (pip install -e '.[mcu]')")  # mcu.frame's COBS

from helpers import ROOT, WASM_PACKAGE
from helpers.board import BOARD_DIR, CopyKernel, FakeGc, board_module
from mcu import q15_c
from mcu import frame as host
from mcu import messages as m
from mcu.link import BREAK, FLUSH, PAD

board = board_module("kbench_server")  # by its name on the board, as the board's modules import each other


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setattr(board, "gc", FakeGc())
    return board.Server(io.BytesIO(), io.BytesIO(), CopyKernel())


def ask(server, kind: int, payload: bytes = b"", seq: int = 7) -> host.Frame:
    frames = host.Decoder().feed(server.answer(kind, seq, payload))
    assert len(frames) == 1 and frames[0].kind == kind | m.REPLY and frames[0].seq == seq
    return frames[0]


def test_host_and_board_share_the_contract():
    assert {k.name: int(k) for k in m.Kind} == {name: getattr(board, name) for name in m.Kind.__members__}
    assert {s.name: int(s) for s in m.Status} == {name: getattr(board, name) for name in m.Status.__members__}
    on_board = {name: getattr(board, "TENSOR_" + name) for name in m.Tensor.__members__}
    assert {t.name: int(t) for t in m.Tensor} == on_board
    for name in ("SETUP", "LOAD", "RUN", "READ", "STREAM"):
        assert getattr(m, name).format == getattr(board, name + "_FMT"), name
    for name in ("HELLO", "SETUP", "RUN"):
        assert getattr(m, name + "_REPLY").format == getattr(board, name + "_REPLY_FMT"), name
    assert (m.REPLY, m.PROTOCOL, m.MODULE_VERSION, m.REPEAT_MAX, m.NO_TEMP, m.NO_CYCLES) == \
        (board.REPLY, board.PROTOCOL, board.MODULE_MIN, board.REPEAT_MAX, board.NO_TEMP, board.NO_CYCLES)
    for seq, dim, rows in ((1, 1, 1), (97, 59, 13), (1024, 64, 1024)):
        assert m.tensor_bytes(seq, dim, rows) == board.tensor_bytes(seq, dim, rows, seq) == \
            2 * dim * (2 * seq + 2 * rows) + rows  # K, V^T, Q, O int16, and a shift byte per row
    for seq, dim, rows, keys in ((97, 59, 13, 32), (32768, 64, 92, 32)):  # streamed: a key chunk and the rows' state
        assert m.tensor_bytes(seq, dim, rows, keys) == board.tensor_bytes(seq, dim, rows, keys,
                                                                          q15_c.state_bytes(dim, rows))
        assert m.state_bytes(dim, rows) == q15_c.state_bytes(dim, rows)


def test_hello_reports_the_board(server):
    hello = m.Hello.parse(ask(server, m.Kind.HELLO).payload)
    assert (hello.protocol, hello.heap_free, hello.heap_total, hello.reserve, hello.max_data, hello.window) == \
        (m.PROTOCOL, 90_000, 102_400, board.RESERVE, board.MAX_DATA, board.WINDOW)
    assert hello.module_present and hello.server_version == board.SERVER_VERSION


def test_a_head_through_the_server_round_trips_the_data(server):
    """Q in, O and its row shifts out: the stand-in kernel copies Q to O and writes row i's shift (row0 + i) % 32, so
    each chunk's shifts read back are its own rows'."""
    seq, dim, rows = 17, 59, 6
    rng = np.random.default_rng(1)
    q = rng.integers(-32768, 32767, (seq, dim), dtype=np.int16)
    setup = ask(server, m.Kind.SETUP, m.SETUP.pack(seq, dim, 1, 16, 20000, 20, rows, seq)).payload
    status, need, _ = m.SETUP_REPLY.unpack(setup)
    assert status == m.Status.OK and need == m.tensor_bytes(seq, dim, rows)
    assert len(server.tensors[m.Tensor.OSHIFT]) == rows
    out, shifts = bytearray(), bytearray()
    for row0 in range(0, seq, rows):
        chunk = q[row0:row0 + rows].astype("<i2").tobytes()
        for offset in range(0, len(chunk), 1000):
            body = ask(server, m.Kind.LOAD, m.LOAD.pack(m.Tensor.Q, offset) + chunk[offset:offset + 1000]).payload
            assert m.check_status(m.Kind.LOAD, body) == b""
        nrows = len(chunk) // (2 * dim)
        reply = m.RunReply.parse(ask(server, m.Kind.RUN, m.RUN.pack(row0, nrows, 3)).payload)
        assert reply.cycles == (1000 + row0,) * 3 and reply.temp_c is None and reply.vdda_v is None
        for offset in range(0, len(chunk), 1000):
            count = min(1000, len(chunk) - offset)
            out += m.check_status(m.Kind.READ, ask(server, m.Kind.READ, m.READ.pack(m.Tensor.O, offset, count)).payload)
        shifts += m.check_status(m.Kind.READ, ask(server, m.Kind.READ, m.READ.pack(m.Tensor.OSHIFT, 0, nrows),
                                                  seq=8).payload)  # not O's seq: that READ's reply is kept
    assert np.array_equal(np.frombuffer(bytes(out), dtype="<i2").reshape(seq, dim), q)
    assert list(shifts) == [row % 32 for row in range(seq)]
    body = ask(server, m.Kind.READ, m.READ.pack(m.Tensor.OSHIFT, 0, rows + 1)).payload  # past the rows' bytes
    assert body[0] == m.Status.E_PAYLOAD and f"bytes 0..{rows + 1} of tensor 4; allowed: 0..{rows}" in body[1:].decode()


def test_a_retried_request_is_answered_from_the_cache_not_redone(server):
    ask(server, m.Kind.SETUP, m.SETUP.pack(8, 4, 0, 8, 20000, 20, 8, 8))
    first = server.answer(m.Kind.RUN, 41, m.RUN.pack(0, 8, 1))
    again = server.answer(m.Kind.RUN, 41, m.RUN.pack(0, 8, 1))
    assert first == again and server.kernel.calls == 1
    server.answer(m.Kind.RUN, 42, m.RUN.pack(0, 8, 1))
    assert server.kernel.calls == 2


def test_the_cache_answers_a_windows_worth_of_loads_and_forgets_them_at_the_next_other_request(server):
    """A window of LOADs, then each again (their acks were lost): answered from the cache, nothing rewritten. One
    LOAD past the window drops the oldest reply, whose duplicate is then written again (the same bytes: harmless).
    A request of another kind empties the cache: the host sends one only when every LOAD was answered."""
    writes = []
    real_load = server.handlers[m.Kind.LOAD]
    server.handlers[m.Kind.LOAD] = lambda payload: writes.append(payload[:5]) or real_load(payload)
    ask(server, m.Kind.SETUP, m.SETUP.pack(64, 8, 0, 8, 20000, 20, 1, 64))
    loads = [(100 + i, m.LOAD.pack(m.Tensor.K, 16 * i) + bytes([i + 1]) * 16) for i in range(board.WINDOW)]
    first = [server.answer(m.Kind.LOAD, seq, payload) for seq, payload in loads]
    assert [server.answer(m.Kind.LOAD, seq, payload) for seq, payload in reversed(loads)] == first[::-1]
    assert len(writes) == board.WINDOW
    server.answer(m.Kind.LOAD, 100 + board.WINDOW, m.LOAD.pack(m.Tensor.K, 16 * board.WINDOW) + b"\x09" * 16)
    assert server.answer(*((m.Kind.LOAD,) + loads[1])) == first[1] and len(writes) == board.WINDOW + 1
    assert server.answer(*((m.Kind.LOAD,) + loads[0])) == first[0] and len(writes) == board.WINDOW + 2  # redone
    k = bytes(server.tensors[m.Tensor.K][:16 * board.WINDOW])
    assert k == b"".join(bytes([i + 1]) * 16 for i in range(board.WINDOW))
    ask(server, m.Kind.READ, m.READ.pack(m.Tensor.K, 0, 4), seq=200)
    assert (server.last_seq, server.loads) == (200, [-1] * board.WINDOW)


@pytest.mark.parametrize("kind, payload, status, words", [
    (m.Kind.RUN, m.RUN.pack(0, 1, 1), m.Status.E_STATE, "before SETUP"),
    (99, b"", m.Status.E_TYPE, "unknown message type 99"),
    (m.Kind.SETUP, b"\x01", m.Status.E_PAYLOAD, "expected 13"),
    (m.Kind.SETUP, m.SETUP.pack(4, 4, 0, 4, 20000, 20, 5, 4), m.Status.E_PAYLOAD, "rows=5"),
    (m.Kind.SETUP, m.SETUP.pack(2000, 64, 0, 32, 20000, 20, 1, 2000), m.Status.E_MEMORY, "the heap has 90000 free"),
    (m.Kind.LOAD, m.LOAD.pack(m.Tensor.K, 0) + b"\x00" * 4, m.Status.E_STATE, "before SETUP"),
])
def test_refusals_name_their_reason(server, kind, payload, status, words):
    body = ask(server, kind, payload).payload
    assert body[0] == status and words in body[1:].decode()
    assert m.Hello.parse(ask(server, m.Kind.HELLO, seq=1).payload).protocol == m.PROTOCOL  # the server answers on


def test_refusals_after_setup(server):
    ask(server, m.Kind.SETUP, m.SETUP.pack(8, 4, 0, 99, 20000, 20, 4, 8))
    for seq, (payload, status, words) in enumerate((
            (m.LOAD.pack(m.Tensor.K, 60) + b"\x01" * 8, m.Status.E_PAYLOAD, "bytes 60..68 of tensor 1"),
            (m.LOAD.pack(m.Tensor.O, 0) + b"\x01", m.Status.E_PAYLOAD, "tensor 3"),
            (m.LOAD.pack(m.Tensor.OSHIFT, 0) + b"\x01", m.Status.E_PAYLOAD, "tensor 4"),  # the kernel's output only
    )):
        body = ask(server, m.Kind.LOAD, payload, seq=seq).payload
        assert body[0] == status and words in body.decode("utf-8", "replace")
    with pytest.raises(m.BoardRefused, match="E_KERNEL: bc=99 is out of range"):
        m.RunReply.parse(ask(server, m.Kind.RUN, m.RUN.pack(0, 4, 1)).payload)
    with pytest.raises(m.BoardRefused, match="repeat=0"):
        m.RunReply.parse(ask(server, m.Kind.RUN, m.RUN.pack(0, 4, 0), seq=8).payload)


class HostKernel:
    """q15attn's stream() as the host build of the C kernel (mcu/q15_c.py) runs it, in place on the server's
    buffers as the binding does; counts its calls."""

    def __init__(self):
        self.calls = 0

    def version(self):
        return m.MODULE_VERSION  # the binding of this build (mcu/native/attention_q15.h Q15ATTN_VERSION)

    def state_bytes(self, dim, rows):
        return q15_c.state_bytes(dim, rows)

    def stream(self, q, k, vt, o, oshift, state, seq, dim, causal, bc, mult, shift, row0, key0):
        import ctypes

        self.calls += 1
        views = [np.frombuffer(x, dtype=t) for x, t in ((q, "<i2"), (k, "<i2"), (vt, "<i2"), (state, "<i8"),
                                                          (o, "<i2"), (oshift, "u1"))]
        params = q15_c.Params(seq, dim, causal, bc, mult, shift)
        nrows, nkeys = views[0].size // dim, views[1].size // dim
        status = q15_c.library().q15attn_stream(ctypes.byref(params), row0, nrows, key0, nkeys, *views)
        if status:
            sizes = tuple(len(x) for x in (q, k, vt, o, oshift, state))
            raise ValueError(q15_c.check_stream_buffers(params_dict(params), row0, key0, sizes, status)[3])
        return 500 + key0


def params_dict(params) -> dict:
    return {name: getattr(params, name) for name, _ in params._fields_}


def _streamed_head(server, q, k, v, params, rows: int, keys: int):
    """A streamed head through the server as mcu/head.py sends it: per chunk of query rows, LOAD Q, then per key
    chunk LOAD K and V^T and STREAM; READ O and its row shifts after the last. Returns the head's Q15Out."""
    from host.q15 import Q15Out

    seq, dim = params.seq, params.dim
    ask(server, m.Kind.SETUP, m.SETUP.pack(seq, dim, int(params.causal), params.bc, params.score_mult,
                                           params.score_shift, rows, keys))
    out, n = Q15Out(np.empty_like(q), np.empty(seq, dtype=np.uint8)), iter(range(1, 1 << 16))
    for row0 in range(0, seq, rows):
        nrows = min(rows, seq - row0)
        ask(server, m.Kind.LOAD, m.LOAD.pack(m.Tensor.Q, 0) + q[row0:row0 + nrows].tobytes(), seq=next(n))
        end = row0 + nrows if params.causal else seq
        for key0 in range(0, end, keys):
            key1 = min(end, key0 + keys)
            ask(server, m.Kind.LOAD, m.LOAD.pack(m.Tensor.K, 0) + k[key0:key1].tobytes(), seq=next(n))
            ask(server, m.Kind.LOAD, m.LOAD.pack(m.Tensor.VT, 0) + np.ascontiguousarray(v[key0:key1].T).tobytes(),
                seq=next(n))
            reply = m.RunReply.parse(ask(server, m.Kind.STREAM, m.STREAM.pack(row0, nrows, key0, key1 - key0),
                                         seq=next(n)).payload)
            assert reply.cycles == (500 + key0,)
        body = m.check_status(m.Kind.READ, ask(server, m.Kind.READ, m.READ.pack(m.Tensor.O, 0, 2 * nrows * dim),
                                               seq=next(n)).payload)
        out.o[row0:row0 + nrows] = np.frombuffer(body, dtype="<i2").reshape(nrows, dim)
        out.shift[row0:row0 + nrows] = np.frombuffer(m.check_status(m.Kind.READ, ask(
            server, m.Kind.READ, m.READ.pack(m.Tensor.OSHIFT, 0, nrows), seq=next(n)).payload), dtype=np.uint8)
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_a_streamed_head_through_the_server_equals_the_model(monkeypatch, causal):
    from host.q15 import Q15Params, attention_q15

    monkeypatch.setattr(board, "gc", FakeGc())
    server = board.Server(io.BytesIO(), io.BytesIO(), HostKernel())
    rng = np.random.default_rng(5)
    q, k, v = (rng.integers(-32768, 32768, (97, 7)).astype("<i2") for _ in range(3))
    q[[5, 60]] = 0  # rows that weigh every key alike: their output (V's mean) is small and gets a larger shift
    params = Q15Params(97, 7, causal, 16, 23170, 24)
    setup_need = board.tensor_bytes(97, 7, 13, 32, q15_c.state_bytes(7, 13))
    expected = attention_q15(q, k, v, params)
    got = _streamed_head(server, q, k, v, params, 13, 32)
    assert got.same_bits(expected) and len(set(expected.shift.tolist())) > 1  # the shifts do carry each row's own
    assert setup_need == m.tensor_bytes(97, 7, 13, 32)


def test_stream_refusals_never_mix_state(monkeypatch):
    """RUN on a streamed head and STREAM on a resident one are refused; a chunk out of order is refused by the kernel
    with its message and the rows go on; a resent STREAM is answered from the cache, not run twice."""
    from host.q15 import Q15Params, attention_q15

    monkeypatch.setattr(board, "gc", FakeGc())
    kernel = HostKernel()
    server = board.Server(io.BytesIO(), io.BytesIO(), kernel)
    rng = np.random.default_rng(6)
    q, k, v = (rng.integers(-32768, 32768, (40, 4)).astype("<i2") for _ in range(3))
    params = Q15Params(40, 4, False, 8, 23170, 24)
    ask(server, m.Kind.SETUP, m.SETUP.pack(40, 4, 0, 8, 23170, 24, 40, 16))
    with pytest.raises(m.BoardRefused, match="E_STATE: RUN on a head set up with keys=16 of seq=40; allowed: STREAM"):
        m.RunReply.parse(ask(server, m.Kind.RUN, m.RUN.pack(0, 40, 1), seq=1).payload)
    ask(server, m.Kind.LOAD, m.LOAD.pack(m.Tensor.Q, 0) + q.tobytes(), seq=2)
    chunks = [(0, 16), (16, 32), (32, 40)]
    with pytest.raises(m.BoardRefused, match="E_KERNEL: the state does not hold rows 0..39 with these parameters and "
                                             "keys 0..15"):
        m.RunReply.parse(ask(server, m.Kind.STREAM, m.STREAM.pack(0, 40, 16, 16), seq=3).payload, m.Kind.STREAM)
    with pytest.raises(m.BoardRefused, match="nkeys=17; allowed: nrows 1..40, nkeys 1..16"):
        m.RunReply.parse(ask(server, m.Kind.STREAM, m.STREAM.pack(0, 40, 0, 17), seq=4).payload)
    for n, (key0, key1) in enumerate(chunks):
        ask(server, m.Kind.LOAD, m.LOAD.pack(m.Tensor.K, 0) + k[key0:key1].tobytes(), seq=10 + 3 * n)
        ask(server, m.Kind.LOAD, m.LOAD.pack(m.Tensor.VT, 0) + np.ascontiguousarray(v[key0:key1].T).tobytes(),
            seq=11 + 3 * n)
        calls = kernel.calls
        first = ask(server, m.Kind.STREAM, m.STREAM.pack(0, 40, key0, key1 - key0), seq=12 + 3 * n).payload
        assert ask(server, m.Kind.STREAM, m.STREAM.pack(0, 40, key0, key1 - key0), seq=12 + 3 * n).payload == first
        assert kernel.calls == calls + 1  # the resend was answered from the cache
    body = m.check_status(m.Kind.READ, ask(server, m.Kind.READ, m.READ.pack(m.Tensor.O, 0, 320), seq=30).payload)
    shifts = m.check_status(m.Kind.READ, ask(server, m.Kind.READ, m.READ.pack(m.Tensor.OSHIFT, 0, 40), seq=29).payload)
    expected = attention_q15(q, k, v, params)
    assert np.array_equal(np.frombuffer(body, dtype="<i2").reshape(40, 4), expected.o)
    assert np.array_equal(np.frombuffer(shifts, dtype=np.uint8), expected.shift)
    ask(server, m.Kind.SETUP, m.SETUP.pack(40, 4, 0, 8, 23170, 24, 40, 40), seq=31)
    with pytest.raises(m.BoardRefused, match="E_STATE: STREAM on a head set up with keys=40 of seq=40; allowed: RUN"):
        m.RunReply.parse(ask(server, m.Kind.STREAM, m.STREAM.pack(0, 40, 0, 8), seq=32).payload)


def test_a_streamed_setup_needs_a_kernel_with_stream(monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setattr(board, "gc", FakeGc())
    no_stream = SimpleNamespace(version=lambda: 4, attention=CopyKernel().attention)  # no stream(), no state_bytes()
    server = board.Server(io.BytesIO(), io.BytesIO(), no_stream)
    body = ask(server, m.Kind.SETUP, m.SETUP.pack(40, 4, 0, 8, 23170, 24, 40, 16)).payload
    assert body[0] == m.Status.E_MODULE and "needs q15attn 4 or later, with stream()" in body[1:].decode()


def test_without_q15attn_run_is_refused_with_the_import_error(monkeypatch):
    monkeypatch.setattr(board, "gc", FakeGc())
    server = board.Server(io.BytesIO(), io.BytesIO(), None, "ValueError: incompatible .mpy arch")
    assert not m.Hello.parse(ask(server, m.Kind.HELLO).payload).module_present
    ask(server, m.Kind.SETUP, m.SETUP.pack(4, 4, 0, 4, 20000, 20, 4, 4))
    with pytest.raises(m.BoardRefused, match="E_MODULE: q15attn is not on the board .*: ValueError: incompatible"):
        m.RunReply.parse(ask(server, m.Kind.RUN, m.RUN.pack(0, 4, 1)).payload)


def test_a_frame_longer_than_the_board_buffers_is_dropped_and_the_server_goes_on(monkeypatch):
    too_long = host.encode(m.Kind.LOAD, 5, m.LOAD.pack(1, 0) + b"\x01" * (board.FRAME_LIMIT + 10))
    replies = serve_stream(monkeypatch, PAD + too_long + PAD + host.encode(m.Kind.HELLO, 6))
    assert [f.seq for f in replies] == [0, 6]


def serve_stream(monkeypatch, data: bytes) -> list[host.Frame]:
    monkeypatch.setattr(board, "gc", FakeGc())
    tx = io.BytesIO()
    board.Server(io.BytesIO(data), tx, CopyKernel()).serve()
    return host.Decoder().feed(tx.getvalue())


def test_serve_announces_then_answers_until_bye(monkeypatch):
    stream = b"".join(PAD + host.encode(kind, seq) for kind, seq in ((m.Kind.HELLO, 5), (m.Kind.BYE, 6),
                                                                      (m.Kind.HELLO, 7)))
    replies = serve_stream(monkeypatch, stream)
    assert [(f.kind, f.seq) for f in replies] == [(0x81, 0), (0x81, 5), (0x86, 6)]  # nothing after BYE


def test_step_answers_what_one_read_brings_and_is_false_once_the_server_ends(monkeypatch):
    """serve() is announce() then step() until False: a caller driving the server from outside (the WebAssembly
    port, whose GC runs between calls into the VM) sees each read's frames answered before the next read."""
    monkeypatch.setattr(board, "gc", FakeGc())
    stream = b"".join(PAD + host.encode(kind, seq) for kind, seq in ((m.Kind.HELLO, 5), (m.Kind.BYE, 6),
                                                                      (m.Kind.HELLO, 7)))
    tx = io.BytesIO()
    server = board.Server(io.BytesIO(stream), tx, CopyKernel())
    server.announce()
    seen, steps = [], 0
    while server.step():
        steps += 1
        seen.extend(f.seq for f in host.Decoder().feed(tx.getvalue()))
        tx.seek(0)
        tx.truncate()
    seen.extend(f.seq for f in host.Decoder().feed(tx.getvalue()))
    assert seen == [0, 5, 6] and steps > 2  # one read per COBS block: several steps per frame
    assert not server.step() and server.problem is None


def test_a_break_piece_stops_the_server(monkeypatch):
    replies = serve_stream(monkeypatch, PAD + host.encode(m.Kind.HELLO, 5) + BREAK + host.encode(m.Kind.HELLO, 6))
    assert [f.seq for f in replies] == [0, 5]


def test_the_block_reader_resynchronises_after_a_corrupted_code_byte(monkeypatch):
    good = host.encode(m.Kind.HELLO, 9, b"\x01" * 300)  # two COBS blocks
    bad = bytearray(host.encode(m.Kind.HELLO, 8, b"\x01" * 300))
    bad[0] = 0xFE  # the first block now claims 253 data bytes: the reader waits past the delimiter
    replies = serve_stream(monkeypatch, bytes(bad) + FLUSH + PAD + good)
    assert [f.seq for f in replies] == [0, 9]


def test_random_and_mutated_requests_never_crash_the_server(server):
    """20,000 requests of random types and payloads (and mutations of valid ones): always one well-formed reply."""
    rng = random.Random(5)
    valid = [(m.Kind.SETUP, m.SETUP.pack(16, 8, 1, 8, 20000, 20, 8, 16)),
             (m.Kind.LOAD, m.LOAD.pack(1, 0) + b"\x02" * 64),
             (m.Kind.RUN, m.RUN.pack(0, 8, 2)), (m.Kind.READ, m.READ.pack(3, 0, 16)), (m.Kind.HELLO, b""),
             (m.Kind.SETUP, m.SETUP.pack(16, 8, 0, 8, 20000, 20, 8, 8)), (m.Kind.STREAM, m.STREAM.pack(0, 8, 0, 8)),
             (m.Kind.STREAM, m.STREAM.pack(0, 8, 8, 8))]
    answered = {kind: 0 for kind in m.Kind}
    for i in range(20_000):
        if i % 2:
            kind, payload = rng.choice(valid)
            payload = bytearray(payload)
            for _ in range(rng.randrange(1, 4)):
                if payload and rng.random() < 0.7:
                    payload[rng.randrange(len(payload))] = rng.randrange(256)
                else:
                    payload = payload[:rng.randrange(len(payload) + 1)]
        else:
            kind, payload = rng.randrange(1, 8), rng.randbytes(rng.randrange(0, 40))
        if kind == m.Kind.BYE:
            continue
        frames = host.Decoder().feed(server.answer(kind, i & 0xFFFF, bytes(payload)))
        assert len(frames) == 1 and frames[0].payload[0] in set(m.Status), (kind, payload)
        if frames[0].payload[0] == m.Status.OK and kind in answered:
            answered[m.Kind(kind)] += 1
    assert answered[m.Kind.STREAM] >= 20 and answered[m.Kind.RUN] >= 20, answered  # both paths reached, answered


def test_server_compiles_with_mpy_cross():
    from mcu.mpy import MpyAbi, compile_board_module

    for module in ("kbench_board", "kbench_framing", "kbench_server"):
        abi = MpyAbi.from_file(compile_board_module(module))
        assert abi.version == 6 and abi.arch == 0


WASM_PROGRAM = """
import sys, io, binascii
sys.path.append('/')
import kbench_server as board

class Kernel:
    def version(self):
        return 4
    def attention(self, q, k, vt, o, oshift, seq, dim, causal, bc, mult, shift, row0=0):
        o[:] = q
        for i in range(len(oshift)):
            oshift[i] = (row0 + i) % 32
        return 1000 + row0
    def state_bytes(self, dim, rows):
        return 32 + rows * 8 * (2 * ((dim + 1) // 2) + 2)
    def stream(self, q, k, vt, o, oshift, state, seq, dim, causal, bc, mult, shift, row0, key0):
        memoryview(o)[:] = memoryview(k)[:len(o)]
        for i in range(len(oshift)):
            oshift[i] = key0 % 32
        return 500 + key0 + len(state)

tx = io.BytesIO()
server = board.Server(io.BytesIO(binascii.unhexlify(REQUESTS)), tx, Kernel())
server.serve()
print('replies', binascii.hexlify(tx.getvalue()).decode())
"""


def test_server_under_real_micropython_gives_the_same_replies(tmp_path, monkeypatch):
    """kbench_server and kbench_framing under the MicroPython WebAssembly port: the host's requests are answered
    byte for byte as CPython's run of the same file answers them (HELLO and the heap figure of SETUP aside: they
    describe the interpreter)."""
    if shutil.which("node") is None or not (WASM_PACKAGE / "micropython.mjs").exists():
        pytest.skip("the MicroPython WebAssembly port is not installed (scripts/setup.sh test installs it with npm)")
    q = bytes(range(1, 97))
    requests = [(m.Kind.SETUP, m.SETUP.pack(12, 4, 1, 4, 20000, 20, 12, 12)), (m.Kind.LOAD, m.LOAD.pack(0, 0) + q),
                (m.Kind.RUN, m.RUN.pack(0, 12, 2)), (m.Kind.READ, m.READ.pack(3, 0, 96)),
                (m.Kind.READ, m.READ.pack(4, 0, 12)), (m.Kind.RUN, m.RUN.pack(0, 12, 2)),
                (m.Kind.READ, m.READ.pack(3, 90, 20)), (77, b"?"), (m.Kind.HELLO, b""),
                (m.Kind.SETUP, m.SETUP.pack(12, 4, 0, 4, 20000, 20, 6, 8)), (m.Kind.LOAD, m.LOAD.pack(1, 0) + q[:64]),
                (m.Kind.STREAM, m.STREAM.pack(0, 6, 8, 6)), (m.Kind.RUN, m.RUN.pack(0, 6, 1)),
                (m.Kind.READ, m.READ.pack(3, 0, 48)), (m.Kind.READ, m.READ.pack(4, 0, 6)),
                (m.Kind.READ, m.READ.pack(4, 0, 7)), (m.Kind.BYE, b"")]
    stream = b"".join(PAD + host.encode(kind, 100 + i, payload) for i, (kind, payload) in enumerate(requests))
    program = tmp_path / "program.py"
    program.write_text(f"REQUESTS = {stream.hex()!r}\n" + WASM_PROGRAM)
    done = subprocess.run(["node", str(ROOT / "tests" / "micropython" / "run.mjs"), str(WASM_PACKAGE),
                           str(program), *(str(BOARD_DIR / f"{name}.py") for name in ("kbench_board", "kbench_framing",
                                                                                      "kbench_server"))],
                          capture_output=True, text=True, timeout=120)
    line = [x for x in done.stdout.splitlines() if x.startswith("replies")]
    assert line, done.stdout + done.stderr
    micro = host.Decoder().feed(bytes.fromhex(line[0].split()[1]))
    cpython = serve_stream(monkeypatch, stream)
    assert [(f.kind, f.seq) for f in micro] == [(0x81, 0)] + [(k | 0x80, 100 + i) for i, (k, _) in enumerate(requests)]
    def comparable(f: host.Frame) -> bytes:  # HELLO and SETUP's free bytes describe the interpreter's heap
        return b"" if f.kind == 0x81 else f.payload[:5] if f.kind == 0x82 else f.payload

    assert [comparable(f) for f in micro] == [comparable(f) for f in cpython]
    assert struct.unpack_from("<B", micro[4].payload)[0] == 0 and micro[4].payload[1:] == q
    assert micro[5].payload == b"\x00" + bytes(range(12))  # the rows' shifts, (row0 + i) % 32 from the stand-in
    assert micro[15].payload == b"\x00" + bytes([8]) * 6  # the STREAM's (key0 8 % 32), for the 6 rows
    assert micro[16].payload[0] == m.Status.E_PAYLOAD  # 7 bytes of a 6-row head's shifts
    assert m.Hello.parse(micro[0].payload).module_version == 4


class _FailsOnce(io.BytesIO):
    """A line whose `fail`-th write raises MemoryError (the heap had no room for a view the write needed)."""

    def __init__(self, fail: int):
        super().__init__()
        self.writes, self.fail = 0, fail

    def write(self, data):
        self.writes += 1
        if self.writes == self.fail:
            raise MemoryError("memory allocation failed")
        return super().write(data)


def test_a_reply_the_heap_cannot_send_is_answered_e_memory_and_the_server_goes_on(monkeypatch):
    # Issue 29: a MemoryError while a reply is made or written is answered E_MEMORY (a frame made at start), never
    # a silent drop nor the end of the server; the host shrinks and the next request is answered as usual.
    monkeypatch.setattr(board, "gc", FakeGc())
    stream = b"".join(PAD + host.encode(kind, seq) for kind, seq in ((m.Kind.HELLO, 5), (m.Kind.HELLO, 6),
                                                                      (m.Kind.BYE, 7)))
    tx = _FailsOnce(fail=2)  # the announcement goes out; the reply to HELLO 5 cannot
    board.Server(io.BytesIO(stream), tx, CopyKernel()).serve()
    replies = host.Decoder().feed(tx.getvalue())
    assert [(f.kind, f.seq) for f in replies] == [(0x81, 0), (0x81, 5), (0x81, 6), (0x86, 7)]
    refused = replies[1].payload
    assert refused[0] == board.E_MEMORY and refused[1:] == board.MEMORY_TEXT
    assert replies[2].payload[0] == board.OK
