"""The planner and the frame server for decode and grouped heads (issue 32), without a twin: the plans of a decode
block and of a group of query heads on one K/V head, by hand; the replans that shrink a group's block; SETUP's heads
(protocol 6) through the server under CPython with the host build of the C kernel, bit-exact with host/q15.py."""

from __future__ import annotations

import io

import numpy as np
import pytest

pytest.importorskip("cobs", reason="cobs is not installed (pip install -e '.[mcu]')")  # mcu.frame's COBS

from helpers.board import FakeGc, board_module
from host import q15
from host.errors import TargetError
from mcu import frame as host
from mcu import messages as m
from mcu import planner, q15_c

board = board_module("kbench_server")

#: A heap like the deployed twin's (docs/twin.md, "Measured", before protocol 6): 61,040 B free, largest block 30,520 B.
TWIN_FREE, TWIN_LARGEST = 61_040, 30_520


def test_a_grouped_decode_head_streams_its_kv_once_for_the_group():
    """seq 2048, d 64, q_len 1, 4 query heads on the K/V head. Budget: min(61,040 - 8,192 - 1,024, 30,520 - 512) =
    30,008 B. K and V^T whole (4·2048·64 = 524,288 B) do not fit, so it streams; a key chunk of 128 takes 32,768 B,
    more than the budget, so 64 keys (16,384 B). Per head: a state header of 32 B and per row Q, O, shift and state
    4·64 + 1 + 8·(64 + 2) = 785 B: 4 heads of 1 row take 16,384 + 4·(32 + 785) = 19,652 B."""
    chosen = planner.plan(2048, 64, TWIN_FREE, 8192, 64, largest=TWIN_LARGEST, queries=1, group=4)
    assert (chosen.keys, chosen.heads, chosen.rows, chosen.chunks, chosen.need) == (64, 4, 1, 1, 19_652)
    assert chosen.kv_sends == 1 and chosen.need == m.tensor_bytes(2048, 64, 1, 64, heads=4)
    # the link: K and V^T once (524,288 B), each query head's Q and O once (4 · (2·64 + 2·64 + 1) = 1,028 B)
    assert chosen.link_bytes() == 524_288 + 1_028


def test_a_resident_group_takes_every_head_in_one_block():
    """seq 97, d 59: K and V^T 4·97·59 = 22,892 B fit the 30,008 B budget; a row takes 4·59 + 1 = 237 B, so
    (30,008 - 22,892) // 237 = 30 rows fit: 3 heads × 3 rows (2,133 B) in one RUN; K and V^T go once."""
    chosen = planner.plan(97, 59, TWIN_FREE, 8192, 64, largest=TWIN_LARGEST, queries=3, group=3)
    assert (chosen.keys, chosen.heads, chosen.rows, chosen.chunks, chosen.kv_sends) == (97, 3, 3, 1, 1)
    assert chosen.need == 22_892 + 9 * 237
    # 17 rows of 3 heads (51) do not fit one RUN: 3 heads × 10 rows do, so 17 rows go in 2 chunks of 9 (2 RUNs),
    # against a head at a time with its 17 rows (3 RUNs); K and V^T stay on the board for both chunks
    wide = planner.plan(97, 59, TWIN_FREE, 8192, 64, largest=TWIN_LARGEST, queries=17, group=3)
    assert (wide.heads, wide.rows, wide.chunks, wide.kv_sends) == (3, 9, 2, 1)
    assert wide.need == 22_892 + 27 * 237


def test_replans_shrink_rows_then_the_group_block_then_keys():
    chosen = planner.plan(2048, 64, TWIN_FREE, 8192, 64, largest=TWIN_LARGEST, queries=1, group=4)
    steps = [chosen]
    while steps[-1] is not None:
        steps.append(planner.smaller(steps[-1], TWIN_FREE, 8192, 64, TWIN_LARGEST))
    assert [(p.heads, p.rows) for p in steps[:3]] == [(4, 1), (2, 1), (1, 1)]
    assert all(later.need < earlier.need for earlier, later in zip(steps, steps[1:-1]))


def test_the_planner_refuses_more_queries_than_keys():
    with pytest.raises(TargetError, match=r"^queries=18 is out of range; allowed: 1..17 \(seq\)$"):
        planner.plan(17, 8, TWIN_FREE, 8192, queries=18)
    with pytest.raises(TargetError, match=r"^group=256 is out of range; allowed: 1..255 query heads per K/V head$"):
        planner.plan(17, 8, TWIN_FREE, 8192, group=256)


