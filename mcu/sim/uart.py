"""The twin's serial line, device side: a `Link` holds the bytes the host sent (the UART receive buffer) and sends
the board's bytes back (several answers in one write while more input waits, as a USB VCP packs them), and turns
the interrupt character into a KeyboardInterrupt in the running code.

It knows nothing of the REPL (mcu.sim.repl) nor of the pty (mcu.sim.server), so tests can feed a Link bytes and
read what it transmits.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from typing import Callable

KBD_INTR_DEFAULT = 0x03  # Ctrl-C: the interrupt character after every reset, until micropython.kbd_intr changes it
#: The board's output is held back, up to this many bytes, while the board has input queued that it has not read: it
#: is about to answer that too, and one write to the host then carries several answers, as a USB full-speed VCP
#: carries a board's output in 64-byte packets. Sent as soon as the board waits for input (or has nothing queued).
TX_PACKET = 64


class LinkClosed(Exception):
    """The serial line was closed: the device loop ends."""


def raise_in_thread(thread_id: int, exc_type: type[BaseException]) -> None:
    """Make `exc_type` raise in the thread `thread_id` at its next bytecode boundary (CPython only)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc_type))


class Link:
    """The device's end of the serial line.

    `feed` is the UART receive interrupt: bytes go into the stdin buffer, except the interrupt character while code
    runs (`arm`), which is dropped and raises KeyboardInterrupt in that code's thread, as the STM32 port's receive
    handler does. `read`/`read_some` are the device's blocking reads; `write` is the transmitter, which holds output
    back while unread input is queued (TX_PACKET) and `flush` sends. One thread at a time reads (the REPL, or the
    code it runs while the REPL waits for it). `receive`, where given, is called by that thread before it waits for
    bytes: it feeds whatever the line already holds (mcu.sim.server pulls the pty), so that a device reading faster
    than the receive side is scheduled does not wait for it.
    """

    def __init__(self, write: Callable[[bytes], None], receive: Callable[[], None] | None = None):
        self._transmit = write
        self._receive = receive
        self._lock = threading.Lock()
        self._buffer = bytearray()
        self._unsent = bytearray()  # output held back (TX_PACKET)
        self._sending = threading.Lock()  # held while output goes out: it leaves in the order it was written
        self._bell = threading.Lock()  # held = nothing new; released by feed/close/interrupt to wake a reader
        self._bell.acquire()
        self._closed = False
        self._target: int | None = None
        self._deferring = False
        self._pending: type[BaseException] | None = None
        self.kbd_char = KBD_INTR_DEFAULT

    # -- receive side (the reader thread, or a test) -------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        with self._lock:
            char = self.kbd_char
            if self._target is not None and 0 <= char <= 0xFF and char in data:
                self._buffer += data.replace(bytes([char]), b"")
                self._raise_locked(KeyboardInterrupt)
            else:
                self._buffer += data
            self._ring()

    def interrupt(self, exc_type: type[BaseException]) -> bool:
        """Raise `exc_type` in the running code as an interrupt would (after a native call returns); False when no
        code runs."""
        with self._lock:
            if self._target is None:
                return False
            self._raise_locked(exc_type)
            self._ring()
            return True

    def _raise_locked(self, exc_type: type[BaseException]) -> None:
        if self._deferring:
            self._pending = exc_type
        else:
            raise_in_thread(self._target, exc_type)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._ring()

    def _ring(self) -> None:
        if self._bell.locked():
            try:
                self._bell.release()
            except RuntimeError:
                pass

    # -- running code ------------------------------------------------------------------------------------------

    def arm(self) -> None:
        """From now on the interrupt character raises KeyboardInterrupt in the calling thread (reset to Ctrl-C)."""
        with self._lock:
            self.kbd_char = KBD_INTR_DEFAULT
            self._target = threading.get_ident()

    def disarm(self) -> None:
        with self._lock:
            self._target = None
            self._pending = None

    @contextlib.contextmanager
    def deferred_interrupts(self):
        """Hold interrupts while native code runs; one that came meanwhile is raised when it returns (the VM only
        checks for pending exceptions between bytecodes, never inside a native function)."""
        with self._lock:
            self._deferring = True
        try:
            yield
        finally:
            with self._lock:
                self._deferring = False
                pending, self._pending = self._pending, None
            if pending is not None:
                raise pending()

    # -- device side -------------------------------------------------------------------------------------------

    def _wait(self, timeout: float | None) -> None:
        if self._unsent:
            self.flush()
        if self._receive is not None:
            self._receive()  # bytes it feeds ring the bell: the wait below then returns at once
        self._bell.acquire(timeout=-1 if timeout is None else max(0.0, timeout))

    def read_some(self, limit: int, timeout: float | None = None) -> bytes:
        """At least one and at most `limit` bytes, waiting for them (b"" once `timeout` seconds passed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if self._buffer:
                    data = bytes(self._buffer[:limit])
                    del self._buffer[:limit]
                    return data
                if self._closed:
                    raise LinkClosed("the serial line was closed")
            if deadline is not None and time.monotonic() >= deadline:
                return b""
            self._wait(None if deadline is None else deadline - time.monotonic())

    def read(self, n: int = 1) -> bytes:
        """Exactly `n` bytes, waiting as long as it takes."""
        with self._lock:  # the common case, all of them already here, in one step
            if len(self._buffer) >= n:
                data = bytes(self._buffer[:n])
                del self._buffer[:n]
                return data
        data = bytearray()
        while len(data) < n:
            data += self.read_some(n - len(data))
        return bytes(data)

    def read_byte(self) -> int:
        return self.read_some(1)[0]

    def unread(self, data: bytes) -> None:
        """Put bytes read too far back at the front of the buffer."""
        if data:
            with self._lock:
                self._buffer[:0] = data

    def available(self) -> int:
        with self._lock:
            return len(self._buffer)

    def wait_readable(self, timeout: float | None) -> bool:
        """True once a byte is waiting; False after `timeout` seconds (None: wait for ever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if self._buffer:
                    return True
                if self._closed:
                    raise LinkClosed("the serial line was closed")
            if deadline is not None and time.monotonic() >= deadline:
                return False
            self._wait(None if deadline is None else deadline - time.monotonic())

    def pause(self, seconds: float) -> None:
        """Sleep that an interrupt cuts short (the KeyboardInterrupt fires when this returns to bytecode)."""
        deadline = time.monotonic() + max(0.0, seconds)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._wait(remaining)

    def write(self, data: bytes) -> None:
        if not data:
            return
        with self._lock:
            self._unsent += data
            hold = len(self._buffer) > 0 and len(self._unsent) < TX_PACKET
        if not hold:
            self.flush()

    def flush(self, wait: bool = True) -> None:
        """Send the output held back; without `wait`, not while another thread is sending."""
        if not self._sending.acquire(blocking=wait):
            return
        try:
            with self._lock:
                data, self._unsent = bytes(self._unsent), bytearray()
            if data:
                self._transmit(data)
        finally:
            self._sending.release()
