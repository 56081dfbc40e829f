"""The board's heads on the twin's real heap (issues 29 and 30): the MicroPython VM with the F407's 100 KB GC heap,
deployed with mcu.deploy and driven by the host's own link code, as a board is.

Issue 29's nine shapes (seven of which failed at SETUP or LOAD under MicroPython's unix port at 100 KB before the
planner read HELLO's largest block) and the main job's MCU heads run `ok` and bit-exact against host/q15.py; LOADs
near the server's reserve are answered. (A heap cut into pieces just before the server starts is still tested in
the WebAssembly harness, tests/mcu/test_mcu_wasm_board.py.)
"""

from __future__ import annotations

import struct

import pytest

pytest.importorskip("cobs", reason="cobs is not installed (pip install -e '.[mcu]')")
pytest.importorskip("mpremote", reason="mpremote is not installed (pip install -e '.[mcu]')")
pytest.importorskip("unicorn", reason="unicorn is not installed (pip install -e '.[mcu]')")

from helpers.board import head_of, mismatches
from host.problem import AttentionProblem
from host.q15 import prepare
from mcu import messages as m
from mcu.deploy import deploy
from mcu.head import Session, run_head
from mcu.link import BoardLink

#: The shapes issue 29 saw fail under MicroPython's unix port at 100 KB (7 of 9 with .mpy): (seq, dim, causal).
ISSUE_SHAPES = [(512, 64, False), (512, 64, True), (1000, 32, False), (300, 32, True), (647, 32, False),
                (323, 64, True), (2000, 16, True), (256, 128, False), (100, 8, False)]
#: The main job's MCU heads (python -m host.compare's default: seq 128, 256, 512 at dim 64, causal both).
MAIN_SHAPES = [(128, 64, False), (128, 64, True), (256, 64, False), (256, 64, True)]
#: The F407's GC heap, which the twin's VM has (mcu/sim/vm_process.py); HELLO's total is this less the GC's tables.
BOARD_HEAP = 102_400


def head_on(port: str, seq: int, dim: int, causal: bool):
    """One seeded head through mcu.head.run_head at the contract's Bc, planned from the board's HELLO: (HeadResult,
    the model's Q15Out)."""
    problem = AttentionProblem(seq=seq, dim=dim, causal=causal)
    quantized = prepare(problem, *problem.inputs())
    with BoardLink(port) as link:
        head = run_head(Session(link, port, "twin"), quantized.params, *quantized.head(0, 0), 1)
    return head, head_of(quantized.expected())


@pytest.fixture(scope="module")
def deployed(twin):
    deploy(twin.port, 115200, say=lambda line: None)
    return twin.port


def test_hello_reports_the_boards_heap(deployed):
    """heap_total: 102,400 B less the GC's tables (allocation and finaliser bits for each 16 B block, about 2 %).
    Free once collected: what the server, the board's modules and the twin's own boot code leave, more than half."""
    with BoardLink(deployed) as link:
        collected = m.Hello.parse(link.request(m.Kind.HELLO))  # after a step: the start's garbage is gone
    assert 100_000 <= collected.heap_total <= BOARD_HEAP, collected
    assert collected.heap_total // 2 < collected.heap_free < collected.heap_total - 10_000, collected
    assert collected.largest_block <= collected.heap_free, collected


@pytest.mark.slow
@pytest.mark.timeout(120)  # 0.3-4 s each on the 2-core VM (reports/issue-30/twin_heap_shapes.txt)
@pytest.mark.parametrize("seq, dim, causal", ISSUE_SHAPES + MAIN_SHAPES,
                         ids=[f"{s}x{d}{'c' if c else ''}" for s, d, c in ISSUE_SHAPES + MAIN_SHAPES])
def test_issue_shapes_run_ok_and_bit_exact_on_the_twins_heap(deployed, seq, dim, causal):
    """Each of issue 29's shapes and the main job's: ok and bit-exact, never out of memory (run_head would raise); a
    head whose K and V^T cannot be resident streams; a replan is allowed (the row would say so)."""
    head, expected = head_on(deployed, seq, dim, causal)
    assert head.out.same_bits(expected), mismatches(head.out, expected)
    assert (head.cycles > 0).all()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_loads_with_the_heap_near_the_reserve_are_answered(deployed):
    """Tensors that leave the heap within 12 KB of the server's reserve (as near as the heap's pieces allow): every
    1 KB LOAD of them is answered (the framing allocates nothing per frame) and READ gives the bytes back."""
    with BoardLink(deployed) as link:
        hello = m.Hello.parse(link.request(m.Kind.HELLO))
        dim = 32
        # a resident head (rows = seq) of all the free heap but the reserve and 1 KB, in four blocks where no one
        # block is that large; a tenth smaller each time the heap's pieces cannot hold it
        seq, refused = (hello.heap_free - hello.reserve - 1024) // (8 * dim), 0
        while True:
            reply = link.request(m.Kind.SETUP, m.SETUP.pack(seq, dim, 0, 16, 1, 1, seq, seq))
            if reply[0] != m.Status.E_MEMORY or refused == 8:
                break
            seq, refused = seq * 9 // 10, refused + 1
        need, free_after = struct.unpack_from("<II", m.check_status(m.Kind.SETUP, reply))
        # Q, K, V^T and O of seq rows and keys, and a shift byte per row
        assert need == 8 * seq * dim + seq and free_after - hello.reserve < 12_288, (seq, need, free_after, hello)
        kinds = (m.Tensor.Q, m.Tensor.K, m.Tensor.VT)
        tensors = {t: bytes((i * 7 + t) & 0xFF for i in range(2 * seq * dim)) for t in kinds}
        for tensor, data in tensors.items():  # 1 KB LOADs, windowed as the link sends them
            link.load(tensor, data)
        for tensor, data in tensors.items():
            assert link.read(tensor, len(data)) == data, tensor
