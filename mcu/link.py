"""The host's session with the board's frame server, over a serial port (a board, or the twin's pty).

`BoardLink.open()` connects with mpremote's `SerialTransport`, stops any frame server a previous host left running
(the break piece 0x00 0x03 0x03 0x00), enters the raw REPL, starts `kbench_server` with one raw-paste exec and
waits for its HELLO. From then on the line carries frames only and is read through pyserial directly (mpremote's
output follower would stop at the first 0x04). `request()` sends one request and returns its reply's payload,
resending the same frame (same sequence number, so the server answers from its cache rather than redoing the work)
after a timeout or a corrupted reply, with exponential backoff, up to `retries` times. A board that reset under the
session (its raw REPL banner seen among the bytes) raises `SessionLost` at once; `restart()` starts a new server.
`close()` says BYE and leaves the board at the raw REPL prompt. docs/protocol.md has the byte-level exchange.
"""

from __future__ import annotations

import contextlib
import io
import random
import re
import time
from dataclasses import dataclass, field

from host.errors import LinkError, UnavailableError
from mcu.frame import Decoder, Frame, encode
from mcu.messages import REPLY, Hello, Kind

RAW_BANNER = b"raw REPL; CTRL-B to exit\r\n"
BREAK = b"\x00\x03\x03\x00"  # ends a running frame server; in a REPL, Ctrl-C twice
PAD = b"\x00"  # sent before every frame: whatever noise came before, the frame starts clean
#: Sent before a retry and before BREAK: the server reads a COBS block at a time, and a corrupted code byte can leave
#: it waiting for up to 253 more bytes; zeros complete that read and resynchronise it (empty pieces are ignored).
FLUSH = b"\x00" * 254
START_SERVER = "import kbench_server\nkbench_server.serve()\n"
READ_SLICE_S = 0.05  # pyserial read timeout while frames flow: how often a wait checks its deadline
MPREMOTE_READ_S = 1.0  # pyserial read timeout while mpremote drives the raw REPL (it reads fixed byte counts)
RAW_PROMPT_AFTER_COMMAND = b"\x04\x04>"  # stdout end, no traceback, then the raw REPL prompt
START_ATTEMPTS = 4
SERVER_ENDED = re.compile(rb"\x04((?:Traceback|[A-Za-z]*Error|[A-Za-z]*Exception)[^\x04]*)\x04>")
GARBAGE_KEPT = 4096  # non-frame bytes kept to recognise a reset board or a traceback


class SessionLost(LinkError):
    """The frame server is gone (the board reset, or the server could not start); `restart()` may recover."""


class ServerMissing(LinkError):
    """The board has no kbench_server to start (not deployed): no retry helps."""


@dataclass(frozen=True)
class Timeouts:
    """Seconds: a reply's wait (RUN adds its compute estimate), starting the server, and a quiet line."""

    reply: float = 2.0
    start: float = 10.0
    quiet: float = 0.3


@dataclass
class LinkStats:
    """What the session did: frames, bytes each way, retries, session restarts and wall time per request type."""

    frames: int = 0
    bytes_out: int = 0
    bytes_in: int = 0
    retries: int = 0
    restarts: int = 0
    rejected: int = 0
    seconds: dict = field(default_factory=dict)

    def add_time(self, kind: Kind, seconds: float) -> None:
        self.seconds[kind.name] = self.seconds.get(kind.name, 0.0) + seconds


