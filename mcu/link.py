"""The host's session with the board's frame server, over a serial port (a board, or the twin's pty).

`BoardLink.open()` connects with mpremote's `SerialTransport`, stops any frame server a previous host left running
(FLUSH, then the break piece 0x00 0x03 0x03 0x00), enters the raw REPL, starts `kbench_server` with one raw-paste
exec and waits for its HELLO. From then on the line carries frames only and is read through pyserial directly
(mpremote's output follower would stop at the first 0x04). `request()` sends one request and returns its reply's
payload, resending the same frame (same sequence number, so the server answers from its cache rather than redoing
the work) after a timeout or a corrupted reply, with exponential backoff, up to `retries` times. `requests()` sends
LOAD requests windowed: up to `window` in flight (at most what the server's HELLO allows), each resent alone when its
reply is missing. `load()` and `read()` move a tensor's bytes in chunks that a `ChunkPolicy` (mcu/chunks.py) sizes:
the board's largest on a clean line, halved while frames fail and doubled back while they pass; a lost LOAD larger
than the current chunk is sent again cut into chunks, a READ asked for again with a smaller count. Once the line has
delivered a corrupted frame, a request gets NOISY_ATTEMPTS attempts instead of `retries` + 1, and every write ends
with TAIL. A board that reset or a server that stopped under the session (a REPL banner, prompt or traceback
among the bytes, or the port gone) raises `SessionLost` at once; `restart()` reopens the port if it has to and starts
a new server. `close()` says BYE and leaves the board at the raw REPL prompt. docs/protocol.md has the byte-level
exchange.
"""

from __future__ import annotations

import collections
import contextlib
import io
import random
import re
import time
from typing import Callable

from host.errors import LinkError, SpecError, UnavailableError
from mcu.chunks import ChunkPolicy
from mcu.frame import Decoder, Frame, encode
from mcu.link_types import (
    BACKOFF_FIRST_S, BACKOFF_MAX_S, DRAIN_MAX_S, GARBAGE_KEPT, HELLO_RETRIES, LOAD_WINDOW, NOISY_ATTEMPTS, RTO_FACTOR,
    RTO_MIN_S, RTT_KEPT, LinkStats, MPREMOTE_READ_S, READ_SLICE_S, REOPEN_POLL_S, REOPEN_S, START_ATTEMPTS,
    ServerMissing, SessionLost, Timeouts, WINDOW_MAX, WRITE_TIMEOUT_S)
from mcu.link_window import FLUSH, PAD, WindowedRequests, cut_load
from mcu.messages import LOAD, PROTOCOL, READ, REPLY, Hello, Kind, Tensor, announced_protocol, check_status

BREAK = b"\x00\x03\x03\x00"  # ends a running frame server; in a REPL, Ctrl-C twice
#: Sent after the frames of every write once the line has corrupted a frame: a byte dropped from the last frame
#: leaves the server's block read waiting for one more byte (a flipped code byte for more), which only the next
#: write would bring, after the reply timeout; 16 zeros complete such a read at once (empty pieces are ignored).
TAIL = b"\x00" * 16
#: Removes a previous deploy's modules from sys.modules (a redeploy takes effect without a reset), then starts.
START_SERVER = ("import sys\nfor _m in ('kbench_server', 'kbench_framing', 'kbench_board'):\n"
                "    sys.modules.pop(_m, None)\nimport kbench_server\nkbench_server.serve()\n")
#: A raw REPL command's end: stdout's end, the traceback (text), the prompt, then only text (what the REPL says to
#: frames sent after it, such as its banner). Not any 04 ... 04 > since the last frame: a frame still arriving (a
#: board's USB packets, the VM twin's pieces) is random bytes where that turns up now and then.
SERVER_ENDED = re.compile(rb"\x04([\t\r\n\x20-\x7e]*)\x04>[\t\r\n\x20-\x7e]*\Z")
#: What a board prints after a reset and never appears in a frame (HELLO's texts hold "MicroPython v", so not that):
#: the raw REPL banner, the soft reboot line, and the friendly banner's second line (after a hard reset).
RESET_SIGNS = (b"raw REPL; CTRL-B to exit\r\n", b"MPY: soft reboot", b'Type "help()" for more information.')


