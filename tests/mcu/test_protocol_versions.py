"""Protocol 6 (issue 32: SETUP's heads, grouped query heads on one K/V head), q15attn 4 (issue 31, Q15 contract v2:
every output row with its own shift) against their older versions, each refusal one line naming both versions and
the re-deploy (docs/protocol.md, "Versions"): the host refuses a server of an older protocol before it parses the
rest of its HELLO, and stops it; the server refuses a q15attn older than 4 at SETUP, so it never calls it; the MCU
target refuses such a q15attn before a row runs; and mcu.deploy says what to do when it finds one."""

from __future__ import annotations

import io

import pytest

pytest.importorskip("cobs", reason="cobs is not installed (pip install -e '.[mcu]')")  # mcu.frame's COBS

from helpers.board import CopyKernel, FakeGc, board_module
from mcu import frame as host
from mcu import messages as m
from mcu.link import BoardLink, ServerMissing

board = board_module("kbench_server")  # by its name on the board, as the board's modules import each other


def ask(server, kind: int, payload: bytes = b"", seq: int = 7) -> host.Frame:
    frames = host.Decoder().feed(server.answer(kind, seq, payload))
    assert len(frames) == 1 and frames[0].kind == kind | m.REPLY and frames[0].seq == seq
    return frames[0]


def hello(module: int) -> m.Hello:
    """A HELLO of this protocol from a board whose q15attn is `module` (0: none)."""
    return m.Hello(m.PROTOCOL, 6, 168_000_000, 90_000, 102_400, 8192, 1024, module, "board", "fw", "4", 8, 60_000)


def test_the_versions_are_contract_v2s_with_grouped_heads():
    assert (m.PROTOCOL, board.PROTOCOL, m.MODULE_VERSION, board.MODULE_MIN, board.SERVER_VERSION) == (6, 6, 4, 4, "5")


@pytest.mark.parametrize("old", [
    # protocol 1's HELLO reply has no window byte: the host must not parse past the protocol
    m.HELLO_REPLY.pack(0, 1, 7942, 168_000_000, 89_756, 102_400, 8192, 1024, 1) + b"\x01a\x01b\x01c",
    # protocol 4's (issue 29, contract v1: no output row shifts) has this one's layout, window and largest block
    m.HELLO_REPLY.pack(0, 4, 7942, 168_000_000, 89_756, 102_400, 8192, 1024, 3) + b"\x01a\x01b\x013"
    + bytes((8,)) + (60_000).to_bytes(4, "little"),
    # protocol 5's (issue 31) has this one's layout too, but its server takes no SETUP heads: a grouped head would
    # be refused (or, without the byte, computed for one query head only)
    m.HELLO_REPLY.pack(0, 5, 7942, 168_000_000, 89_756, 102_400, 8192, 1024, 4) + b"\x01a\x01b\x014"
    + bytes((8,)) + (60_000).to_bytes(4, "little"),
], ids=["protocol 1", "protocol 4", "protocol 5"])
def test_a_server_of_an_older_protocol_is_refused_before_its_hello_is_parsed(old):
    """The host reads the protocol first and refuses in one line naming both protocols and the re-deploy."""
    writes = []
    port = type("Port", (), {"write": lambda self, data: writes.append(data)})()
    link = BoardLink("ttyACM0")
    link._transport = type("Transport", (), {"serial": port})()
    with pytest.raises(ServerMissing, match=rf"^ttyACM0: kbench_server speaks protocol {old[1]}; this host speaks "
                                            rf"{m.PROTOCOL} \(redeploy: python -m mcu.deploy --serial ttyACM0\)$"):
        link._accept(old)
    assert link.hello is None and writes and writes[-1].endswith(b"\x00\x03\x03\x00")  # and the server stopped


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_q15attn_older_than_contract_v2_is_refused_naming_both_versions(monkeypatch, version):
    """A q15attn below version 4 computes contract v1 (no row shifts): HELLO says which it is, and SETUP, resident or
    streamed, is refused in one line naming both versions and the re-deploy, so no kernel call is ever made."""
    monkeypatch.setattr(board, "gc", FakeGc())
    kernel = CopyKernel(version=version)
    server = board.Server(io.BytesIO(), io.BytesIO(), kernel)
    assert m.Hello.parse(ask(server, m.Kind.HELLO).payload).module_version == version
    for n, keys in enumerate((40, 16)):
        body = ask(server, m.Kind.SETUP, m.SETUP.pack(40, 4, 0, 8, 23170, 24, 40, keys), seq=10 + n).payload
        text = body[1:].decode()
        assert body[0] == m.Status.E_MODULE and "\n" not in text
        assert text == (f"q15attn is version {version}; this server ({board.SERVER_VERSION}) needs version "
                        f"{m.MODULE_VERSION} or later (Q15 contract v2: output row shifts): re-deploy with python -m "
                        "mcu.deploy")
    with pytest.raises(m.BoardRefused, match="E_STATE: RUN before SETUP"):
        m.RunReply.parse(ask(server, m.Kind.RUN, m.RUN.pack(0, 4, 1), seq=20).payload)
    assert kernel.calls == 0

