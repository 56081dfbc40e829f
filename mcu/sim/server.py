"""The twin on a pseudo-terminal: the pty, its reader (the UART receive side) and the REPL's device thread.

The slave end is put in raw mode (no echo, no CR/LF translation) and stays open in the twin, so clients such as
mpremote or pyserial can open, close and reopen its path (`PtyServer.path`) while the twin keeps serving. Bytes a
client sends are fed to the `Link` by the thread that calls `serve`; the REPL and the code it runs live in other
threads, so an interrupt character reaches running code however busy it is. When the twin ends, the master side
closes and a client blocked on the pty gets an I/O error instead of waiting for ever. The REPL's thread also pulls
the pty itself when it has read everything fed so far (`Link`'s `receive`), so that a board reading a stream of
frames never waits for the reader thread to be scheduled (with the GIL, that took as long as the frame's work).

Board code never ends the twin: should the REPL thread itself fail (a bug in the twin, or a MemoryError that board
code's allocations left it), the failure goes to stderr once and the board restarts as after a hard fault, with a
soft reset; only failures that come back at once, RESTARTS_MAX times within RESTART_WINDOW_S, stop the twin.
"""

from __future__ import annotations

import errno
import os
import select
import sys
import threading
import time
import traceback
import tty
from pathlib import Path

from mcu.sim.faults import FaultSpec, FaultyLine
from mcu.sim.interpreter import Interpreter
from mcu.sim.modules import MPY_ABI
from mcu.sim.repl import Repl
from mcu.sim.uart import KBD_INTR_DEFAULT, Link

POLL_S = 0.2
READ_MAX = 65536  # bytes taken from the pty at once (a pty hands over at most about 4 KB a read)
#: A REPL that fails this often within this many seconds is broken for good (a bug in boot, say): the twin stops.
RESTARTS_MAX, RESTART_WINDOW_S = 5, 10.0
RESTARTED = b"\r\nkbench twin: the REPL failed (%s); soft reset\r\n"


class PtyServer:
    """A board twin served on a fresh pty."""

    def __init__(self, root: Path | str, clock_hz: int, mpy_abi: int = MPY_ABI, faults: FaultSpec = FaultSpec()):
        self._master, self._slave = os.openpty()
        tty.setraw(self._slave)
        self.path = os.ttyname(self._slave)
        self._closing = False
        self._pulling = threading.Lock()  # one thread at a time reads the pty and feeds the link: bytes keep order
        self.link = Link(self._transmit, receive=self._pull_waiting)
        self.board = Interpreter(root, self.link, clock_hz, mpy_abi=mpy_abi)
        self.repl = Repl(self.link, self.board)
        self.faults = FaultyLine(faults, active=lambda: self.link.kbd_char != KBD_INTR_DEFAULT,
                                 reset=lambda: self.link.interrupt(SystemExit))
        self.failure: BaseException | None = None

    def _transmit(self, data: bytes) -> None:
        view = memoryview(self.faults.outbound(data))
        while view:
            try:
                written = os.write(self._master, view)
            except OSError:
                if self._closing:
                    return
                raise
            view = view[written:]

    def _device(self) -> None:
        failures: list[float] = []
        while True:
            try:
                self.repl.serve()
                return
            except BaseException as exc:  # noqa: BLE001 - reported once; the board restarts or the twin stops
                if self._closing:
                    return
                now = time.monotonic()
                failures = [t for t in failures if now - t < RESTART_WINDOW_S] + [now]
                try:
                    traceback.print_exc(file=sys.stderr)
                except BaseException:  # noqa: BLE001 - stderr gone or no memory: the restart matters more
                    pass
                if len(failures) >= RESTARTS_MAX:
                    self.failure = exc
                    return
                try:
                    self.link.write(RESTARTED % type(exc).__name__.encode())
                except BaseException:  # noqa: BLE001 - the client hears the banner of the restart instead
                    pass

    def _pull(self, wait: bool) -> None:
        """Feed the link what the pty holds now, without blocking on the pty; with `wait`, after any other thread's
        pull in progress, else not at all while one is."""
        if not self._pulling.acquire(blocking=wait):
            return
        try:
            while select.select([self._master], [], [], 0)[0]:
                data = os.read(self._master, READ_MAX)
                if not data:
                    return
                self.link.feed(self.faults.inbound(data))
        finally:
            self._pulling.release()

    def _pull_waiting(self) -> None:
        """The REPL's thread, out of bytes: pull what the pty already holds; the reader thread deals with errors."""
        try:
            self._pull(wait=False)
        except (OSError, ValueError, MemoryError):  # no client (EIO), the pty closed, or no memory: not now
            pass

    def serve(self, stop: threading.Event) -> BaseException | None:
        """Serve until `stop` is set or the REPL thread dies; the exception that killed it, if any."""
        device = threading.Thread(target=self._device, name="twin-repl", daemon=True)
        device.start()
        while not stop.is_set() and device.is_alive():
            ready, _, _ = select.select([self._master], [], [], POLL_S)
            if not ready:
                try:
                    self.link.flush(wait=False)  # output a busy board held back (TX_PACKET) goes out within POLL_S
                except OSError:
                    pass  # the pty is closing; a write of the board's own meets the error
                continue
            try:
                self._pull(wait=True)
            except OSError as exc:
                if exc.errno != errno.EIO:
                    raise
                time.sleep(POLL_S)  # no client has the slave open: nothing to read yet
            except MemoryError:
                time.sleep(POLL_S)  # board code holds the memory for a moment; its MemoryError frees it
        return self.failure

    def close(self) -> None:
        self._closing = True
        self.link.close()
        for fd in (self._master, self._slave):
            try:
                os.close(fd)
            except OSError:
                pass
