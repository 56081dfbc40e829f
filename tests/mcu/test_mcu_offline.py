"""The MCU path's pure host-side logic, run without a link, an emulator or mpremote: the RAM planner (the largest
resident head for a heap, streamed heads beyond it up to the contract's seq, rows spread over chunks) and the twin's
fault injector (what it drops, flips and resets)."""

from __future__ import annotations

import pytest

from host.q15 import BC, SEQ_MAX
from mcu.messages import state_bytes
from mcu.planner import CALL_COST_BYTES, SLACK, DoesNotFit, largest_seq, plan
from mcu.sim.faults import FaultSpec, FaultyLine
from helpers import run_module
from helpers.board import FakeClock

#: The free heap the cases below are worked out for by hand (the re-implemented twin's HELLO before issue 30; the
#: VM twin's is mcu.planner.TWIN_HEAP_FREE, in pieces).
HEAP_FREE = 92_178


# -- the planner --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dim", [1, 32, 59, 64, 256])
def test_the_largest_resident_seq_fits_and_one_more_is_streamed(dim):
    seq = largest_seq(dim, 89_067, 8192)
    resident = plan(seq, dim, 89_067, 8192, BC)
    assert not resident.streamed and resident.need <= 89_067 - 8192 - SLACK
    streamed = plan(seq + 1, dim, 89_067, 8192, BC)
    assert streamed.streamed and streamed.keys % BC == 0 and streamed.need <= streamed.budget


@pytest.mark.parametrize("dim", [1, 8, 59, 64, 128])
def test_every_seq_up_to_the_contract_fits_the_twins_heap(dim):
    """Streamed heads cover the rest: a sample of seq up to 32768 (every power of two, its neighbours, the awkward
    ones), each plan within the heap and its chunks covering every query row."""
    seqs = sorted({1, 17, 97, 1025, SEQ_MAX} | {n + d for e in range(1, 16) for n in [1 << e] for d in (-1, 0, 1)}
                  - {SEQ_MAX + 1})
    for seq in seqs:
        layout = plan(seq, dim, HEAP_FREE, 8192, BC)
        # what SETUP allocates: the key chunk's K and V^T, Q and O for the rows, a shift byte per row, and the state
        # when streamed
        state = state_bytes(dim, layout.rows) if layout.streamed else 0
        assert layout.need == 2 * dim * (2 * layout.keys + 2 * layout.rows) + layout.rows + state <= layout.budget, seq
        assert layout.keys == seq or layout.keys % BC == 0, seq
        assert sum(n for _, n in layout.row_blocks()) == seq and layout.chunks * layout.rows >= seq


