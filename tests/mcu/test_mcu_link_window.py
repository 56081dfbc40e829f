"""Windowed LOADs (mcu.link.BoardLink.requests) on a scripted line, byte for byte and without an emulator or a pty:
the board side is the real frame server (mcu/board/kbench_server.py) answering each request as it arrives, and the
line between them loses, corrupts or withholds exactly the frames a test names. What is checked: at most `window`
requests are ever in flight; a lost request or a lost reply costs a resend of that frame alone, answered from the
server's cache (nothing written twice while the reply is kept); the data written is the data sent; a server that
allows fewer than the host asks for gets fewer; and a reset under a window is SessionLost (a server of another protocol
is refused before its HELLO is parsed: tests/mcu/test_protocol_versions.py). Then the twin's side of a window, its
serial line: answers held back while requests are queued go out together, and a board out of bytes pulls the line
itself. The same exchanges over the twin, with a noisy line and resets, are in tests/mcu/test_mcu_link.py and
tests/mcu/test_mcu_recovery.py."""

from __future__ import annotations

import io

import pytest

pytest.importorskip("cobs", reason="cobs is not installed (pip install -e '.[mcu]')")  # mcu.frame's COBS

from helpers.board import CopyKernel, FakeClock, FakeGc, board_module
from mcu import frame as host
from mcu import link as link_module
from mcu import link_window
from mcu import messages as m
from mcu.link import FLUSH, BoardLink, SessionLost

board_framing = board_module("kbench_framing")  # the board's modules by their names on the board
board = board_module("kbench_server")

READ_SLICE_S = link_module.READ_SLICE_S  # what an empty read of the real port waits


class ScriptedLine:
    """A serial port whose far end is a kbench_server.Server. Each request frame the host writes reaches the
    server unless `lose_request` names its (seq, sending); each reply goes back unless `lose_reply` names it, or
    with one byte flipped when `flip_reply` does; a seq in `reset_at` makes the board print a reset banner instead of
    answering it. Replies are read one frame per read, so the host sees them in order and one at a time; a read with
    nothing to give waits READ_SLICE_S on the fake clock."""

    def __init__(self, server: board.Server, clock: FakeClock):
        self.server = server
        self.clock = clock
        self.decoder = board_framing.Decoder()
        self.sendings: dict[int, int] = {}  # seq -> how often the host sent it
        self.lose_request: set[tuple[int, int]] = set()
        self.lose_reply: set[tuple[int, int]] = set()
        self.flip_reply: set[tuple[int, int]] = set()
        self.reset_at: set[int] = set()
        self.replies: list[bytes] = []  # bytes the host has yet to read, one entry per reply
        self.writes: list[list[int]] = []  # the seqs of the frames in each write
        self.answered: set[int] = set()  # seqs whose reply the host has read
        self.in_flight_max = 0  # requests sent and not yet answered, at most, as the host sees them

    # the part of pyserial's Serial that mcu.link uses

    @property
    def in_waiting(self) -> int:
        return len(self.replies[0]) if self.replies else 0

    def read(self, size: int) -> bytes:
        if not self.replies:
            self.clock.now += READ_SLICE_S
            return b""
        data = self.replies.pop(0)
        self.answered.update(f.seq for f in host.Decoder().feed(data))
        return data

    def write(self, data: bytes) -> int:
        seqs = []
        for kind, seq, payload in self.decoder.feed(data):
            sending = self.sendings.get(seq, 0) + 1
            self.sendings[seq] = sending
            seqs.append(seq)
            if (seq, sending) in self.lose_request:
                continue
            if seq in self.reset_at:
                self.replies.append(b"\r\nMPY: soft reboot\r\nraw REPL; CTRL-B to exit\r\n>")
                continue
            reply = b"\x00" + self.server.answer(kind, seq, payload)
            if (seq, sending) in self.lose_reply:
                continue
            if (seq, sending) in self.flip_reply:
                reply = reply[:3] + bytes([reply[3] ^ 0x10]) + reply[4:]
            self.replies.append(reply)
        self.writes.append(seqs)
        self.in_flight_max = max(self.in_flight_max, len(set(self.sendings) - self.answered))
        return len(data)


@pytest.fixture
def line(monkeypatch):
    """A BoardLink (window 4) whose port is a ScriptedLine to a server that has done SETUP for a 64 x 32 head."""
    clock = FakeClock()
    monkeypatch.setattr(link_module, "time", clock)
    monkeypatch.setattr(link_window, "time", clock)  # the windowed engine's part of the link
    monkeypatch.setattr(board, "gc", FakeGc())
    server = board.Server(io.BytesIO(), io.BytesIO(), CopyKernel())
    port = ScriptedLine(server, clock)
    link = BoardLink("scripted", window=4)
    link._transport = type("Transport", (), {"serial": port})()
    link.hello = m.Hello.parse(host.decode_body(server.answer(m.Kind.HELLO, 0, b"")[:-1]).payload)
    m.check_status(m.Kind.SETUP, link.request(m.Kind.SETUP, m.SETUP.pack(64, 32, 0, 32, 20000, 20, 1, 64)))
    port.writes.clear()
    port.sendings.clear()
    return link, port, server


