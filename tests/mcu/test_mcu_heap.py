"""The board's heap as the host and the server see it (issue 29): HELLO's largest block (protocol 4) found by trying,
the planner's budget bounded by it, and SETUP's tensors in one block (views of it), or each in its own where the heap
has no block that large. The server runs under CPython here with a bytearray that fails as a fragmented heap would;
tests/mcu/test_mcu_twin_heap.py runs it on the twin's real MicroPython heap."""

from __future__ import annotations

import pytest

from helpers.board import FakeGc, board_module
from mcu import frame as host
from mcu import messages as m
from mcu import planner

board = board_module("kbench_server")
board_facts = board_module("kbench_board")  # the heap search and the tensors' one block


class FragmentedHeap:
    """bytearray for the server module: any single block above `largest` bytes raises MemoryError, as on a heap whose
    free space is in pieces; counts the tries."""

    def __init__(self, largest: int):
        self.largest = largest
        self.tries: list[int] = []

    def __call__(self, n=0):
        if isinstance(n, int):
            self.tries.append(n)
            if n > self.largest:
                raise MemoryError("memory allocation failed, allocating %d bytes" % n)
        return bytearray(n)


@pytest.mark.parametrize("largest", [0, 15, 16, 17, 1000, 36_864, 61_440, 79_000])
def test_largest_block_finds_the_block_to_16_bytes(monkeypatch, largest):
    heap = FragmentedHeap(largest)
    monkeypatch.setattr(board_facts, "bytearray", heap, raising=False)
    found = board_facts.largest_block(79_000)
    assert largest - 16 <= found <= largest  # never more than the heap gives
    assert len(heap.tries) <= 13  # a binary search: log2(79,000 / 16) + 1 tries


def hello(monkeypatch, largest: int) -> m.Hello:
    monkeypatch.setattr(board, "gc", FakeGc(free=79_000))
    server = board.Server(None, None, None, "")
    monkeypatch.setattr(board_facts, "bytearray", FragmentedHeap(largest), raising=False)
    reply = server.answer(m.Kind.HELLO, 1, b"")
    return m.Hello.parse(host.Decoder().feed(reply + b"\x00")[0].payload)


def test_hello_says_the_largest_block_beside_the_free_heap(monkeypatch):
    said = hello(monkeypatch, 36_864)
    assert said.protocol == m.PROTOCOL == 6 and said.heap_free == 79_000
    assert 36_864 - 16 <= said.largest_block <= 36_864


def test_hello_refuses_a_largest_block_beyond_the_free_heap_and_reads_a_refusal_first(monkeypatch):
    from host.errors import LinkError

    monkeypatch.setattr(board, "gc", FakeGc(free=79_000))
    reply = board.Server(None, None, None, "").answer(m.Kind.HELLO, 1, b"")
    payload = bytearray(host.Decoder().feed(reply + b"\x00")[0].payload)
    payload[-4:] = (79_001).to_bytes(4, "little")
    with pytest.raises(LinkError, match="largest_block 79001 with heap_free 79000; allowed: 0..79000"):
        m.Hello.parse(bytes(payload))
    with pytest.raises(m.BoardRefused, match="E_MEMORY"):  # a short refusal is a refusal, not a short reply
        m.Hello.parse(b"\x04")


def test_the_planner_plans_within_the_largest_block_less_its_margin():
    free, reserve = 79_000, 8192
    unbounded = planner.plan(512, 32, free, reserve, 64)
    bounded = planner.plan(512, 32, free, reserve, 64, largest=36_864)
    assert unbounded.need > 36_864 - planner.BLOCK_MARGIN  # the free heap alone would plan a block the heap lacks
    assert bounded.need <= 36_864 - planner.BLOCK_MARGIN < unbounded.need
    assert planner.budget(free, reserve, 36_864) == 36_864 - planner.BLOCK_MARGIN
    assert planner.budget(free, reserve, 79_000) == free - reserve - planner.SLACK  # a whole heap: free bounds it
    # the largest resident seq at dim 32: K and V^T (4·seq·32 bytes) and one query row (Q and O, 128, and its shift,
    # 1) within the block
    assert planner.largest_seq(32, free, reserve, 36_864) == (36_864 - planner.BLOCK_MARGIN - 129) // 128