class StreamKernel:
    """q15attn's stream() as the host build of the C kernel runs it, in place on the server's buffers."""

    def version(self):
        return m.MODULE_VERSION

    def state_bytes(self, dim, rows):
        return q15_c.state_bytes(dim, rows)

    def stream(self, q, k, vt, o, oshift, state, seq, dim, causal, bc, mult, shift, row0, key0):
        import ctypes

        views = [np.frombuffer(x, dtype=t) for x, t in ((q, "<i2"), (k, "<i2"), (vt, "<i2"), (state, "<i8"),
                                                          (o, "<i2"), (oshift, "u1"))]
        params = q15_c.Params(seq, dim, causal, bc, mult, shift)
        status = q15_c.library().q15attn_stream(ctypes.byref(params), row0, views[0].size // dim, key0,
                                                views[1].size // dim, *views)
        if status:
            raise ValueError(f"q15attn_stream status {status}")
        return 100


def ask(server, kind: int, payload: bytes = b"", seq: int = 7) -> bytes:
    [reply] = host.Decoder().feed(server.answer(kind, seq, payload))
    assert reply.kind == kind | m.REPLY and reply.seq == seq
    return reply.payload


@pytest.mark.parametrize("causal", [False, True])
def test_setup_heads_runs_each_query_head_on_the_same_keys(monkeypatch, causal):
    """3 query heads of 3 decode rows (positions 94..96 of seq 97) on one K/V head, streamed 32 keys at a time: one
    LOAD of each key chunk, one STREAM for the three heads (cycles: 3 × the stand-in's 100), each head's O and shifts
    those of the model."""
    monkeypatch.setattr(board, "gc", FakeGc())
    server = board.Server(io.BytesIO(), io.BytesIO(), StreamKernel())
    seq, dim, q_len, heads, keys = 97, 7, 3, 3, 32
    rng = np.random.default_rng(32)
    q = rng.integers(-32768, 32768, (heads, q_len, dim)).astype("<i2")
    k, v = (rng.integers(-32768, 32768, (seq, dim)).astype("<i2") for _ in range(2))
    params = q15.Q15Params(seq, dim, causal, 16, 23170, 24)
    body = m.check_status(m.Kind.SETUP, ask(server, m.Kind.SETUP, m.setup_payload(
        seq, dim, causal, 16, 23170, 24, q_len, keys, heads)))
    assert m.SETUP_REPLY.unpack(b"\x00" + body)[1] == m.tensor_bytes(seq, dim, q_len, keys, heads)
    n = iter(range(8, 1 << 16))
    m.check_status(m.Kind.LOAD, ask(server, m.Kind.LOAD, m.LOAD.pack(m.Tensor.Q, 0) + q.tobytes(), next(n)))
    for key0 in range(0, seq, keys):
        key1 = min(seq, key0 + keys)
        ask(server, m.Kind.LOAD, m.LOAD.pack(m.Tensor.K, 0) + k[key0:key1].tobytes(), next(n))
        ask(server, m.Kind.LOAD, m.LOAD.pack(m.Tensor.VT, 0) + np.ascontiguousarray(v[key0:key1].T).tobytes(), next(n))
        reply = m.RunReply.parse(ask(server, m.Kind.STREAM, m.STREAM.pack(seq - q_len, q_len, key0, key1 - key0),
                                     next(n)), m.Kind.STREAM)
        assert reply.cycles == (3 * 100,)
    o = np.frombuffer(m.check_status(m.Kind.READ, ask(server, m.Kind.READ, m.READ.pack(
        m.Tensor.O, 0, 2 * heads * q_len * dim), next(n))), dtype="<i2").reshape(heads, q_len, dim)
    shifts = np.frombuffer(m.check_status(m.Kind.READ, ask(server, m.Kind.READ, m.READ.pack(
        m.Tensor.OSHIFT, 0, heads * q_len), next(n))), dtype=np.uint8).reshape(heads, q_len)
    for h in range(heads):
        assert q15.Q15Out(o[h], shifts[h]).same_bits(q15.attention_q15(q[h], k, v, params, seq - q_len)), h


def test_setup_refuses_heads_zero_in_one_line(monkeypatch):
    monkeypatch.setattr(board, "gc", FakeGc())
    server = board.Server(io.BytesIO(), io.BytesIO(), StreamKernel())
    payload = m.SETUP.pack(17, 8, 0, 16, 23170, 24, 1, 17) + b"\x00"
    with pytest.raises(m.BoardRefused, match=r"E_PAYLOAD: heads=0; allowed: 1..255 query heads on one K/V head$"):
        m.check_status(m.Kind.SETUP, ask(server, m.Kind.SETUP, payload))
    with pytest.raises(m.BoardRefused, match=r"E_PAYLOAD: SETUP payload of 15 bytes; expected 13, or 14 with heads$"):
        m.check_status(m.Kind.SETUP, ask(server, m.Kind.SETUP, payload + b"\x01", seq=8))


def test_the_most_rows_one_stream_takes():
    """The deployed twin's HELLO under protocol 6 (reports/issue-32/mcu/heap.txt): 59,328 B free, largest 29,664 B.
    Budget min(59,328 - 8,192 - 1,024, 29,664 - 512) = 29,152 B; 64 keys of K and V^T at d 64 take 16,384 B, the
    state's header 32 B, and a row 785 B: (29,152 - 16,416) // 785 = 16 rows. At d 128 the keys alone take 32,768 B,
    more than the block: with a block per tensor, min((50,112 - 32,800) // 1,553, 29,152 // 256,
    (29,152 - 32) // 1,040) = 11 rows (a row: 4·128 + 1 + 8·130 = 1,553 B, its state 1,040 B)."""
    assert planner.stream_rows(64, 59_328, 8192, 64, 29_664) == 16
    assert planner.stream_rows(128, 59_328, 8192, 64, 29_664) == 11
