"""The link's chunk of tensor bytes per frame (mcu/chunks.py) and its use by BoardLink.load and BoardLink.read: the
policy alone (halving under losses to the floor, doubling back on a clean line), the frames a clean line sends (the
board's max_data, as before), a lost LOAD larger than the new chunk cut and sent anew (on the scripted line of
tests/mcu/test_mcu_link_window.py), and a head over the twin at drop = flip = 0.01 per byte (marker `slow`)."""

from __future__ import annotations

import pytest

pytest.importorskip("cobs", reason="cobs is not installed (pip install -e '.[mcu]')")

from host.errors import SpecError
from mcu import messages as m
from mcu.chunks import CHUNK_FLOOR, GROW_AFTER, ChunkPolicy
from mcu.frame import Decoder


def test_the_chunk_halves_per_loss_down_to_the_floor_and_doubles_back_after_passes():
    policy = ChunkPolicy(1024)
    assert policy.size == 1024
    sizes = []
    for _ in range(7):  # 1024 -> 512 -> 256 -> 128 -> 64 -> 32, then the floor holds
        policy.failed(policy.size)
        sizes.append(policy.size)
    assert sizes == [512, 256, 128, 64, 32, 32, 32] and policy.smallest == CHUNK_FLOOR == 32
    grown = []
    for _ in range(5 * GROW_AFTER + 2):  # a clean line: every GROW_AFTER passes double it, up to the ceiling
        policy.passed(policy.size)
        grown.append(policy.size)
    assert grown[GROW_AFTER - 1::GROW_AFTER] == [64, 128, 256, 512, 1024] and grown[-1] == 1024


def test_a_pass_between_losses_restarts_the_count_and_an_old_larger_frame_does_not_halve_again():
    policy = ChunkPolicy(1024)
    policy.failed(1024)
    assert policy.size == 512
    policy.failed(1024)  # cut before the halving its loss (or a sibling's) already caused
    assert policy.size == 512
    policy.passed(512)
    policy.passed(512)
    policy.failed(512)  # two passes, not GROW_AFTER, then a loss: halve
    assert policy.size == 256


def test_a_new_session_keeps_the_chunk_within_its_boards_ceiling():
    policy = ChunkPolicy(1024)
    policy.failed(1024)
    policy.resize(256)
    assert (policy.size, policy.ceiling) == (256, 256)
    policy.resize(1024)
    assert policy.size == 256  # what the line taught stays


def test_a_bad_policy_is_refused_naming_it():
    with pytest.raises(SpecError, match="floor=64, ceiling=32"):
        ChunkPolicy(32, floor=64)


# -- on the scripted line (a real frame server behind it) ---------------------------------------------------------

import test_mcu_link_window  # noqa: E402 - its `line` fixture: a BoardLink to a real server, window 4

line = test_mcu_link_window.line


def data_frames(port) -> list[int]:
    return [len(p) - m.LOAD.size for p in port.loads]


@pytest.fixture
def logged(line):
    """The scripted line, recording each LOAD payload the server received (resends included)."""
    link, port, server = line
    port.loads = []
    real = server.handlers[m.Kind.LOAD]
    server.handlers[m.Kind.LOAD] = lambda payload: port.loads.append(payload) or real(payload)
    return link, port, server


def test_a_clean_line_loads_in_the_boards_largest_frames_as_before(logged):
    link, port, server = logged
    data = bytes((5 * i + 1) & 0xFF for i in range(2 * 64 * 32))  # K of the 64 x 32 head: 4 KB
    link.load(m.Tensor.K, data)
    assert bytes(server.tensors[m.Tensor.K]) == data
    assert data_frames(port) == [1024] * 4 and link.chunks.size == 1024 and link.stats.retries == 0
    assert link.read(m.Tensor.K, len(data)) == data and link.chunks.size == 1024


def test_lost_large_loads_are_cut_smaller_and_arrive_whole(logged):
    """The line loses every LOAD request carrying more than 256 tensor bytes: the chunk halves to 256 and the lost
    frames go again as 256-byte LOADs; each try at 512 after three passes is lost again, so only 256 ever arrive."""
    link, port, server = logged
    real_write = port.write

    def write(data):
        frames = Decoder().feed(data)
        for f in frames:
            if f.kind == m.Kind.LOAD and len(f.payload) - m.LOAD.size > 256:
                port.lose_request.add((f.seq, port.sendings.get(f.seq, 0) + 1))
        return real_write(data)

    port.write = write
    data = bytes((3 * i + 7) & 0xFF for i in range(2 * 64 * 32))
    link.load(m.Tensor.K, data)
    assert bytes(server.tensors[m.Tensor.K]) == data
    assert set(data_frames(port)) == {256} and link.chunks.smallest == 256 and link.chunks.size in (256, 512)


def test_a_read_asks_for_smaller_chunks_when_replies_keep_failing(logged):
    """Every READ reply carrying more than 128 bytes is lost: READ asks again for 128 at a time."""
    link, port, server = logged
    data = bytes(range(256)) * 16
    link.load(m.Tensor.K, data)
    real_write = port.write
    counts = []

    def write(data):
        for f in Decoder().feed(data):
            if f.kind == m.Kind.READ:
                count = m.READ.unpack(f.payload)[2]
                counts.append(count)
                if count > 128:
                    port.lose_reply.add((f.seq, port.sendings.get(f.seq, 0) + 1))
        return real_write(data)

    port.write = write
    assert link.read(m.Tensor.K, len(data)) == data
    assert counts[0] == 1024 and set(counts[-4:]) == {128} and link.chunks.smallest == 128


# -- on the twin, through a noisy line ----------------------------------------------------------------------------

@pytest.mark.slow
def test_a_small_head_gets_through_drop_and_flip_of_one_percent_bit_exact():
    """drop=0.01, flip=0.01 (about 2 % of bytes hit): a 1 KB frame gets through 0.98^1040 ≈ 1e-9 of the time, the
    32-byte floor's exchange 0.30; the head completes in one session (about 40 s here), equal to the model."""
    pytest.importorskip("mpremote", reason="mpremote is not installed (pip install -e '.[mcu]')")
    pytest.importorskip("unicorn", reason="unicorn is not installed (pip install -e '.[mcu]')")
    from host.problem import AttentionProblem
    from helpers.board import head_of, mismatches
    from host.q15 import prepare
    from mcu.deploy import deploy
    from mcu.head import Session, run_head
    from mcu.link import BoardLink
    from mcu.twin_process import start_twin

    problem = AttentionProblem(seq=17, dim=8)
    q, k, v = problem.inputs()
    quantized = prepare(problem, q, k, v)  # at the contract's Bc
    with start_twin("drop=0.01,flip=0.01,seed=1") as twin:
        deploy(twin.port, 115200, say=lambda line: None)
        with BoardLink(twin.port) as link:
            head = run_head(Session(link, twin.port, "twin", twin=twin), quantized.params, *quantized.head(0, 0), 1)
    assert head.out.same_bits(head_of(quantized.expected())), mismatches(head.out, head_of(quantized.expected()))
    assert link.chunks.smallest == CHUNK_FLOOR and link.stats.rejected > 0  # the faults did hit, and shrank it