def test_a_head_that_fits_no_block_whole_is_planned_a_block_per_tensor():
    """256×128 on the twin's heap at Bc 64 (58,288 B free, largest block 29,144 B, as the twin's HELLO said): one Bc
    block of K and V^T is 2·2·64·128 = 32,768 B, more than the block less its margin (28,632 B), so no plan fits one
    block; SETUP then gives each tensor its own (kbench_board.carve), so the free heap less reserve and slack
    (49,072 B) bounds the sum and 28,632 B each tensor: K of 64 keys is 16,384 B (128 keys, 32,768 B, would not fit),
    and (49,072 - 32,768 - 32) // (4·128 + 1 + 8·130) = 10 query rows: 26 chunks of 10 rows, 64 keys at a time."""
    chosen = planner.plan(256, 128, 58_288, 8192, 64, largest=29_144)
    assert (chosen.rows, chosen.chunks, chosen.keys, chosen.split) == (10, 26, 64, True)
    assert chosen.need == m.tensor_bytes(256, 128, 10, 64) <= chosen.budget == 58_288 - 8192 - planner.SLACK
    assert "a block per tensor" in chosen.describe()
    assert not planner.plan(256, 128, 58_288, 8192, 64, largest=58_288).split  # a block that holds it whole


def test_a_head_that_fits_no_block_says_the_block_bounded_it():
    with pytest.raises(planner.DoesNotFit, match=r"its largest block 2000 - 512 margin; 79000 free - 8192 reserve"):
        planner.plan(4096, 256, 79_000, 8192, 64, largest=2000)


def test_the_planner_cli_refuses_a_block_larger_than_the_free_heap(capsys):
    assert planner.main(["--heap-free", "50000", "--largest-block", "50001"]) == 2
    assert "--largest-block 50001 is more than --heap-free 50000; allowed: 513..50000" in capsys.readouterr().err
    assert planner.main(["--largest-block", "512"]) == 2  # the margin would leave nothing of the block
    assert "largest-block=512 is out of range; allowed: 513.." in capsys.readouterr().err
    assert planner.main(["--heap-free", "1000", "--reserve", "0"]) == 2  # no reserve helps: name the heap
    assert "--heap-free 1000 leaves no board heap whatever the reserve" in capsys.readouterr().err


def setup(server, seq, dim, rows, keys, bc=16, request=2):
    reply = server.answer(m.Kind.SETUP, request, m.SETUP.pack(seq, dim, 0, bc, 1, 1, rows, keys))
    return host.Decoder().feed(reply + b"\x00")[0].payload


class StreamKernel:
    """What SETUP asks of q15attn for a streamed head."""

    def version(self):
        return 4

    def state_bytes(self, dim, rows):
        return m.state_bytes(dim, rows)

    def stream(self, *args):
        raise AssertionError("not called here")


def test_setup_puts_the_tensors_in_one_block_state_first(monkeypatch):
    monkeypatch.setattr(board, "gc", FakeGc(free=90_000))
    server = board.Server(None, None, StreamKernel(), "")
    assert setup(server, 100, 16, 10, 32)[0] == m.Status.OK
    q, k, vt, o, oshift, state = server.tensors
    assert all(isinstance(t, memoryview) for t in server.tensors)
    arena = state.obj
    assert all(t.obj is arena for t in (q, k, vt, o, oshift))  # views of one bytearray
    assert [len(t) for t in server.tensors] == [320, 1024, 1024, 320, 10, m.state_bytes(16, 10)]
    assert len(arena) == m.tensor_bytes(100, 16, 10, 32)
    q[:] = b"\x01" * 320
    oshift[:] = b"\x02" * 10
    assert bytes(k[:4]) == bytes(4) and bytes(state[-4:]) == bytes(4)  # the views do not overlap
    assert bytes(o[-4:]) == bytes(4) and bytes(arena[-10:]) == b"\x02" * 10  # the shifts are the block's end


def test_setup_on_a_heap_without_one_large_block_gives_each_tensor_its_own(monkeypatch):
    monkeypatch.setattr(board, "gc", FakeGc(free=90_000))
    server = board.Server(None, None, None, "")
    monkeypatch.setattr(board_facts, "bytearray", FragmentedHeap(20_000), raising=False)
    assert setup(server, 300, 32, 300, 300)[0] == m.Status.OK  # 77,100 B: four blocks of 19,200 and the shifts, 300
    assert [type(t) for t in server.tensors[:5]] == [bytearray] * 5 and server.tensors[5] is None
    assert [len(t) for t in server.tensors[:5]] == [19_200] * 4 + [300]
    monkeypatch.setattr(board_facts, "bytearray", FragmentedHeap(10_000), raising=False)
    body = setup(server, 300, 32, 300, 300, request=3)  # a new request: the same seq would get the reply kept
    assert body[0] == m.Status.E_MEMORY
    assert "tensors need 77100 bytes; allocation failed with 90000 free, the largest block" in body[1:].decode()
