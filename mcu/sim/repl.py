"""MicroPython's REPL as the STM32 port speaks it, over a `Link` of bytes (no pty needed: tests feed bytes in and
read bytes out).

Friendly REPL: the banner, `>>> ` and `... ` prompts with echo, Ctrl-A to the raw REPL, Ctrl-B to reprint the
banner, Ctrl-C to cancel the line, Ctrl-D on an empty line for a soft reset, Ctrl-E for paste mode.

Raw REPL (shared/runtime/pyexec.c; docs/twin.md): entered with Ctrl-A it prints RAW_BANNER and `>`. Bytes
accumulate into a command; Ctrl-C clears it, Ctrl-A reprints the banner, Ctrl-B goes back to the friendly REPL,
Ctrl-D ends it. An empty command is a soft reset (`OK\\r\\n`, `MPY: soft reboot\\r\\n`, boot.py, banner); any other
is answered `OK`, run, and framed: stdout, 0x04, the traceback if any, 0x04, then the next `>`.
Raw-paste: the command `\\x05A` followed by Ctrl-A is answered `R\\x01`, the window (2 bytes, little-endian) and
one 0x01; each further window of bytes consumed earns one 0x01; the host's 0x04 is echoed, then the framing.

While code runs, the interrupt character (Ctrl-C unless `micropython.kbd_intr` changed it) raises
KeyboardInterrupt in the running code instead of reaching stdin: see `mcu.sim.uart.Link.feed`.
"""

from __future__ import annotations

import codeop
import struct
import warnings
from typing import Protocol

from mcu.sim.uart import Link, LinkClosed

CTRL_A, CTRL_B, CTRL_C, CTRL_D, CTRL_E = 0x01, 0x02, 0x03, 0x04, 0x05
BACKSPACE, DELETE, ESCAPE, CR, LF, TAB = 0x08, 0x7F, 0x1B, 0x0D, 0x0A, 0x09
RAW_BANNER = b"raw REPL; CTRL-B to exit\r\n"
RAW_PROMPT = b">"
RAW_OK = b"OK"
RAW_PASTE_COMMAND = b"\x05A"
RAW_PASTE_WINDOW = 128  # MICROPY_REPL_STDIN_BUFFER_MAX / 2: the STM32 port keeps the default
EOF = b"\x04"
SOFT_REBOOT = b"MPY: soft reboot\r\n"
PS1, PS2 = b">>> ", b"... "
PASTE_BANNER = b"\r\npaste mode; Ctrl-C to cancel, Ctrl-D to finish\r\n=== "
PASTE_PROMPT = b"=== "


class Machine(Protocol):
    """What the REPL needs from the board (mcu.sim.interpreter.Interpreter)."""

    def reset(self) -> None: ...

    def banner(self) -> bytes: ...

    def script(self, name: str) -> bytes | None: ...

    def execute(self, source: bytes, filename: str = "<stdin>", interactive: bool = False) -> BaseException | None: ...

    def write_exception(self, exc: BaseException) -> None: ...