def test_a_streamed_plan_is_the_cheapest_that_fits():
    """At seq 4096, d 64 on the twin's heap: the state of a row (8·(64 + 2) = 528 B), its Q and O (256 B) and its
    shift (1 B) cost more heap than a key's K and V^T (256 B), so larger key chunks take rows away; the planner's
    choice costs no more link traffic (K and V^T per query chunk, plus CALL_COST_BYTES per STREAM) than any other key
    chunk size on the Bc grid."""
    chosen = plan(4096, 64, HEAP_FREE, 8192, BC)
    room = chosen.budget

    def cost(keys):
        rows = min(4096, (room - 256 * keys - 32) // (256 + 1 + 528))
        chunks = -(-4096 // rows)
        return chunks * (4 * 4096 * 64 + -(-4096 // keys) * CALL_COST_BYTES)

    assert chosen.keys % BC == 0
    assert cost(chosen.keys) == min(cost(keys) for keys in range(BC, 4096, BC) if (room - 256 * keys - 32) >= 785)


def test_a_head_that_cannot_fit_even_streamed_names_the_limit():
    # 2·256·(2·64 + 2·1) K, V^T, Q and O, + 1 shift, + 32 + 8·(256 + 2) state = 66,560 + 1 + 2,096 = 68,657
    with pytest.raises(DoesNotFit, match=r"seq=1000 dim=256 needs 68657 bytes of board heap even streamed \(64 keys "
                                         r"of K and V\^T at Bc=64, one query row and its state\); the board has 10784 "
                                         r"\(20000 free - 8192 reserve - 1024 slack\)"):
        plan(1000, 256, 20_000, 8192, BC)


def test_plan_spreads_rows_evenly_over_the_fewest_chunks():
    layout = plan(601, 32, 89_067, 8192)
    blocks = layout.row_blocks()
    assert layout.chunks > 1 and sum(n for _, n in blocks) == 601 and blocks[0][0] == 0
    assert all(a + n == b for (a, n), (b, _) in zip(blocks, blocks[1:]))
    assert layout.need <= layout.budget and max(n for _, n in blocks) - min(n for _, n in blocks) <= layout.chunks
    assert plan(64, 32, 89_067, 8192).chunks == 1


def test_planner_cli_prints_the_largest_resident_seq_and_the_plans():
    done = run_module("mcu.planner", "--heap-free", "100000", "--reserve", "0", "--dim", "32,64", "--seq", "512,32768")
    assert done.returncode == 0, done.stderr
    assert f"| 32 | {largest_seq(32, 100000, 0)} | 512 | " in done.stdout
    assert f"| 64 | {largest_seq(64, 100000, 0)} | 32768 | " in done.stdout and "streamed: " in done.stdout


def test_planner_cli_exits_1_after_the_table_when_a_head_does_not_fit():
    done = run_module("mcu.planner", "--heap-free", "20000", "--dim", "32,256", "--seq", "512")
    assert done.returncode == 1, done.stderr
    # dim 256: (10784 - (4·256 + 1)) // (4·256) = 9 resident keys; streamed, 2·256·(2·64 + 2) + 1 + 32 + 8·258
    assert "| 256 | 9 | 512 | does not fit: seq=512 dim=256 needs 68657 bytes" in done.stdout
    # dim 32: (10784 - 129) // 128 = 83; seq 512 streams, and the heads that fit are still printed
    assert f"| 32 | 83 | 512 | {plan(512, 32, 20_000, 8192, BC).describe()} |" in done.stdout
    assert done.stderr.strip().splitlines() == ["kbench: 1 of 2 heads do not fit the board's heap (seq=512 "
                                                "dim=256): see their rows"]


def test_planner_cli_refuses_a_reserve_that_leaves_no_heap():
    # 9000 free - 8192 reserve - 1024 slack < 1 byte: the arguments contradict each other, nothing is planned
    done = run_module("mcu.planner", "--heap-free", "9000")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == ("kbench: error: --reserve 8192 leaves no board heap of --heap-free 9000 (the "
                                   "planner also keeps 1024 B of slack); allowed: --reserve below 7976")


# -- faults -------------------------------------------------------------------------------------------------------

def test_fault_spec_parses_and_refuses_with_the_bad_value():
    assert FaultSpec.parse("drop=0.01,reset=5,seed=2") == FaultSpec(drop=0.01, reset=5, seed=2)
    with pytest.raises(ValueError, match="drop=0.9 is out of range; allowed: 0..0.5"):
        FaultSpec.parse("drop=0.9")
    with pytest.raises(ValueError, match="'bogus' is not a fault; allowed: drop, flip"):
        FaultSpec.parse("bogus=1")
    with pytest.raises(ValueError, match=r"drop is given twice \(drop=0.01 and 'drop=0.02'\); give it once"):
        FaultSpec.parse("drop=0.01,drop=0.02")
    with pytest.raises(ValueError, match="item '' is not NAME=VALUE"):
        FaultSpec.parse("drop=0.01,,flip=0.01")
    assert FaultSpec.parse("") == FaultSpec()
    # a value that does not parse names what the fault takes (it said only "is not a number")
    with pytest.raises(ValueError, match=r"reset='1e3' is not a whole number \(reset: every N-th frame"):
        FaultSpec.parse("reset=1e3")
    with pytest.raises(ValueError, match=r"drop='0.1;flip=0.1' is not a number \(drop, flip, delay: a probability "
                                         r"0..0.5; delay_s: 0..5 seconds\); items are separated by ','"):
        FaultSpec.parse("drop=0.1;flip=0.1")


def test_faulty_line_injects_only_while_a_server_holds_the_line():
    active = [False]
    resets = []
    line = FaultyLine(FaultSpec(drop=0.1, flip=0.1, reset=3, seed=1), lambda: active[0],
                      lambda: resets.append(1) or True)
    data = bytes(range(1, 256)) * 40
    assert line.inbound(data) == data and line.outbound(data) == data
    active[0] = True
    mangled = line.outbound(data)
    assert 0.85 * len(data) < len(mangled) < 0.95 * len(data)
    assert 0.08 < line.counts["flipped"] / len(data) < 0.12
    line.inbound(b"\x00" * 300)  # padding zeros do not end frames
    for _ in range(7):
        line.inbound(b"\x01\x02\x00")  # seven frames: a reset after the third and the sixth
    assert len(resets) == 2 == line.counts["resets"]


# -- the link's waits, on a fake line and a fake clock ----------------------------------------------------------

class StallingPort:
    """A port that answers every write with the first half of a frame and then stays silent; each empty read
    waits the read slice (on the fake clock)."""

    def __init__(self, clock: FakeClock):
        self.clock = clock
        self.pending = b""
        self.in_waiting = 0
        self.reads = 0

    def write(self, data: bytes) -> None:
        self.pending = b"\x05\x11\x22"  # the start of a frame that never ends

    def read(self, size: int) -> bytes:
        self.reads += 1
        data, self.pending = self.pending, b""
        if not data:
            self.clock.now += 0.05  # READ_SLICE_S
        return data


def test_timeouts_refuse_a_non_positive_wait_naming_it():
    from mcu.link import Timeouts

    with pytest.raises(ValueError, match=r"^Timeouts reply=0, inter_byte=-1 out of range; allowed: > 0 seconds$"):
        Timeouts(reply=0, inter_byte=-1)


def test_a_frame_that_stops_midway_is_resent_after_the_inter_byte_timeout_not_the_deadline(monkeypatch):
    from mcu import link as link_module
    from mcu.link import BoardLink, Timeouts
    from mcu.messages import Kind

    clock = FakeClock()
    monkeypatch.setattr(link_module, "time", clock)
    port = StallingPort(clock)
    link = BoardLink("fake", retries=2, timeouts=Timeouts(reply=60.0, inter_byte=0.5))
    link._transport = type("Transport", (), {"serial": port})()
    with pytest.raises(link_module.LinkError, match=r"no reply to HELLO \(seq \d+\) after 3 attempts of 60 s"):
        link.request(Kind.HELLO)
    assert link.stats.retries == 2
    # each attempt: the half frame, then silence until 0.5 s passed (10 or 11 slices of 0.05 s, as the float sum
    # rounds), not until the 60 s deadline (1200 slices)
    assert 3 * (1 + 10) <= port.reads <= 3 * (1 + 11)


# -- resuming a head ----------------------------------------------------------------------------------------------

class ResettingLink:
    """A scripted link whose board resets at the first RUN or STREAM of every session: records SETUP's rows."""

    def __init__(self):
        from types import SimpleNamespace

        self.hello = SimpleNamespace(heap_free=HEAP_FREE, reserve=8192, max_data=1024, clock_hz=168_000_000,
                                     machine="board", firmware="a board", largest_block=HEAP_FREE)
        self.timeouts = SimpleNamespace(reply=2.0)
        self.setups = []

    def restart(self):
        pass

    def request(self, kind, payload=b"", timeout=None):
        from mcu import messages as m
        from mcu.link_types import SessionLost

        if kind == m.Kind.SETUP:
            self.setups.append(m.SETUP.unpack(payload)[6])
            return bytes(m.SETUP_REPLY.size)  # status OK, need and free 0
        raise SessionLost("scripted: the board reset")

    def load(self, tensor, data):
        pass


@pytest.mark.parametrize("seq, dim", [(512, 64), (4096, 64), (200, 16)])
def test_after_a_session_without_progress_the_chunks_halve_from_the_last_ones(seq, dim):
    """Streamed (512 and 4096 at d 64: the plan's 86 and 92 rows) or resident (200 at d 16: one chunk of 200), each
    session after one that completed nothing asks for half the rows of the one before."""
    import numpy as np

    from host.errors import LinkError
    from host.q15 import Q15Params
    from mcu.head import HEAD_ATTEMPTS, Session, run_head

    link = ResettingLink()
    x = np.zeros((seq, dim), dtype=np.int16)
    with pytest.raises(LinkError, match=f"{HEAD_ATTEMPTS} sessions in a row completed no chunk"):
        run_head(Session(link, "fake", "fake"), Q15Params(seq, dim, False, 32, 23170, 24), x, x, x, 1)
    first = plan(seq, dim, HEAP_FREE, 8192, 32).rows
    assert link.setups == [max(1, first >> n) for n in range(HEAD_ATTEMPTS)]
