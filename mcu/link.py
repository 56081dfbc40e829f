"""The host's session with the board's frame server, over a serial port (a board, or the twin's pty).

`BoardLink.open()` connects with mpremote's `SerialTransport`, stops any frame server a previous host left running
(FLUSH, then the break piece 0x00 0x03 0x03 0x00), enters the raw REPL, starts `kbench_server` with one raw-paste
exec and waits for its HELLO. From then on the line carries frames only and is read through pyserial directly
(mpremote's output follower would stop at the first 0x04). `request()` sends one request and returns its reply's
payload, resending the same frame (same sequence number, so the server answers from its cache rather than redoing
the work) after a timeout or a corrupted reply, with exponential backoff, up to `retries` times. A board that reset
or a server that stopped under the session (a REPL banner, prompt or traceback among the bytes, or the port gone)
raises `SessionLost` at once; `restart()` reopens the port if it has to and starts a new server. `close()` says BYE
and leaves the board at the raw REPL prompt. docs/protocol.md has the byte-level exchange.
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
from mcu.messages import PROTOCOL, REPLY, Hello, Kind

BREAK = b"\x00\x03\x03\x00"  # ends a running frame server; in a REPL, Ctrl-C twice
PAD = b"\x00"  # sent before every frame: whatever noise came before, the frame starts clean
#: Sent before a retry and before BREAK: the server reads a COBS block at a time, and a corrupted code byte can leave
#: it waiting for up to 253 more bytes; zeros complete that read and resynchronise it (empty pieces are ignored).
FLUSH = b"\x00" * 254
#: Removes a previous deploy's modules from sys.modules (a redeploy takes effect without a reset), then starts.
START_SERVER = ("import sys\nfor _m in ('kbench_server', 'kbench_framing'):\n    sys.modules.pop(_m, None)\n"
                "import kbench_server\nkbench_server.serve()\n")
READ_SLICE_S = 0.05  # pyserial read timeout while frames flow: how often a wait checks its deadline
MPREMOTE_READ_S = 1.0  # pyserial read timeout while mpremote drives the raw REPL (it reads fixed byte counts)
WRITE_TIMEOUT_S = 5.0  # a board that stops reading must not block a write for ever
REOPEN_S = 10.0  # how long restart() waits for a port that went away (a USB board resetting) to come back
START_ATTEMPTS = 4
GARBAGE_KEPT = 4096  # bytes since the last good frame, kept to recognise a reset board or a stopped server
SERVER_ENDED = re.compile(rb"\x04([^\x04]*)\x04>")  # a raw REPL command's end: stdout end, traceback, prompt
#: What a board prints after a reset and never appears in a frame (HELLO's texts hold "MicroPython v", so not that):
#: the raw REPL banner, the soft reboot line, and the friendly banner's second line (after a hard reset).
RESET_SIGNS = (b"raw REPL; CTRL-B to exit\r\n", b"MPY: soft reboot", b'Type "help()" for more information.')


class SessionLost(LinkError):
    """The frame server is gone (the board reset, or the server could not start); `restart()` may recover."""


class ServerMissing(LinkError):
    """The board has no usable kbench_server (not deployed, or another protocol): no retry helps."""


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
        self._connect()
        return self._start()

    def restart(self) -> Hello:
        """Stop whatever runs on the board and start a fresh server (its tensors are gone: SETUP again); a port
        that went away (a USB board resetting) is reopened."""
        self.stats.restarts += 1
        if self._transport is None or not self._port_alive():
            self._disconnect()
            deadline = time.monotonic() + REOPEN_S
            while True:
                try:
                    self._connect()
                    break
                except LinkError:
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(0.5)
        return self._start()

    def close(self) -> None:
        """BYE to the server (if it still answers), back at the raw REPL prompt, port closed."""
        if self._transport is None:
            return
        try:
            if self.hello is not None:
                self._bye()
        finally:
            self.hello = None
            self._disconnect()

    # -- the port ---------------------------------------------------------------------------------------------

    @property
    def _serial(self):
        return self._transport.serial

    def _connect(self) -> None:
        try:
            from mpremote.transport_serial import SerialTransport
        except ImportError as exc:
            raise UnavailableError(f"mpremote is not installed ({exc}): pip install -e '.[mcu]'") from None
        try:
            self._transport = SerialTransport(self.port, baudrate=self.baud)
        except Exception as exc:  # noqa: BLE001 - mpremote raises its own TransportError or a serial error
            raise LinkError(f"cannot open {self.port}: {exc}") from None
        self._serial.write_timeout = WRITE_TIMEOUT_S

    def _disconnect(self) -> None:
        if self._transport is not None:
            try:
                self._transport.close()
            except Exception:  # noqa: BLE001 - closing a port that went away is not worth a second error
                pass
            self._transport = None

    def _port_alive(self) -> bool:
        try:
            self._serial.in_waiting  # noqa: B018 - raises when the device is gone
            return self._serial.is_open
        except Exception:  # noqa: BLE001 - any error means the port must be reopened
            return False

    def _write(self, data: bytes) -> None:
        try:
            self._serial.write(data)
        except Exception as exc:  # noqa: BLE001 - a write timeout, or the device gone (USB reset)
            raise SessionLost(f"{self.port}: cannot write: {exc}") from None

    def _read(self) -> bytes:
        try:
            return self._serial.read(max(1, self._serial.in_waiting))
        except Exception as exc:  # noqa: BLE001 - the device gone (USB reset), a closed port
            raise SessionLost(f"{self.port}: cannot read: {exc}") from None

    # -- starting and ending the server -----------------------------------------------------------------------

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
        self.hello = None
        self._serial.timeout = READ_SLICE_S
        self._write(FLUSH + BREAK + BREAK)  # a server left running stops here (twice: noise may hit one)
        self._drain(self.timeouts.quiet)
        self._serial.timeout = MPREMOTE_READ_S
        said = io.StringIO()
        try:
            with contextlib.redirect_stdout(said):  # mpremote prints what it received before raising
                self._transport.enter_raw_repl(soft_reset=False, timeout_overall=self.timeouts.start)
                self._transport.exec_raw_no_follow(START_SERVER)
        except Exception as exc:  # noqa: BLE001 - TransportError, a serial error, or struct.error on a short read
            raise LinkError(f"{self.port}: raw REPL: {type(exc).__name__}: {exc} {said.getvalue().strip()}"
                            .rstrip()) from None
        finally:
            if self._transport is not None:
                self._serial.timeout = READ_SLICE_S
        self._decoder = Decoder()
        self._garbage.clear()
        deadline = time.monotonic() + self.timeouts.reply
        while time.monotonic() < deadline:  # the server announces itself with a HELLO reply
            for frame in self._receive():
                if frame.kind == Kind.HELLO | REPLY:
                    return self._accept(Hello.parse(frame.payload))
            ended = self._server_ended()
            if ended:
                raise ServerMissing(f"{self.port}: the board could not start kbench_server: {ended} "
                                    f"(deploy it with: python -m mcu.deploy --port {self.port})")
        return self._accept(Hello.parse(self.request(Kind.HELLO, retries=3)))  # the announcement was lost

    def _accept(self, hello: Hello) -> Hello:
        if hello.protocol != PROTOCOL:
            self._write(FLUSH + BREAK)
            raise ServerMissing(f"{self.port}: kbench_server speaks protocol {hello.protocol}; this host speaks "
                                f"{PROTOCOL} (redeploy: python -m mcu.deploy --port {self.port})")
        self.hello = hello
        return hello

    def _bye(self) -> None:
        """BYE, once: a resent BYE could reach the REPL after the server left. Then wait for the raw prompt."""
        try:
            self.request(Kind.BYE, b"", retries=0)
        except SessionLost:
            return  # the server is already gone
        except LinkError:
            self._write(FLUSH + BREAK)
        deadline = time.monotonic() + self.timeouts.start
        while not self._server_ended() and time.monotonic() < deadline:
            self._absorb(self._read())

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
                self._write(sent)
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
            ended = self._server_ended()  # first: frames sent after the server ended make the REPL print banners
            if ended:
                raise SessionLost(f"{self.port}: the frame server stopped during {kind.name}: {ended}")
            if any(sign in self._garbage for sign in RESET_SIGNS):
                raise SessionLost(f"{self.port}: the board reset during {kind.name}: "
                                  f"{bytes(self._garbage[-120:])!r}")
            if self._decoder.rejected != rejected and not self._serial.in_waiting:
                return None  # a corrupted frame arrived and nothing follows it: likely our reply; ask again now
        return None

    def _receive(self) -> list[Frame]:
        data = self._read()
        if not data:
            return []
        self.stats.bytes_in += len(data)
        rejected = self._decoder.rejected
        frames = self._decoder.feed(data)
        self.stats.rejected += self._decoder.rejected - rejected
        if frames:
            self._garbage.clear()  # only what came after the last good frame can be a banner or a prompt
            data = data[data.rfind(b"\x00") + 1:]
        self._absorb(data)
        return frames

    def _absorb(self, data: bytes) -> None:
        self._garbage += data
        del self._garbage[:-GARBAGE_KEPT]

    def _server_ended(self) -> str:
        """The board's last line if the server's raw REPL command has ended (04, traceback, 04, '>'), else ''."""
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
            if self._read():
                last = time.monotonic()