@pytest.mark.parametrize("version", [4, 5])
def test_a_q15attn_of_version_4_or_later_is_taken(monkeypatch, version):
    monkeypatch.setattr(board, "gc", FakeGc())
    server = board.Server(io.BytesIO(), io.BytesIO(), CopyKernel(version=version))
    m.check_status(m.Kind.SETUP, ask(server, m.Kind.SETUP, m.SETUP.pack(40, 4, 0, 8, 23170, 24, 40, 40)).payload)
    assert m.RunReply.parse(ask(server, m.Kind.RUN, m.RUN.pack(0, 4, 1), seq=8).payload).cycles == (1000,)


@pytest.mark.parametrize("module", [1, 3])
def test_the_host_refuses_a_q15attn_of_contract_v1_naming_both_versions(monkeypatch, module):
    """A server of this protocol whose q15attn is older than version 4 (contract v1: no row shifts): the MCU target
    does not open the session, in one line naming both versions and the re-deploy; the link is closed."""
    from host.errors import UnavailableError
    from mcu import link, target

    closed = []

    class Link:
        def __init__(self, port, baud):
            self.port = port

        def open(self):
            return hello(module)

        def close(self):
            closed.append(self.port)

    monkeypatch.setattr(link, "BoardLink", Link)
    with pytest.raises(UnavailableError) as caught, target.open_session(target.Settings(serial="/dev/ttyACM0")):
        pytest.fail("the session opened")
    assert str(caught.value) == (f"/dev/ttyACM0: q15attn on the board is version {module}; this host needs version "
                                 f"{m.MODULE_VERSION} (Q15 contract v2: output row shifts): re-deploy with python -m "
                                 "mcu.deploy --serial /dev/ttyACM0")
    assert closed == ["/dev/ttyACM0"]
    assert hello(0).module_refusal("p").startswith("p: q15attn is not on the board")
    assert hello(m.MODULE_VERSION).module_refusal("p") == hello(m.MODULE_VERSION + 1).module_refusal("p") == ""


def test_deploy_says_when_the_boards_q15attn_is_older_than_the_host_needs():
    from mcu.deploy import stale_module_note

    assert f"older than the version {m.MODULE_VERSION} this host and server need" in stale_module_note("version 3")
    assert stale_module_note(f"version {m.MODULE_VERSION}") == stale_module_note("missing (no module) 3") == ""


def test_a_refusal_of_the_link_names_the_port_once(monkeypatch):
    """The link's messages begin with the port: the MCU target does not prefix it again (the review saw
    '/dev/pts/0: /dev/pts/0: kbench_server speaks protocol 4; ...'); a message without it gets it."""
    from host.errors import UnavailableError
    from mcu import link, target
    from mcu.link_types import ServerMissing

    for raised, shown in ((f"/dev/ttyACM0: kbench_server speaks protocol 4; this host speaks {m.PROTOCOL}",
                           f"/dev/ttyACM0: kbench_server speaks protocol 4; this host speaks {m.PROTOCOL}"),
                          ("no reply", "/dev/ttyACM0: no reply")):
        class Link:
            def __init__(self, port, baud):
                self.port = port

            def open(self, message=raised):
                raise ServerMissing(message)

            def close(self):
                pass

        monkeypatch.setattr(link, "BoardLink", Link)
        with pytest.raises(UnavailableError) as caught, target.open_session(target.Settings(serial="/dev/ttyACM0")):
            pytest.fail("the session opened")
        assert str(caught.value) == shown