class BoardLink(WindowedRequests):
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
        #: The chunk of tensor bytes per LOAD or READ frame (mcu/chunks.py); made at the first HELLO, kept across
        #: sessions (the line is the same), capped by each HELLO's max_data.
        self.chunks: ChunkPolicy | None = None
        self._rtts: collections.deque = collections.deque(maxlen=RTT_KEPT)  # seconds, first attempts answered
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
        raise SessionLost(f"{self.port}: could not start kbench_server in {START_ATTEMPTS} attempts; last: {failure} "
                          f"(a board file of another kbench, e.g. a stale kbench_server.py, stops it too: redeploy "
                          f"with python -m mcu.deploy --serial {self.port})")

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
        if self.chunks is not None:
            self.chunks.resize(self.hello.max_data)
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
        return self._request(kind, lambda size: payload, timeout, retries)

    def _request(self, kind: Kind, build: Callable[[int], bytes], timeout: float | None = None,
                 retries: int | None = None, chunk: Callable[[bytes], int] | None = None) -> bytes:
        """request() of the payload build(size) makes for a chunk of `size` bytes. With `chunk` (the tensor bytes a
        payload moves), the chunk policy hears how each attempt went, and a retry after it shrank asks for a smaller
        chunk (a new payload under a new seq; a late reply to the old one is ignored)."""
        if self._transport is None:
            raise LinkError("the link is not open")
        payload = build(self.chunks.size if chunk else 0)
        self._seq = (self._seq + 1) & 0xFFFF
        wire = PAD + encode(kind, self._seq, payload)
        wait = self._reply_wait() if timeout is None else timeout
        attempts = 1 + (self.retries if retries is None else retries)
        silent = 0  # attempts after which not a byte came back: the board backs off those
        started = time.monotonic()
        try:
            attempt = 0
            while True:
                self._send((FLUSH if attempt else b"") + wire + self._tail(), 1)
                heard, sent = self.stats.bytes_in, time.monotonic()
                reply = self._await(kind, self._seq, wait)
                if reply is not None:
                    if not attempt and timeout is None:
                        self._rtts.append(time.monotonic() - sent)
                    if chunk and not attempt:
                        self.chunks.passed(chunk(payload))
                    return reply.payload
                attempt += 1
                if chunk:
                    self.chunks.failed(chunk(payload))
                if attempt >= self._budget(attempts):
                    break
                self.stats.retries += 1
                if self.stats.bytes_in == heard:
                    silent += 1
                    time.sleep(min(BACKOFF_FIRST_S * 2 ** (silent - 1), BACKOFF_MAX_S))
                if chunk and chunk(smaller := build(self.chunks.size)) < chunk(payload):
                    payload = smaller
                    self._seq = (self._seq + 1) & 0xFFFF
                    wire = PAD + encode(kind, self._seq, payload)
            raise LinkError(f"{self.port}: no reply to {kind.name} (seq {self._seq}) after {attempt} attempts of "
                            f"{wait:.3g} s; last rejected frame: {self._decoder.last_error or 'none'}")
        finally:
            self.stats.add_time(kind, time.monotonic() - started)

    def _budget(self, attempts: int) -> int:
        """Attempts a request gets: `attempts` (retries + 1) on a line that has corrupted no frame, or where no
        retry is allowed (BYE); NOISY_ATTEMPTS on a noisy one, where a live board's frames are lost often."""
        return attempts if attempts == 1 or not self.stats.rejected else max(attempts, NOISY_ATTEMPTS)

    def _chunk_policy(self) -> ChunkPolicy:
        if self.chunks is None:
            if self.hello is None:
                raise LinkError("the link is not open")
            self.chunks = ChunkPolicy(self.hello.max_data)
        return self.chunks

    def _reply_wait(self) -> float:
        """The wait for a reply: Timeouts.reply, or on a noisy line RTO_FACTOR × the longest recent round trip."""
        if not self.stats.rejected or not self._rtts:
            return self.timeouts.reply
        return min(self.timeouts.reply, max(RTO_MIN_S, RTO_FACTOR * max(self._rtts)))

    def _tail(self) -> bytes:
        return TAIL if self.stats.rejected else b""

    # -- tensor bytes in chunks -------------------------------------------------------------------------------

    def load(self, tensor: Tensor, data: bytes, window: int | None = None) -> None:
        """LOAD `data` into a board tensor from offset 0, windowed, in chunks of the chunk policy's size (on a
        clean line the board's max_data, the frames `requests()` of those pieces would send); a lost LOAD larger
        than the current chunk is sent again as chunks. BoardRefused on a refusal."""
        if self._transport is None or self.hello is None:
            raise LinkError("the link is not open")
        self._chunk_policy()
        width = max(1, min(self.window if window is None else window, self.hello.window))
        started = time.monotonic()
        try:
            replies = self._windowed(Kind.LOAD, [LOAD.pack(tensor, 0) + data], width, self._reply_wait(),
                                     1 + self.retries, cut=cut_load)
        finally:
            self.stats.add_time(Kind.LOAD, time.monotonic() - started)
        for reply in replies:
            check_status(Kind.LOAD, reply)

    def read(self, tensor: Tensor, nbytes: int, offset: int = 0) -> bytes:
        """`nbytes` of a board tensor from `offset`, READ stop-and-wait in chunks of the chunk policy's size (a
        reply is a frame too: the host asks for as many bytes as the line lets through)."""
        self._chunk_policy()
        data = bytearray()
        while len(data) < nbytes:
            at, left = offset + len(data), nbytes - len(data)
            got = check_status(Kind.READ, self._request(
                Kind.READ, lambda size, at=at, left=left: READ.pack(tensor, at, min(size, left)),
                chunk=lambda payload: READ.unpack(payload)[2]))
            if not got:
                raise LinkError(f"{self.port}: READ of tensor {tensor} at {at} returned no bytes")
            data += got[:left]
        return bytes(data)

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
