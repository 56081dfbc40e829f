"""Decode and grouped-query heads on the board twin (issue 32; docs/twin.md, "Decode and grouped heads"): a block of
q_len queries against a KV cache of seq keys, the contract's rows seq - q_len .. seq - 1 with the bottom-right causal
mask, and G query heads on one K/V head sharing its K and V^T on the board (protocol 6's SETUP heads). Every head is
bit-exact (values and row shifts) with host/q15.py, and, as a second witness that does not go through
`Quantized.row0`, with the same rows of the square head whose last q_len queries they are. The link is tapped where
the host writes to the line: a grouped problem's K and V^T cross it once per K/V head, an ungrouped one's once per
query head."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("cobs", reason="cobs is not installed (pip install -e '.[mcu]')")
pytest.importorskip("mpremote", reason="mpremote is not installed (pip install -e '.[mcu]')")
pytest.importorskip("unicorn", reason="unicorn is not installed (pip install -e '.[mcu]')")

from helpers.planner_heap import cap_planner_heap
from host import q15
from host.problem import AttentionProblem
from host.results_file import ResultsFile
from host.sweep import cli as compare
from mcu import frame, planner, target
from mcu import messages as m
from mcu.deploy import deploy
from mcu.head import Session, run_head
from mcu.link import BoardLink

#: (seq, q_len, dim, heads, kv_heads, causal): q_len 1, 3 and 17 against seq 17 and 97, dim 59 (and 8), K/V heads 2
#: of 6 and 1 of 4, causal and not; q_len = seq (17 of 17) is the square head through the same path.
SHAPES = [(17, 1, 59, 6, 2, True), (17, 3, 59, 4, 1, False), (17, 17, 59, 6, 2, True), (97, 1, 59, 4, 1, True),
          (97, 3, 59, 6, 2, False), (97, 17, 59, 6, 2, True), (97, 17, 8, 4, 1, False), (97, 3, 59, 1, 1, True)]
#: The heap the streamed tests let the planner see (as tests/mcu/test_mcu_stream.py's), beside the reserve and slack:
#: one Bc block of K and V^T at dim 8 (4·8·64 = 2,048 B) and 3 query heads of 2 rows each, a state header (32 B) per
#: head and per row Q, O, shift and state (4·8 + 1 + 8·(8 + 2) = 113 B): 2,822 B, less than a seq 97 head's K and V^T
#: whole with one row (4·97·8 + 33 = 3,137 B), so it streams. One head alone would take (2,822 - 2,080) // 113 = 6 rows.
SMALL_HEAP = planner.SERVER_RESERVE + planner.SLACK + 4 * 8 * q15.BC + 3 * (32 + 2 * 113)


@pytest.fixture(scope="module")
def deployed(twin):
    deploy(twin.port, 115200, say=lambda line: None)
    return twin.port


@pytest.fixture
def small_heap(monkeypatch):
    cap_planner_heap(monkeypatch, SMALL_HEAP)


def run_problem(port: str, problem: AttentionProblem, tap: list | None = None):
    """Every K/V head of `problem` (batch 1) through mcu.head.run_head, as mcu.target runs them: (the Q15Out of all
    query heads, the quantised inputs, the HeadResults). `tap` collects every byte the host writes to the line."""
    quantized = q15.prepare(problem, *problem.inputs())
    group = problem.heads // problem.kv_head_count
    out = q15.Q15Out(np.empty(problem.shape[1:], dtype=np.int16), np.empty(problem.shape[1:-1], dtype=np.uint8))
    heads = []
    with BoardLink(port) as link:
        if tap is not None:
            write = link._write
            link._write = lambda data: (tap.append(bytes(data)), write(data))[1]
        for kv in range(problem.kv_head_count):
            block = quantized.q[0, kv * group:(kv + 1) * group]  # (G, q_len, d): the query heads on K/V head kv
            head = run_head(Session(link, port, "twin"), quantized.params, block, quantized.k[0, kv],
                            quantized.v[0, kv], 1)
            out.o[kv * group:(kv + 1) * group], out.shift[kv * group:(kv + 1) * group] = head.out
            heads.append(head)
    return out, quantized, heads


def square_rows(quantized, h: int) -> q15.Q15Out:
    """Query head h's rows by the square head: its q_len queries put in the last rows of a head of seq queries
    (the other rows zero; rows are independent), the model run from row 0, the last q_len rows kept."""
    params = quantized.params
    q_len = quantized.q.shape[2]
    group = quantized.q.shape[1] // quantized.k.shape[1]
    full = np.zeros((params.seq, params.dim), dtype=np.int16)
    full[params.seq - q_len:] = quantized.q[0, h]
    square = q15.attention_q15(full, quantized.k[0, h // group], quantized.v[0, h // group], params)
    return q15.Q15Out(square.o[params.seq - q_len:], square.shift[params.seq - q_len:])


def check_bits(got: q15.Q15Out, quantized) -> None:
    expected = quantized.expected()
    expected = q15.Q15Out(expected.o[0], expected.shift[0])
    assert got.same_bits(expected), got.first_difference(expected)
    for h in range(quantized.q.shape[1]):
        witness = square_rows(quantized, h)
        assert q15.Q15Out(got.o[h], got.shift[h]).same_bits(witness), (h, witness.first_difference(got))


@pytest.mark.parametrize("seq, q_len, dim, heads, kv_heads, causal", SHAPES)
def test_decode_and_grouped_heads_are_bit_exact(deployed, seq, q_len, dim, heads, kv_heads, causal):
    problem = AttentionProblem(seq=seq, dim=dim, heads=heads, causal=causal, q_len=q_len, kv_heads=kv_heads)
    got, quantized, result = run_problem(deployed, problem)
    check_bits(got, quantized)
    group = heads // kv_heads
    # resident (K and V^T of seq 97 at dim 59: 22,892 B, within the twin's largest block): K and V^T once per K/V head
    assert all(head.keys == seq and head.traffic.kv == 4 * seq * dim for head in result)
    assert all(head.traffic.q == 2 * group * q_len * dim for head in result)


@pytest.mark.parametrize("q_len, causal", [(1, True), (3, False), (17, True)])
def test_streamed_grouped_decode_is_bit_exact_and_streams_the_keys_once(deployed, small_heap, q_len, causal):
    """Streamed (one Bc block of keys on the board at a time): the group's 3 query heads take one stream of K and
    V^T per chunk of rows (3 heads × 2 rows fit the small heap). At q_len 3: 2 streams of 3 heads, against 3 of one
    head (6 rows); at 17: 9 chunks of 2 rows against 3 heads × 3 chunks of 6, a tie the planner gives to the larger
    block."""
    seq, dim = 97, 8
    problem = AttentionProblem(seq=seq, dim=dim, heads=6, causal=causal, q_len=q_len, kv_heads=2)
    got, quantized, result = run_problem(deployed, problem)
    check_bits(got, quantized)
    for head in result:
        assert head.keys == q15.BC < seq and head.heads == 3 and head.rows == min(q_len, 2)
        # each chunk of rows takes every key up to its last row's (causal: row seq - q_len + r + its rows - 1)
        ends = [seq - q_len + min(q_len, r + head.rows) if causal else seq for r in range(0, q_len, head.rows)]
        assert head.traffic.kv == 4 * dim * sum(ends), ends


def kv_bytes_on_the_wire(written: list[bytes]) -> int:
    """K and V^T bytes in the LOAD frames the host wrote, decoded from the bytes themselves."""
    decoder, total = frame.Decoder(), 0
    for f in decoder.feed(b"".join(written)):
        if f.kind == m.Kind.LOAD and f.payload[0] in (m.Tensor.K, m.Tensor.VT):
            total += len(f.payload) - m.LOAD.size
    return total


@pytest.mark.parametrize("streamed", [False, True])
def test_a_grouped_problem_sends_each_kv_head_once_an_ungrouped_one_per_query_head(deployed, monkeypatch, streamed):
    """Counted from the line: heads 4 on one K/V head send K and V^T (4·seq·d B) once; the same problem with a K/V
    head per query head sends four K/V heads, once each: four times the bytes."""
    if streamed:
        cap_planner_heap(monkeypatch, SMALL_HEAP)
    seq, dim = 97, 8
    counts = {}
    for kv_heads in (1, 4):
        written = []
        problem = AttentionProblem(seq=seq, dim=dim, heads=4, causal=False, q_len=1, kv_heads=kv_heads)
        got, quantized, _ = run_problem(deployed, problem, written)
        check_bits(got, quantized)
        counts[kv_heads] = kv_bytes_on_the_wire(written)
    assert counts == {1: 4 * seq * dim, 4: 4 * 4 * seq * dim}


def test_a_decode_row_of_the_sweep_states_its_link_bytes(tmp_path, keep_signals):
    """host.compare's grouped decode row: ok, bit-exact, and its message says the K/V head's bytes were sent once,
    shared by its 2 query heads (K and V^T: 4·97·59 = 22,892 B)."""
    assert compare.main(["--targets", "mcu", "--sim", "--seq", "97", "--dim", "59", "--q-len", "3", "--heads", "4",
                         "--kv-heads", "2", "--causal", "1", "--out", str(tmp_path)]) == 0
    [row] = ResultsFile(tmp_path / "results.csv").read()
    assert row.status == "ok" and row.bit_exact is True and (row.q_len, row.kv_heads) == (3, 2), row.message
    assert "K and V^T 22,892 B sent (1x the head's 22,892 B, shared by its 2 query heads)" in row.message


def test_supports_every_shape_of_the_contract():
    assert target.supports(AttentionProblem(seq=2048, dim=64, heads=32, q_len=1, kv_heads=8)) == (True, "")
    runs, why = target.supports(AttentionProblem(seq=64, dim=8, heads=256, kv_heads=1))
    assert not runs and why == "256 query heads per K/V head is past the board protocol's 255 (mcu.messages.HEADS_MAX)"
