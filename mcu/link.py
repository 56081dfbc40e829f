"""The host's session with the board's frame server, over a serial port (a board, or the twin's pty).

`BoardLink.open()` connects with mpremote's `SerialTransport`, stops any frame server a previous host left running
(FLUSH, then the break piece 0x00 0x03 0x03 0x00), enters the raw REPL, starts `kbench_server` with one raw-paste
exec and waits for its HELLO. From then on the line carries frames only and is read through pyserial directly
(mpremote's output follower would stop at the first 0x04). `request()` sends one request and returns its reply's
payload, resending the same frame (same sequence number, so the server answers from its cache rather than redoing
the work) after a timeout or a corrupted reply, with exponential backoff, up to `retries` times. `requests()` sends
LOAD requests windowed: up to `window` in flight (at most what the server's HELLO allows), each resent alone when its
reply is missing. A board that reset or a server that stopped under the session (a REPL banner, prompt or traceback
among the bytes, or the port gone) raises `SessionLost` at once; `restart()` reopens the port if it has to and starts
a new server. `close()` says BYE and leaves the board at the raw REPL prompt. docs/protocol.md has the byte-level
exchange.
"""

from __future__ import annotations

import contextlib
import io
import random
import re
import time
from dataclasses import dataclass
from typing import Sequence

from host.errors import LinkError, SpecError, UnavailableError
from mcu.frame import Decoder, Frame, encode
from mcu.link_types import (
    BACKOFF_FIRST_S, BACKOFF_MAX_S, DRAIN_MAX_S, GARBAGE_KEPT, HELLO_RETRIES, LOAD_WINDOW, LinkStats,
    MPREMOTE_READ_S, READ_SLICE_S, REOPEN_POLL_S, REOPEN_S, START_ATTEMPTS, ServerMissing, SessionLost, Timeouts,
    WINDOW_MAX, WRITE_TIMEOUT_S)
from mcu.messages import PROTOCOL, REPLY, Hello, Kind, announced_protocol

BREAK = b"\x00\x03\x03\x00"  # ends a running frame server; in a REPL, Ctrl-C twice
PAD = b"\x00"  # sent before every frame: whatever noise came before, the frame starts clean
#: Sent before a retry and before BREAK: the server reads a COBS block (and the byte after it) at a time, and a bad code
#: byte can leave it waiting for up to 255 more bytes; zeros complete that read and resync it (empty pieces ignored).
FLUSH = b"\x00" * 255
#: Removes a previous deploy's modules from sys.modules (a redeploy takes effect without a reset), then starts.
START_SERVER = ("import sys\nfor _m in ('kbench_server', 'kbench_framing'):\n    sys.modules.pop(_m, None)\n"
                "import kbench_server\nkbench_server.serve()\n")
#: Request types `requests()` sends windowed. A LOAD writes bytes no other request in flight writes, the same bytes
#: every time it is sent, so a duplicate (a resend whose first copy did arrive) is harmless; anything else waits.
WINDOWED = frozenset({Kind.LOAD})
SERVER_ENDED = re.compile(rb"\x04([^\x04]*)\x04>")  # a raw REPL command's end: stdout end, traceback, prompt
#: What a board prints after a reset and never appears in a frame (HELLO's texts hold "MicroPython v", so not that):
#: the raw REPL banner, the soft reboot line, and the friendly banner's second line (after a hard reset).
RESET_SIGNS = (b"raw REPL; CTRL-B to exit\r\n", b"MPY: soft reboot", b'Type "help()" for more information.')


@dataclass
class _InFlight:
    """One windowed request not yet answered. Sendings are numbered in the order they went on the line, which is
    the order the server answers them in."""

    index: int  # its place among the caller's payloads
    seq: int
    wire: bytes  # PAD + the frame
    first: int  # number of its first sending
    last: int  # number of its latest sending
    attempts: int = 1


