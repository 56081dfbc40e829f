"""The board link's windowed requests (docs/protocol.md, "Windowed LOAD"): up to `window` LOAD requests in flight,
each resent alone when its reply is missing, cut smaller while the line loses frames.

`WindowedRequests` is a part of `mcu.link.BoardLink` kept in its own file; it works on the link's state (its
decoder, sequence numbers, chunk policy, stats, timeouts) and its line primitives (`_send`, `_receive`, `_stalled`,
`_check_session`, `_expect_new`, `_tail`, `_budget`), which BoardLink defines.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from host.errors import LinkError
from mcu.frame import encode
from mcu.link_types import BACKOFF_FIRST_S, BACKOFF_MAX_S, NOISY_ATTEMPTS
from mcu.messages import LOAD, REPLY, Kind

PAD = b"\x00"  # sent before every frame: whatever noise came before, the frame starts clean
#: Sent before a retry and before BREAK: the server reads a COBS block (and the byte after it) at a time, and a bad code
#: byte can leave it waiting for up to 255 more bytes; zeros complete that read and resync it (empty pieces ignored).
FLUSH = b"\x00" * 255
#: Request types `requests()` sends windowed. A LOAD writes bytes no other request in flight writes, the same bytes
#: every time it is sent, so a duplicate (a resend whose first copy did arrive) is harmless; anything else waits.
WINDOWED = frozenset({Kind.LOAD})

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
    payload: bytes = b""


class WindowedRequests:
    """BoardLink's requests() and the engine behind it."""

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

    def _windowed(self, kind: Kind, payloads: Sequence[bytes], width: int, wait: float, attempts: int,
                  cut: Callable[[bytes, int], list[bytes]] | None = None) -> list[bytes]:
        """The replies, in the order their requests were first sent. With `cut` (payload, size) -> payloads of at
        most `size` tensor bytes each, every payload is cut to the chunk policy's size as it goes out, the policy
        hears of each frame's fate, and a lost frame larger than the chunk after it is cut again and sent anew."""
        replies: dict[int, bytes] = {}
        pending = collections.deque(payloads)
        flight: dict[int, _InFlight] = {}  # by seq, in the order first sent
        index = 0  # requests made so far (a cut payload makes several)
        sendings = 0  # frames put on the line so far, resends included
        flush = False  # the next batch carries frames cut from lost ones: a resend, so FLUSH first
        self._expect_new()
        heard = time.monotonic()  # the last reply or sending: silence for `wait` after it means loss
        rejected = self._decoder.rejected
        while pending or flight:
            batch = []
            while pending and len(flight) < width:
                payload = pending.popleft()
                if cut is not None:
                    payload, *rest = cut(payload, self.chunks.size)
                    pending.extendleft(reversed(rest))
                self._seq = (self._seq + 1) & 0xFFFF
                request = _InFlight(index, self._seq, PAD + encode(kind, self._seq, payload), sendings, sendings,
                                    payload=payload)
                flight[request.seq] = request
                batch.append(request.wire)
                index += 1
                sendings += 1
            if batch:
                self._send((FLUSH if flush else b"") + b"".join(batch) + self._tail(), len(batch))
                flush = False
                heard = time.monotonic()
            lost: dict[int, _InFlight] = {}
            for frame in self._receive():
                answered = flight.pop(frame.seq, None) if frame.kind == kind | REPLY else None
                if answered is None:
                    continue  # a late answer to an earlier sending
                replies[answered.index] = frame.payload
                if cut is not None and answered.attempts == 1:
                    self.chunks.passed(load_bytes(answered.payload))
                heard = time.monotonic()
                lost.update((r.seq, r) for r in flight.values() if r.last < answered.first)
            self._check_session(kind)
            lost = {seq: r for seq, r in lost.items() if seq in flight}
            silent = False
            if not lost and flight:
                if self._decoder.rejected != rejected and not self._serial.in_waiting:
                    next_due = min(flight.values(), key=lambda r: r.last)  # the reply a corrupted frame most likely was
                    lost = {next_due.seq: next_due}
                elif self._stalled() or time.monotonic() - heard > wait:
                    lost = dict(flight)  # each has had time to be answered: it or its reply was lost
                    silent = not self._stalled()
            rejected = self._decoder.rejected
            if lost:
                again = sorted(lost.values(), key=lambda r: r.last)
                if cut is not None:
                    again = self._recut(again, flight, pending, cut)
                    flush = True
                if again:
                    sendings = self._resend(kind, again, sendings, attempts, wait, len(flight), silent)
                heard = time.monotonic()
                self._expect_new()
        return [replies[i] for i in sorted(replies)]

    def _recut(self, lost: list[_InFlight], flight: dict[int, _InFlight], pending: collections.deque,
               cut: Callable[[bytes, int], list[bytes]]) -> list[_InFlight]:
        """Tell the chunk policy of the lost frames; those now larger than its chunk leave the flight and go back
        to the front of `pending`, to be cut anew. The ones to resend as they are."""
        for request in lost:
            self.chunks.failed(load_bytes(request.payload))
        again, recut = [], []
        for request in lost:
            if load_bytes(request.payload) > self.chunks.size and request.attempts < NOISY_ATTEMPTS:
                del flight[request.seq]
                recut.append(request.payload)
                self.stats.retries += 1
            else:
                again.append(request)
        pending.extendleft(reversed(recut))
        return again

    def _resend(self, kind: Kind, lost: list[_InFlight], sendings: int, attempts: int, wait: float,
                in_flight: int, silent: bool = True) -> int:
        """Send the `lost` requests again (same frames, same sequence numbers) after FLUSH and, when nothing came
        back (`silent`), the backoff of the most retried one; the number of sendings after them. LinkError once one
        has had all its attempts (NOISY_ATTEMPTS once the line has corrupted a frame)."""
        worst = max(lost, key=lambda r: r.attempts)
        if worst.attempts >= self._budget(attempts):
            raise LinkError(f"{self.port}: no reply to {kind.name} (seq {worst.seq}) after {worst.attempts} attempts "
                            f"of {wait:.3g} s, {in_flight} requests in flight; last rejected frame: "
                            f"{self._decoder.last_error or 'none'}")
        if silent or not self.stats.rejected:
            time.sleep(min(BACKOFF_FIRST_S * 2 ** (worst.attempts - 1), BACKOFF_MAX_S))
        for request in lost:
            request.attempts += 1
            request.last = sendings
            sendings += 1
        self.stats.retries += len(lost)
        self._send(FLUSH + b"".join(r.wire for r in lost) + self._tail(), len(lost))
        return sendings


def load_bytes(payload: bytes) -> int:
    """The tensor bytes a LOAD payload carries."""
    return len(payload) - LOAD.size


def cut_load(payload: bytes, size: int) -> list[bytes]:
    """A LOAD payload as LOADs of at most `size` tensor bytes each, at the offsets their bytes belong at."""
    tensor, offset = LOAD.unpack_from(payload)
    data = memoryview(payload)[LOAD.size:]
    if len(data) <= size:
        return [payload]
    return [LOAD.pack(tensor, offset + at) + bytes(data[at:at + size]) for at in range(0, len(data), size)]
