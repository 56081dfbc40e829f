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

from host.errors import LinkError, SpecError, UnavailableError
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
# Waits, in seconds. Every wait for bytes has an overall deadline and an inter-byte timeout (Timeouts.inter_byte):
# a frame whose bytes stop arriving part-way is given up at once, not at the end of the reply's deadline.
#: pyserial's read timeout while frames flow: how often a wait wakes to check its deadlines (short: a reply that
#: arrives is seen within it; long enough that an idle wait is not a busy loop).
READ_SLICE_S = 0.05
#: pyserial's read timeout while mpremote drives the raw REPL: mpremote reads fixed byte counts ("OK", the banner)
#: and treats a short read as failure, so one read must span the board's longest pause there (an exec starting up).
MPREMOTE_READ_S = 1.0
#: A board that stops reading (hung, or USB buffers full) must not block a write for ever; 5 s is far beyond the
#: few milliseconds the largest frame (about 1 KB) takes on any line kbench drives.
WRITE_TIMEOUT_S = 5.0
#: How long restart() waits for a port that went away (a USB board resetting re-enumerates in 1..5 s) to come back,
#: trying again every REOPEN_POLL_S.
REOPEN_S = 10.0
REOPEN_POLL_S = 0.5
#: Resends back off exponentially from BACKOFF_FIRST_S to at most BACKOFF_MAX_S: the first resend is quick (a
#: corrupted frame is the common case), later ones give a board that is busy (a GC pass, a slow flash write) room.
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 1.0
#: _drain() gives up after this long even on a line that never goes quiet (a board printing in a loop).
DRAIN_MAX_S = 5.0
START_ATTEMPTS = 4  # tries of the whole start sequence: noise may hit the break, the raw REPL entry or the HELLO
HELLO_RETRIES = 3  # resends of HELLO when the server's announcement was lost
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
    """The link's waits, in seconds; each positive."""

    #: Overall wait for one reply (RUN adds its compute estimate): the board answers any other request in
    #: milliseconds, a ~1 KB frame takes 0.1 s even at 115200 baud; 2 s leaves room for a GC pass and a loaded host.
    reply: float = 2.0
    #: Overall wait for the raw REPL and the server's start (and for the prompt after BYE): a board importing the
    #: server's .mpy files takes well under a second; 10 s covers a twin starting on a loaded 2-core machine.
    start: float = 10.0
    #: A line silent this long is idle (nothing more is coming from a stopped server): a board that is still
    #: printing sends its next bytes within milliseconds.
    quiet: float = 0.3
    #: Inter-byte timeout: once a frame (or any bytes after the last delimiter) started arriving, the next byte must
    #: follow within this; the board writes a frame in one go (a USB packet every millisecond at most), so a longer
    #: gap means the frame lost bytes (its delimiter, say) and is resent now rather than at the reply's deadline.
    inter_byte: float = 0.5

    def __post_init__(self) -> None:
        bad = [f"{name}={value!r}" for name, value in vars(self).items() if not value > 0]
        if bad:
            raise SpecError(f"Timeouts {', '.join(bad)} out of range; allowed: > 0 seconds")


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
        self._partial = False  # bytes have arrived since the last delimiter: a frame (or noise) is in progress
        self._last_byte_at = time.monotonic()

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
                    time.sleep(REOPEN_POLL_S)
        return self._start()

    def move(self, port: str) -> None:
        """Talk to the board on another port from now on (a restarted twin has a new pty); restart() connects."""
        self.hello = None
        self._disconnect()
        self.port = port

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
        """What the port has, waiting at most READ_SLICE_S for the first byte; tracks the inter-byte gap."""
        try:
            data = self._serial.read(max(1, self._serial.in_waiting))
        except Exception as exc:  # noqa: BLE001 - the device gone (USB reset), a closed port
            raise SessionLost(f"{self.port}: cannot read: {exc}") from None
        if data:
            self._partial = data[-1] != 0
            self._last_byte_at = time.monotonic()
        return data

    def _expect_new(self) -> None:
        """From here on, wait for new bytes: what arrived before no longer counts as a frame in progress."""
        self._partial = False
        self._last_byte_at = time.monotonic()

    def _stalled(self) -> bool:
        """Bytes after the last delimiter, then silence for longer than the inter-byte timeout."""
        return self._partial and time.monotonic() - self._last_byte_at > self.timeouts.inter_byte

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
            except (OSError, ValueError) as exc:  # the port failed under us (pyserial's errors are OSErrors)
                failure = LinkError(f"{self.port}: the port failed: {type(exc).__name__}: {exc}")
                if not self._port_alive():
                    break
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
        self._expect_new()
        deadline = time.monotonic() + self.timeouts.reply
        while time.monotonic() < deadline and not self._stalled():  # the server announces itself with a HELLO reply
            for frame in self._receive():
                if frame.kind == Kind.HELLO | REPLY:
                    return self._accept(Hello.parse(frame.payload))
            ended = self._server_ended()
            if ended:
                raise ServerMissing(f"{self.port}: the board could not start kbench_server: {ended} "
                                    f"(deploy it with: python -m mcu.deploy --port {self.port})")
        return self._accept(Hello.parse(self.request(Kind.HELLO, retries=HELLO_RETRIES)))  # the announcement was lost

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
        self._expect_new()
        deadline = time.monotonic() + self.timeouts.start
        while not self._server_ended() and time.monotonic() < deadline and not self._stalled():
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
                    time.sleep(min(BACKOFF_FIRST_S * 2 ** (attempt - 1), BACKOFF_MAX_S))
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
        """The reply to (kind, seq), or None when it did not come whole: `wait` seconds passed, a frame stalled
        for longer than the inter-byte timeout, or a corrupted frame arrived with nothing after it."""
        self._expect_new()
        deadline = time.monotonic() + wait
        rejected = self._decoder.rejected
        while time.monotonic() < deadline and not self._stalled():
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
        """Read and drop bytes until the line has been quiet for `quiet` seconds (at most DRAIN_MAX_S)."""
        end = time.monotonic() + DRAIN_MAX_S
        last = time.monotonic()
        while time.monotonic() < end and time.monotonic() - last < quiet:
            if self._read():
                last = time.monotonic()
