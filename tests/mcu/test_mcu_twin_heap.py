"""The board's heads on the twin's real heap (issues 29 and 30): the MicroPython VM with the F407's 100 KB GC heap,
deployed with mcu.deploy and driven by the host's own link code, as a board is.

Issue 29's nine shapes (seven of which failed at SETUP or LOAD under MicroPython's unix port at 100 KB before the
planner read HELLO's largest block) and the main job's MCU heads run `ok` and bit-exact against host/q15.py; LOADs
near the server's reserve are answered; a heap cut into pieces just before the server starts (the twin's prelude hook,
docs/twin.md) is replanned, not lost.
"""

from __future__ import annotations

import dataclasses
import struct

import pytest

pytest.importorskip("cobs", reason="cobs is not installed (pip install -e '.[mcu]')")
pytest.importorskip("mpremote", reason="mpremote is not installed (pip install -e '.[mcu]')")
pytest.importorskip("unicorn", reason="unicorn is not installed (pip install -e '.[mcu]')")

from helpers.board import head_of, mismatches
from helpers.twin import twin_missing
from host.problem import AttentionProblem
from host.q15 import prepare
from mcu import messages as m
from mcu.deploy import deploy
from mcu.head import Session, run_head
from mcu.link import BoardLink
from mcu.twin_process import start_twin

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


#: A prelude (/flash/kbench_prelude.py, run by the twin after the server's modules load and just before it begins)
#: that cuts the heap into free gaps of GAP bytes between kept 64-byte blocks, leaving about TAIL bytes whole: once
#: the port collects (when the call returns to JS), gc.mem_free() counts every gap, and no block beyond the tail's can
#: be had. The tail is that large because the port collects nothing within the call that starts the server: the
#: natmod ballast (taken when the server imports q15attn) and the server's buffers need room there. The kept blocks
#: live in the module until the next start imports it afresh: each case gets a twin of its own.
FRAGMENTING_PRELUDE = """
import gc
GAP, TAIL = 12000, 28000
_kept = []


def run():
    if _kept:
        return
    gaps = []
    while gc.mem_free() > TAIL + GAP:
        gaps.append(bytearray(GAP))
        _kept.append(bytearray(64))
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_fragmented_heap_is_replanned_not_lost():
    """The heap cut into 12,000 B gaps just before the server starts, and the host told (falsely) that its largest
    block is all its free heap, as a host that trusted gc.mem_free() would plan: the board refuses a SETUP for memory
    (no block is that large, nor one per tensor), the host replans smaller, and the head is ok and bit-exact with its
    replans counted. Told the truth (HELLO's largest block), the planner needs fewer replans or none."""
    if twin_missing():
        pytest.skip(twin_missing())
    # seq 190 at dim 32: every query row at once is 4·190·32·2 + 190 = 48,830 B, whose four tensors of 12,160 B each
    # exceed a 12,000 B gap; K and V^T fit the 28,000 B tail, Q and O no gap: refused. Half the rows fit (Q and O of
    # 6,080 B in gaps).
    problem = AttentionProblem(seq=190, dim=32, causal=False)
    quantized = prepare(problem, *problem.inputs())
    expected = head_of(quantized.expected())
    heads = []
    for lie in (True, False):
        with start_twin() as twin:
            deploy(twin.port, 115200, say=lambda line: None)
            (twin.root / "kbench_prelude.py").write_text(FRAGMENTING_PRELUDE)
            with BoardLink(twin.port) as link:
                hello = link.hello = m.Hello.parse(link.request(m.Kind.HELLO))  # measured once the gaps are free
                if lie:
                    link.hello = dataclasses.replace(hello, largest_block=hello.heap_free)
                head = run_head(Session(link, twin.port, "twin"), quantized.params, *quantized.head(0, 0), 1)
        assert head.out.same_bits(expected), mismatches(head.out, expected)
        heads.append(head)
    lied, told = heads
    assert lied.replans >= 1 and set(lied.refused) <= {"SETUP", "LOAD"}, lied
    assert told.replans < lied.replans, (told.replans, lied.replans)


@pytest.mark.timeout(120)
def test_a_prelude_that_prints_is_kept_out_of_the_frames_and_one_that_raises_is_named(fresh_twin):
    """The prelude runs before the line carries frames: a print in it does not break HELLO; an exception in it stops
    the server's start, and the link's error carries its line."""
    from mcu.link_types import ServerMissing

    deploy(fresh_twin.port, 115200, say=lambda line: None)
    prelude = fresh_twin.root / "kbench_prelude.py"
    prelude.write_text("def run():\n    print('the prelude ran')\n")
    with BoardLink(fresh_twin.port) as link:
        assert m.Hello.parse(link.request(m.Kind.HELLO)).heap_total > 0
    prelude.write_text("def run():\n    raise ValueError('a bad prelude')\n")
    with pytest.raises(ServerMissing, match="ValueError: a bad prelude"), BoardLink(fresh_twin.port) as link:
        link.request(m.Kind.HELLO)


def test_a_twin_reached_with_serial_is_labelled_a_twin_not_a_board(deployed, tmp_path):
    """host.compare --serial PTY on the twin's pty: HELLO's firmware string ends '(kbench twin)', so the row's
    timing and sensors are modelled and its device says twin, as with --sim (they read 'measured' and 'board')."""
    from host.results_file import ResultsFile
    from host.sweep import cli as compare

    assert compare.main(["--targets", "mcu", "--serial", deployed, "--seq", "16", "--dim", "8", "--heads", "1",
                         "--causal", "0", "--out", str(tmp_path)]) == 0
    (row,) = ResultsFile(tmp_path / "results.csv").read()
    assert row.status == "ok" and row.timing_source.startswith("modelled") and row.sensors_source == "modelled"
    assert "(twin, 168 MHz" in row.device, row.device
