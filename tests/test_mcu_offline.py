"""The MCU path's pure host-side logic, run without a link, an emulator or mpremote: the RAM planner (the largest
head for a heap, rows spread over chunks) and the twin's fault injector (what it drops, flips and resets)."""

from __future__ import annotations

import pytest

from mcu.planner import SLACK, DoesNotFit, largest_seq, plan
from mcu.sim.faults import FaultSpec, FaultyLine
from tests.conftest import run_module


# -- the planner --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dim", [1, 32, 59, 64, 256])
def test_largest_seq_fits_and_one_more_does_not(dim):
    seq = largest_seq(dim, 89_067, 8192)
    assert plan(seq, dim, 89_067, 8192).need <= 89_067 - 8192 - SLACK
    with pytest.raises(DoesNotFit, match=f"largest seq that fits at dim {dim}: {seq}$"):
        plan(seq + 1, dim, 89_067, 8192)


def test_plan_spreads_rows_evenly_over_the_fewest_chunks():
    layout = plan(601, 32, 89_067, 8192)
    blocks = layout.row_blocks()
    assert layout.chunks > 1 and sum(n for _, n in blocks) == 601 and blocks[0][0] == 0
    assert all(a + n == b for (a, n), (b, _) in zip(blocks, blocks[1:]))
    assert layout.need <= layout.budget and max(n for _, n in blocks) - min(n for _, n in blocks) <= layout.chunks
    assert plan(64, 32, 89_067, 8192).chunks == 1


def test_planner_cli_prints_the_largest_seq():
    done = run_module("mcu.planner", "--heap-free", "100000", "--reserve", "0", "--dim", "32,64")
    assert done.returncode == 0, done.stderr
    assert f"| 32 | {largest_seq(32, 100000, 0)} |" in done.stdout and f"| 64 | {largest_seq(64, 100000, 0)} |" in done.stdout


# -- faults -------------------------------------------------------------------------------------------------------

def test_fault_spec_parses_and_refuses_with_the_bad_value():
    assert FaultSpec.parse("drop=0.01,reset=5,seed=2") == FaultSpec(drop=0.01, reset=5, seed=2)
    with pytest.raises(ValueError, match="drop=0.9 is out of range; allowed: 0..0.5"):
        FaultSpec.parse("drop=0.9")
    with pytest.raises(ValueError, match="'bogus=1' is not NAME=VALUE"):
        FaultSpec.parse("bogus=1")


def test_faulty_line_injects_only_while_a_server_holds_the_line():
    active = [False]
    resets = []
    line = FaultyLine(FaultSpec(drop=0.1, flip=0.1, reset=3, seed=1), lambda: active[0], lambda: resets.append(1) or True)
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

class FakeClock:
    """time.monotonic and time.sleep for mcu.link: time moves only when the fake port waits or the link sleeps."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


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