class BoardLink:
    """One host session with the frame server; use as a context manager or call open()/close()."""

    def __init__(self, port: str, baud: int = 115200, retries: int = 5, timeouts: Timeouts = Timeouts()):
        self.port = port
        self.baud = baud
        self.retries = retries
        self.timeouts = timeouts
        self.stats = LinkStats()
        self.hello: Hello | None = None
        self._transport = None
        self._decoder = Decoder()
        self._garbage = bytearray()
        self._seq = random.randrange(0x10000)

    # -- session ----------------------------------------------------------------------------------------------

    def __enter__(self) -> "BoardLink":
        self.open()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def open(self) -> Hello:
        try:
            from mpremote.transport_serial import SerialTransport
        except ImportError as exc:
            raise UnavailableError(f"mpremote is not installed ({exc}): pip install -e '.[mcu]'") from None
        try:
            self._transport = SerialTransport(self.port, baudrate=self.baud)
        except Exception as exc:  # noqa: BLE001 - mpremote raises its own TransportError or a serial error
            raise LinkError(f"cannot open {self.port}: {exc}") from None
        return self._start()

    def restart(self) -> Hello:
        """Stop whatever runs on the board and start a fresh server (its tensors are gone: SETUP again)."""
        self.stats.restarts += 1
        return self._start()

    def close(self) -> None:
        """BYE to the server (if it still answers), back at the raw REPL prompt, port closed."""
        if self._transport is None:
            return
        try:
            if self.hello is not None:
                try:
                    self.request(Kind.BYE, b"", retries=1)
                    self._await_prompt(self.timeouts.start)
                except LinkError:
                    self._serial.write(FLUSH + BREAK)
        finally:
            self.hello = None
            try:
                self._transport.close()
            except Exception:  # noqa: BLE001 - closing a port that went away is not worth a second error
                pass
            self._transport = None

    @property
    def _serial(self):
        return self._transport.serial

    def _start(self) -> Hello:
        """Stop whatever runs, start the server and get its HELLO; a noisy line gets START_ATTEMPTS tries."""
        failure: LinkError | None = None
        for _ in range(START_ATTEMPTS):
            try:
                return self._start_once()
            except ServerMissing:
                raise
            except LinkError as exc:
                failure = exc
        raise SessionLost(f"{self.port}: could not start kbench_server in {START_ATTEMPTS} attempts; last: {failure}")

    def _start_once(self) -> Hello:
        from mpremote.transport import TransportError

        self.hello = None
        self._serial.timeout = READ_SLICE_S
        self._serial.write(FLUSH + BREAK + BREAK)  # a server left running stops here (twice: noise may hit one)
        self._drain(self.timeouts.quiet)
        self._serial.timeout = MPREMOTE_READ_S
        said = io.StringIO()
        try:
            with contextlib.redirect_stdout(said):  # mpremote prints what it received before raising
                self._transport.enter_raw_repl(soft_reset=False, timeout_overall=self.timeouts.start)
                self._transport.exec_raw_no_follow(START_SERVER)
        except (TransportError, OSError) as exc:
            raise LinkError(f"{self.port}: raw REPL: {exc} {said.getvalue().strip()}".rstrip()) from None
        finally:
            self._serial.timeout = READ_SLICE_S
        self._decoder = Decoder()
        self._garbage.clear()
        deadline = time.monotonic() + self.timeouts.reply
        while time.monotonic() < deadline:  # the server announces itself with a HELLO reply
            for frame in self._receive():
                if frame.kind == Kind.HELLO | REPLY:
                    self.hello = Hello.parse(frame.payload)
                    return self.hello
            failed = self._traceback()
            if failed:
                raise ServerMissing(f"{self.port}: the board could not start kbench_server: {failed} "
                                    f"(deploy it with: python -m mcu.deploy --port {self.port})")
        self.hello = Hello.parse(self.request(Kind.HELLO, retries=3))  # the announcement was lost on the line
        return self.hello

    # -- requests ---------------------------------------------------------------------------------------------

    def request(self, kind: Kind, payload: bytes = b"", timeout: float | None = None,
                retries: int | None = None) -> bytes:
        """Send one request and return its reply's payload (status byte first), retrying as the class says."""
        if self._transport is None:
            raise LinkError("the link is not open")
        self._seq = (self._seq + 1) & 0xFFFF
        wire = PAD + encode(kind, self._seq, payload)
        wait = self.timeouts.reply if timeout is None else timeout
        attempts = 1 + (self.retries if retries is None else retries)
        started = time.monotonic()
        try:
            for attempt in range(attempts):
                if attempt:
                    self.stats.retries += 1
                    time.sleep(min(0.05 * 2 ** (attempt - 1), 1.0))
                sent = FLUSH + wire if attempt else wire
                self._serial.write(sent)
                self.stats.frames += 1
                self.stats.bytes_out += len(sent)
                reply = self._await(kind, self._seq, wait)
                if reply is not None:
                    return reply.payload
            raise LinkError(f"{self.port}: no reply to {kind.name} (seq {self._seq}) after {attempts} attempts of "
                            f"{wait:.3g} s; last rejected frame: {self._decoder.last_error or 'none'}")
        finally:
            self.stats.add_time(kind, time.monotonic() - started)

    def _await(self, kind: Kind, seq: int, wait: float) -> Frame | None:
        deadline = time.monotonic() + wait
        rejected = self._decoder.rejected
        while time.monotonic() < deadline:
            for frame in self._receive():
                if frame.kind == kind | REPLY and frame.seq == seq:
                    return frame  # anything else is a late answer to an earlier attempt
            if self._decoder.rejected != rejected and not self._serial.in_waiting:
                return None  # a corrupted frame arrived and nothing follows it: likely our reply; ask again now
            if RAW_BANNER in self._garbage:
                raise SessionLost(f"{self.port}: the board reset during {kind.name} (its raw REPL banner "
                                  f"arrived): {bytes(self._garbage[-120:])!r}")
            ended = self._traceback()
            if ended:
                raise SessionLost(f"{self.port}: the frame server stopped during {kind.name}: {ended}")
        return None

    def _receive(self) -> list[Frame]:
        data = self._serial.read(max(1, self._serial.in_waiting))
        if not data:
            return []
        self.stats.bytes_in += len(data)
        rejected = self._decoder.rejected
        frames = self._decoder.feed(data)
        if self._decoder.rejected != rejected or not frames or not data.endswith(b"\x00"):
            self._garbage += data  # kept to recognise a banner, a traceback or the prompt among the noise
            del self._garbage[:-GARBAGE_KEPT]
        self.stats.rejected += self._decoder.rejected - rejected
        return frames

    def _traceback(self) -> str:
        """The board's error line if the server's raw REPL command ended: 0x04, the traceback, 0x04, '>'."""
        match = SERVER_ENDED.search(bytes(self._garbage))
        if match is None:
            return ""
        text = match.group(1).decode("utf-8", "replace").strip()
        return text.splitlines()[-1] if text else "the server returned to the REPL"

    def _drain(self, quiet: float) -> None:
        """Read and drop bytes until the line has been quiet for `quiet` seconds (at most 5 s)."""
        end = time.monotonic() + 5.0
        last = time.monotonic()
        while time.monotonic() < end and time.monotonic() - last < quiet:
            if self._serial.read(max(1, self._serial.in_waiting)):
                last = time.monotonic()

    def _await_prompt(self, timeout: float) -> None:
        """Wait for the raw REPL's `04 04 >` that follows the server's return (it may have come with the reply)."""
        deadline = time.monotonic() + timeout
        while not self._garbage.endswith(RAW_PROMPT_AFTER_COMMAND) and time.monotonic() < deadline:
            data = self._serial.read(max(1, self._serial.in_waiting))
            self._garbage += data