class Repl:
    """The device loop: boots the board, then serves the friendly or raw REPL until the link closes."""

    def __init__(self, link: Link, board: Machine):
        self.link = link
        self.board = board
        self.raw = False

    def serve(self) -> None:
        try:
            self._boot()
            while True:
                soft_reset = self._raw_repl() if self.raw else self._friendly_repl()
                if soft_reset:
                    self.link.write(SOFT_REBOOT)
                    self._boot()
        except LinkClosed:
            return

    def _boot(self) -> None:
        """A fresh interpreter, then boot.py, and main.py unless in the raw REPL (ports/stm32/boardctrl.c)."""
        self.board.reset()
        for name in ("boot.py",) if self.raw else ("boot.py", "main.py"):
            source = self.board.script(name)
            if source is not None:
                exc = self.board.execute(source, name)
                if exc is not None and not _is_exit(exc):
                    self.board.write_exception(exc)

    # -- raw REPL ----------------------------------------------------------------------------------------------

    def _raw_repl(self) -> bool:
        """Serve the raw REPL until Ctrl-B (returns False) or a soft reset (returns True)."""
        self.link.write(RAW_BANNER)
        while True:
            self.link.write(RAW_PROMPT)
            kind, source = self._raw_command()
            if kind == "friendly":
                self.link.write(b"\r\n")
                self.raw = False
                return False
            if kind == "banner":
                self.link.write(RAW_BANNER)
                continue
            if kind == "unsupported":
                self.link.write(b"R\x00")
                continue
            if kind == "reset":
                self.link.write(RAW_OK + b"\r\n")
                return True
            if kind == "run":
                self.link.write(RAW_OK)
            if self._run_framed(source, interrupted=kind == "interrupted"):
                return True

    def _raw_command(self) -> tuple[str, bytes]:
        """Read one raw REPL command: ("run", code), ("pasted" | "interrupted", code) after raw-paste, ("reset", b"")
        for Ctrl-D on an empty line, or ("friendly" | "banner" | "unsupported", b"")."""
        line = bytearray()
        while True:
            c = self.link.read_byte()
            if c == CTRL_A:
                if len(line) == 2 and line[0] == CTRL_E:
                    if bytes(line) != RAW_PASTE_COMMAND:
                        return "unsupported", b""
                    source, interrupted = self._raw_paste()
                    return ("interrupted" if interrupted else "pasted"), source
                return "banner", b""
            if c == CTRL_B:
                return "friendly", b""
            if c == CTRL_C:
                line.clear()
            elif c == CTRL_D:
                return ("run", bytes(line)) if line else ("reset", b"")
            else:
                line.append(c)

    def _raw_paste(self) -> tuple[bytes, bool]:
        """Receive a raw-paste command with flow control; (source, True) when Ctrl-C cut it short."""
        self.link.write(b"R\x01" + struct.pack("<H", RAW_PASTE_WINDOW) + b"\x01")
        source = bytearray()
        consumed = 0  # bytes taken since the last window was granted
        while True:
            chunk = self.link.read_some(RAW_PASTE_WINDOW)
            stops = [i for i in (chunk.find(CTRL_C), chunk.find(CTRL_D)) if i >= 0]
            end = min(stops) if stops else None
            data = chunk if end is None else chunk[:end]
            source += data
            consumed += len(data)
            while consumed >= RAW_PASTE_WINDOW:
                self.link.write(b"\x01")  # another window of the host's buffer is free
                consumed -= RAW_PASTE_WINDOW
            if end is not None:
                self.link.unread(chunk[end + 1:])
                self.link.write(EOF)  # end of data acknowledged
                return bytes(source), chunk[end] == CTRL_C

    def _run_framed(self, source: bytes, interrupted: bool = False) -> bool:
        """Run a raw REPL command and frame its output; True when it raised SystemExit (a soft reset follows)."""
        exc = KeyboardInterrupt() if interrupted else self.board.execute(source)
        self.link.write(EOF)
        if exc is not None and not _is_exit(exc):
            self.board.write_exception(exc)
        self.link.write(EOF)
        return _is_exit(exc)

    # -- friendly REPL -----------------------------------------------------------------------------------------

    def _friendly_repl(self) -> bool:
        """Serve the friendly REPL until Ctrl-A (False, now raw), Ctrl-B (False, banner again) or a soft reset."""
        self.link.write(self.board.banner())
        while True:
            got = self._readline(PS1)
            if got == CTRL_A:
                self.link.write(b"\r\n")
                self.raw = True
                return False
            if got == CTRL_B:
                self.link.write(b"\r\n")
                return False
            if got == CTRL_C:
                self.link.write(b"\r\n")
                continue
            if got == CTRL_D:
                self.link.write(b"\r\n")
                return True
            if got == CTRL_E:
                source = self._paste_mode()
                interactive = False
            else:
                source = self._continued(got)
                interactive = True
            if source is None or not source.strip():
                continue
            exc = self.board.execute(source, "<stdin>", interactive)
            if _is_exit(exc):
                return True
            if exc is not None:
                self.board.write_exception(exc)

    def _continued(self, first: bytes) -> bytes | None:
        """The first line plus `... ` lines while the statement is incomplete; None when Ctrl-C cancelled it."""
        source = first
        while _incomplete(source):
            more = self._readline(PS2)
            if more == CTRL_C:
                self.link.write(b"\r\n")
                return None
            if isinstance(more, int):
                continue
            if not more.strip():
                break
            source += b"\n" + more
        return source

    def _readline(self, prompt: bytes) -> bytes | int:
        """A line with echo and backspace, or the control character (Ctrl-C always; A, B, D, E on an empty line)."""
        self.link.write(prompt)
        line = bytearray()
        while True:
            c = self.link.read_byte()
            if c == CTRL_C:
                return c
            if c in (CTRL_A, CTRL_B, CTRL_D, CTRL_E):
                if not line:
                    return c
            elif c == CR:
                self.link.write(b"\r\n")
                return bytes(line)
            elif c in (BACKSPACE, DELETE):
                if line:
                    line.pop()
                    self.link.write(b"\b \b")
            elif c == ESCAPE:
                self._skip_escape()
            elif c == TAB:
                line += b"    "
                self.link.write(b"    ")
            elif c >= 0x20:
                line.append(c)
                self.link.write(bytes([c]))
            # LF and other control characters are ignored, as a terminal sends CR for Enter

    def _skip_escape(self) -> None:
        """Swallow a VT100 sequence (arrow keys): ESC [ parameters final-byte."""
        if self.link.read_byte() != ord("["):
            return
        while not 0x40 <= self.link.read_byte() <= 0x7E:
            pass

    def _paste_mode(self) -> bytes | None:
        """Ctrl-E paste mode: lines echoed after `=== ` until Ctrl-D (run them) or Ctrl-C (None)."""
        self.link.write(PASTE_BANNER)
        source = bytearray()
        while True:
            c = self.link.read_byte()
            if c == CTRL_C:
                self.link.write(b"\r\n")
                return None
            if c == CTRL_D:
                self.link.write(b"\r\n")
                return bytes(source)
            if c == CR:
                source += b"\n"
                self.link.write(b"\r\n" + PASTE_PROMPT)
            elif c != LF:
                source.append(c)
                self.link.write(bytes([c]))


def _is_exit(exc: BaseException | None) -> bool:
    """Whether board code ended with SystemExit (a soft reset follows), asked of its class only: isinstance would
    read a `__class__` that board code may define."""
    return exc is not None and issubclass(type(exc), SystemExit)


def _incomplete(source: bytes) -> bool:
    """Whether the REPL should ask for another line (a compound statement, an open bracket or string)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return codeop.compile_command(source.decode("utf-8", "replace"), "<stdin>", "single") is None
        except (SyntaxError, ValueError, OverflowError):
            return False