class BoardLink:
    """One host session with the frame server; use as a context manager or call open()/close()."""

    def __init__(self, port: str, baud: int = 115200, retries: int = 5, timeouts: Timeouts = Timeouts(),
                 window: int = LOAD_WINDOW):
        if not 1 <= window <= WINDOW_MAX:
            raise SpecError(f"window={window} is out of range; allowed: 1..{WINDOW_MAX} LOAD requests in flight")
        self.port = port
        self.baud = baud
        self.retries = retries
        self.timeouts = timeouts
        self.window = window
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
                    return self._accept(frame.payload)
            ended = self._server_ended()
            if ended:
                raise ServerMissing(f"{self.port}: the board could not start kbench_server: {ended} "
                                    f"(deploy it with: python -m mcu.deploy --serial {self.port})")
        return self._accept(self.request(Kind.HELLO, retries=HELLO_RETRIES))  # the announcement was lost

    def _accept(self, payload: bytes) -> Hello:
        """The server's HELLO, once its protocol is known to be this host's (read before the rest of the reply,
        whose layout another protocol may change); a server of another protocol is stopped and refused."""
        theirs = announced_protocol(payload)
        if theirs != PROTOCOL:
            self._write(FLUSH + BREAK)
            raise ServerMissing(f"{self.port}: kbench_server speaks protocol {theirs}; this host speaks "
                                f"{PROTOCOL} (redeploy: python -m mcu.deploy --serial {self.port})")
        self.hello = Hello.parse(payload)
        return self.hello

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
                self._send(FLUSH + wire if attempt else wire, 1)
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
            self._check_session(kind)
            if self._decoder.rejected != rejected and not self._serial.in_waiting:
                return None  # a corrupted frame arrived and nothing follows it: likely our reply; ask again now
        return None

    def _check_session(self, kind: Kind) -> None:
        """SessionLost when the bytes since the last good frame say the server ended or the board reset."""
        ended = self._server_ended()  # first: frames sent after the server ended make the REPL print banners
        if ended:
            raise SessionLost(f"{self.port}: the frame server stopped during {kind.name}: {ended}")
        if any(sign in self._garbage for sign in RESET_SIGNS):
            raise SessionLost(f"{self.port}: the board reset during {kind.name}: {bytes(self._garbage[-120:])!r}")

    # -- windowed requests ------------------------------------------------------------------------------------

    def requests(self, kind: Kind, payloads: Sequence[bytes], timeout: float | None = None,
                 retries: int | None = None, window: int | None = None) -> list[bytes]:
        """One request per payload; their replies' payloads, in the same order. A kind in WINDOWED goes with up
        to `window` requests in flight (default: the link's; never more than the server's HELLO allows), others
        one at a time as request() sends them. Each request is resent alone, with its own sequence number (the
        server answers a duplicate from its cache), when its reply is missing: a reply to a later request came
        first (the server answers in order, so this one or its reply was lost), or a corrupted frame arrived with
        nothing after it (the next reply in order, resent), or the line stalled mid-frame or stayed silent for
        the reply timeout (every request still in flight, as each has then had time to be answered). Retries,
        backoff and the SessionLost checks are request()'s."""
        if self._transport is None or self.hello is None:
            raise LinkError("the link is not open")
        width = min(self.window if window is None else window, self.hello.window)
        if kind not in WINDOWED or width < 2 or len(payloads) < 2:
            return [self.request(kind, payload, timeout, retries) for payload in payloads]
        wait = self.timeouts.reply if timeout is None else timeout
        attempts = 1 + (self.retries if retries is None else retries)
        started = time.monotonic()
        try:
            return self._windowed(kind, payloads, width, wait, attempts)
        finally:
            self.stats.add_time(kind, time.monotonic() - started)

    def _windowed(self, kind: Kind, payloads: Sequence[bytes], width: int, wait: float,
                  attempts: int) -> list[bytes]:
        replies: list[bytes] = [b""] * len(payloads)
        flight: dict[int, _InFlight] = {}  # by seq, in the order first sent
        queued = 0  # payloads sent so far
        sendings = 0  # frames put on the line so far, resends included
        self._expect_new()
        heard = time.monotonic()  # the last reply or sending: silence for `wait` after it means loss
        rejected = self._decoder.rejected
        while queued < len(payloads) or flight:
            batch = []
            while queued < len(payloads) and len(flight) < width:
                self._seq = (self._seq + 1) & 0xFFFF
                request = _InFlight(queued, self._seq, PAD + encode(kind, self._seq, payloads[queued]), sendings,
                                    sendings)
                flight[request.seq] = request
                batch.append(request.wire)
                queued += 1
                sendings += 1
            if batch:
                self._send(b"".join(batch), len(batch))
                heard = time.monotonic()
            lost: dict[int, _InFlight] = {}
            for frame in self._receive():
                answered = flight.pop(frame.seq, None) if frame.kind == kind | REPLY else None
                if answered is None:
                    continue  # a late answer to an earlier sending
                replies[answered.index] = frame.payload
                heard = time.monotonic()
                lost.update((r.seq, r) for r in flight.values() if r.last < answered.first)
            self._check_session(kind)
            lost = {seq: r for seq, r in lost.items() if seq in flight}
            if not lost and flight:
                if self._decoder.rejected != rejected and not self._serial.in_waiting:
                    next_due = min(flight.values(), key=lambda r: r.last)  # the reply a corrupted frame most likely was
                    lost = {next_due.seq: next_due}
                elif self._stalled() or time.monotonic() - heard > wait:
                    lost = dict(flight)  # each has had time to be answered: it or its reply was lost
            rejected = self._decoder.rejected
            if lost:
                sendings = self._resend(kind, sorted(lost.values(), key=lambda r: r.last), sendings, attempts, wait,
                                        len(flight))
                heard = time.monotonic()
                self._expect_new()
        return replies

    def _resend(self, kind: Kind, lost: list[_InFlight], sendings: int, attempts: int, wait: float,
                in_flight: int) -> int:
        """Send the `lost` requests again (same frames, same sequence numbers) after FLUSH and the backoff of the
        most retried one; the number of sendings after them. LinkError once one has had all its attempts."""
        worst = max(lost, key=lambda r: r.attempts)
        if worst.attempts >= attempts:
            raise LinkError(f"{self.port}: no reply to {kind.name} (seq {worst.seq}) after {attempts} attempts of "
                            f"{wait:.3g} s, {in_flight} requests in flight; last rejected frame: "
                            f"{self._decoder.last_error or 'none'}")
        time.sleep(min(BACKOFF_FIRST_S * 2 ** (worst.attempts - 1), BACKOFF_MAX_S))
        for request in lost:
            request.attempts += 1
            request.last = sendings
            sendings += 1
        self.stats.retries += len(lost)
        self._send(FLUSH + b"".join(r.wire for r in lost), len(lost))
        return sendings

    def _send(self, data: bytes, frames: int) -> None:
        self._write(data)
        self.stats.frames += frames
        self.stats.bytes_out += len(data)

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