def pieces(n: int = 10, size: int = 400) -> tuple[list[bytes], bytes]:
    """n LOAD payloads for consecutive `size`-byte pieces of K, and the bytes they carry."""
    data = bytes((7 * i + 3) & 0xFF for i in range(n * size))
    return [m.LOAD.pack(m.Tensor.K, i * size) + data[i * size:(i + 1) * size] for i in range(n)], data


def load(link, payloads) -> None:
    for reply in link.requests(m.Kind.LOAD, payloads):
        m.check_status(m.Kind.LOAD, reply)


def resent(port: ScriptedLine) -> list[int]:
    return sorted(seq for seq, count in port.sendings.items() for _ in range(count - 1))


def test_a_clean_window_keeps_four_in_flight_and_sends_each_frame_once(line):
    link, port, server = line
    payloads, data = pieces()
    load(link, payloads)
    assert bytes(server.tensors[m.Tensor.K][:len(data)]) == data
    assert port.writes[0] == sorted(port.sendings)[:4]  # the first write fills the window
    assert port.in_flight_max == 4 and resent(port) == [] and link.stats.retries == 0
    assert len(server.replies) == board.WINDOW  # the server keeps its own window's worth, whatever the host uses


@pytest.mark.parametrize("losing", ["lose_request", "lose_reply", "flip_reply"])
def test_a_frame_lost_mid_window_is_resent_alone(line, losing):
    """The third LOAD's request, or its reply, is lost (or its reply corrupted) the first time: the replies to the
    fourth and later come first, so the host resends the third at once, and only the third."""
    link, port, server = line
    payloads, data = pieces()
    first = link._seq + 1
    getattr(port, losing).add((first + 2, 1))
    writes = []
    real_load = server.handlers[m.Kind.LOAD]
    server.handlers[m.Kind.LOAD] = lambda payload: writes.append(payload[1:5]) or real_load(payload)
    load(link, payloads)
    assert bytes(server.tensors[m.Tensor.K][:len(data)]) == data
    assert resent(port) == [first + 2] and link.stats.retries == 1
    assert len(writes) == len(payloads)  # the resend was answered from the cache, or was the first to arrive
    assert port.in_flight_max <= 4
    assert link._transport.serial.clock.now < 1.0  # no timeout waited for: the later replies gave it away


def test_the_last_reply_of_a_window_lost_is_resent_alone_after_the_reply_timeout(line):
    link, port, server = line
    payloads, data = pieces(6)
    last = link._seq + 6
    port.lose_reply.add((last, 1))
    load(link, payloads)
    assert resent(port) == [last] and bytes(server.tensors[m.Tensor.K][:len(data)]) == data
    assert link.timeouts.reply <= port.clock.now < link.timeouts.reply + 0.5


def test_a_window_lost_whole_is_resent_after_the_timeout_and_only_what_was_lost(line):
    link, port, server = line
    payloads, data = pieces(6)
    first = link._seq + 1
    for seq in range(first, first + 4):  # the first window never reaches the board
        port.lose_request.add((seq, 1))
    load(link, payloads)
    assert resent(port) == list(range(first, first + 4)) and bytes(server.tensors[m.Tensor.K][:len(data)]) == data
    assert port.writes[1][:4] == list(range(first, first + 4))  # resent together, in order, once the wait ran out


def test_a_frame_lost_every_time_fails_naming_its_seq(line):
    link, port, server = line
    payloads, _ = pieces(6)
    doomed = link._seq + 2
    for sending in range(1, 10):
        port.lose_reply.add((doomed, sending))
    with pytest.raises(link_module.LinkError, match=rf"no reply to LOAD \(seq {doomed}\) after 6 attempts"):
        load(link, payloads)
    assert port.sendings[doomed] == 6


def test_resends_start_with_flush(line, monkeypatch):
    link, port, server = line
    payloads, _ = pieces(3)
    port.lose_reply.add((link._seq + 1, 1))
    wrote = []
    real_write = port.write
    monkeypatch.setattr(port, "write", lambda data: wrote.append(data) or real_write(data))
    load(link, payloads)
    assert [data.startswith(FLUSH) for data in wrote] == [False, True]


def test_the_server_window_caps_the_hosts(line):
    link, port, server = line
    link.hello = m.Hello(**{**vars(link.hello), "window": 1})
    payloads, data = pieces(5)
    load(link, payloads)
    assert all(len(seqs) == 1 for seqs in port.writes) and port.in_flight_max == 1
    assert bytes(server.tensors[m.Tensor.K][:len(data)]) == data


def test_a_reset_under_a_window_is_session_lost(line):
    link, port, server = line
    payloads, _ = pieces(8)
    port.reset_at.add(link._seq + 3)
    with pytest.raises(SessionLost, match="the board reset during LOAD"):
        load(link, payloads)


def test_only_load_goes_windowed(line):
    link, port, server = line
    reads = [m.READ.pack(m.Tensor.K, 16 * i, 16) for i in range(6)]
    for reply in link.requests(m.Kind.READ, reads):
        assert m.check_status(m.Kind.READ, reply) == bytes(16)
    assert all(len(seqs) == 1 for seqs in port.writes) and port.in_flight_max == 1


def test_a_window_outside_its_range_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"^window=0 is out of range; allowed: 1..255 LOAD requests in flight$"):
        BoardLink("port", window=0)
