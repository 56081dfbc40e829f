"""The twin's real VM on a pty: MicroPython's WebAssembly port under Node (mcu/sim/vm/twin.mjs), its line relayed
from a fresh pty, its /dev/twin served by mcu.sim.vm_bridge (the Cortex-M4 kernel behind q15attn, the modelled
peripherals). The VM's REPL, heap, garbage collector, compiler and error messages are MicroPython's own; what the
port lacks (soft reset, raw-paste, Ctrl-C reaching running code, a host folder as flash) twin.mjs supplies.

`VmServer(root, clock_hz)`: `.path` (the pty), `serve(stop)`, `close()`; python -m mcu.sim serves one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
import traceback
import tty
from dataclasses import dataclass
from pathlib import Path

from mcu.sim.faults import FaultSpec, FaultyLine
from mcu.sim.peripherals import Peripherals
from mcu.sim.vm_bridge import NATMOD_BYTES, Bridge

VM_DIR = Path(__file__).resolve().parent / "vm"
REPO = Path(__file__).resolve().parent.parent.parent
#: The npm package of MicroPython's WebAssembly port, as scripts/setup.sh installs it.
WASM_PACKAGE = REPO / ".cache" / "mpy-wasm" / "node_modules" / "@micropython" / "micropython-webassembly-pyscript"
#: sys.implementation._mpy of the F407 firmware: .mpy 6.3, armv7emsp
F407_MPY_ABI = 7942
#: The heap of the board the twin stands for (an STM32F407's MicroPython: about 100 KB of GC heap).
BOARD_HEAP = 102_400
CTRL_C = 0x03
#: A VM that dies is replaced, unless this many died within this many seconds (then the twin stops).
RESTARTS_MAX, RESTART_WINDOW_S = 5, 10.0
RESTARTED = b"\r\nkbench twin: the VM stopped; reset\r\n"
READ_MAX = 4096
#: A Ctrl-C's attention byte the VM leaves unread this long, while code runs, is taken by the Python side.
DEAF_S = 0.05
STOP_S = 5


def vm_missing() -> str:
    """Why the VM twin cannot run here ("" when it can)."""
    if shutil.which("node") is None:
        return "node is not installed (scripts/setup.sh installs Debian's nodejs)"
    if not (WASM_PACKAGE / "micropython.mjs").is_file():
        return f"the MicroPython WebAssembly port is not installed at {WASM_PACKAGE} (scripts/setup.sh)"
    return ""


#: The VM's static data lies below this (mcu/sim/vm/twin.mjs's STATIC_DATA_BYTES): an interrupt map's addresses too.
STATIC_DATA_BYTES = 1 << 20
#: twin.mjs's interrupt map record: marker_at, pending_at, exception, sched_at, sched_value, interrupt_char_at, the
#: marker's three words, taken_at.
MAP_RECORD = struct.Struct("<10i")


@dataclass(frozen=True)
class InterruptMap:
    """Where, in the VM's memory, a Ctrl-C's KeyboardInterrupt is scheduled (mcu/sim/vm/twin.mjs's mapInterrupts,
    sent at each boot on a pipe of its own, which board code cannot reach): the marker at `marker_at` finds that
    memory in node's address space (mcu/sim/vm_process.py)."""

    @classmethod
    def parse(cls, record: bytes) -> "InterruptMap | None":
        """The map in twin.mjs's record of MAP_RECORD.size bytes (None: the VM found none)."""
        ints = MAP_RECORD.unpack(record)
        if not ints[0] or not all(0 < a < STATIC_DATA_BYTES for a in (*ints[:3], ints[5], ints[9])):
            return None
        return cls(*ints[:6], marker=struct.pack("<3i", *ints[6:9]), taken_at=ints[9])

    marker_at: int
    pending_at: int  # MP_STATE_THREAD(mp_pending_exception)
    exception: int  # &MP_STATE_VM(mp_kbd_exception), what a Ctrl-C makes pending
    sched_at: int  # MP_STATE_VM(sched_state) (0: none changes)
    sched_value: int
    interrupt_char_at: int  # mp_interrupt_char
    marker: bytes = b""
    taken_at: int = 0  # the count of Ctrl-Cs the Python side judged, which twin.mjs reads


class VmMemory:
    """The VM's linear memory in node's address space (/proc/PID/mem, which a parent may read and write): found as
    the mapping that holds the interrupt map's marker at its offset."""

    def __init__(self, pid: int, where: InterruptMap):
        self._fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)
        try:
            with open(f"/proc/{pid}/maps") as maps:
                starts = [int(line.split("-", 1)[0], 16) for line in maps if line.split()[1].startswith("rw")]
            self.base = next(start for start in starts if self._marked(start, where))
        except (StopIteration, OSError, ValueError):
            os.close(self._fd)
            raise OSError("the VM's memory was not found in node's") from None

    def _marked(self, start: int, where: InterruptMap) -> bool:
        try:
            return os.pread(self._fd, len(where.marker), start + where.marker_at) == where.marker
        except OSError:
            return False

    def read(self, at: int) -> int:
        return struct.unpack("<i", os.pread(self._fd, 4, self.base + at))[0]

    def write(self, at: int, value: int) -> None:
        os.pwrite(self._fd, struct.pack("<i", value - (1 << 32) if value >= 1 << 31 else value), self.base + at)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


class VmServer:
    """A twin whose board is the real MicroPython VM, served on a fresh pty."""

    def __init__(self, root: Path | str, clock_hz: int, heap: int = BOARD_HEAP, natmod_bytes: int = NATMOD_BYTES,
                 faults: FaultSpec = FaultSpec(), mpy_abi: int = F407_MPY_ABI):
        missing = vm_missing()
        if missing:
            raise RuntimeError(missing)
        self.root = Path(root)
        self.heap = heap
        self.mpy_abi = mpy_abi  # the sys.implementation._mpy the VM announces (the F407 firmware's by default)
        self.natmod_bytes = natmod_bytes
        self.hardware = Peripherals(clock_hz)  # the board's clock and die: one for every VM of this twin
        self._master, self._slave = os.openpty()
        tty.setraw(self._slave)
        self.path = os.ttyname(self._slave)  # the same pty for every VM: a client's connection outlives a restart
        self._closing = False
        self.failure: BaseException | None = None
        self.restarts = 0
        self._resetting = False  # a reset the line faults asked for: not a VM that died
        self.faults = FaultyLine(faults, active=lambda: self.bridge.serving, reset=self._reset)
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - node's diagnostics, closed by close()
        self._line_lock = threading.Lock()  # the pty's reader hands bytes to the VM that runs now
        self._spawn()
        threading.Thread(target=self._to_vm, name="twin-line-in", daemon=True).start()

    def _spawn(self) -> None:
        """A fresh VM (node) with its own pipes and bridge, its output relayed to the pty."""
        self._stderr.seek(0)
        self._stderr.truncate()  # last_words() is this VM's
        self._bridge_ours, theirs = socket.socketpair()
        maps_read, maps_write = os.pipe()
        attention_read, self._attention_write = os.pipe()
        os.set_blocking(attention_read, False)
        os.set_blocking(self._attention_write, False)
        self.process = subprocess.Popen(
            ["node", str(VM_DIR / "twin.mjs"), str(WASM_PACKAGE), str(self.root), str(VM_DIR / "board"),
             str(self.heap), str(theirs.fileno()), str(attention_read), str(self.mpy_abi), str(maps_write)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            pass_fds=(theirs.fileno(), attention_read, maps_write), cwd=VM_DIR)
        theirs.close()
        os.close(maps_write)
        self.interrupt_map: InterruptMap | None = None  # where a Ctrl-C is written in this VM (twin.mjs, each boot)
        self._attention_read = attention_read  # kept: a Ctrl-C the VM leaves unread is taken from here (_take_ctrl_c)
        self._memory = None
        self.bridge = Bridge(self._bridge_ours, self.hardware, self.natmod_bytes)
        for target, name in ((self._from_vm, "twin-line-out"), (self._serve_bridge, "twin-bridge")):
            threading.Thread(target=target, args=(self.process, self.bridge), name=name, daemon=True).start()
        threading.Thread(target=self._read_maps, args=(self.process, maps_read), name="twin-maps", daemon=True).start()

    def _read_maps(self, process: subprocess.Popen, maps_read: int) -> None:
        """twin.mjs's interrupt map at each boot of this node (a soft reset boots a fresh VM in it)."""
        with os.fdopen(maps_read, "rb") as maps:
            while record := maps.read(MAP_RECORD.size):
                if len(record) < MAP_RECORD.size:
                    return
                with self._line_lock:
                    if process is not self.process:
                        return
                    if self._memory is not None:
                        self._memory.close()
                    self._memory = None
                    self.interrupt_map = InterruptMap.parse(record)

    def _to_vm(self) -> None:
        """Host -> board: the pty's bytes to the running VM's stdin; a Ctrl-C also to its attention fd. Bytes that
        reach a VM as it dies are lost, as a board's are when it resets."""
        while not self._closing:
            try:
                data = os.read(self._master, READ_MAX)
            except OSError:  # EIO: no client holds the pty's slave end now
                if self._closing:
                    return
                threading.Event().wait(0.01)
                continue
            if not data:
                return
            with self._line_lock:
                try:
                    data = self.faults.inbound(data)
                    if CTRL_C in data:
                        with contextlib.suppress(BlockingIOError):
                            os.write(self._attention_write, bytes([CTRL_C]) * data.count(CTRL_C))
                        threading.Timer(DEAF_S, self._take_ctrl_c, args=(self.process, data.count(CTRL_C))).start()
                    self.process.stdin.write(data)
                    self.process.stdin.flush()
                except (OSError, ValueError):
                    pass  # the VM died: serve() starts another

    def _take_ctrl_c(self, process: subprocess.Popen, count: int) -> None:
        """A Ctrl-C whose attention byte the VM left unread for DEAF_S while code runs with the interrupt character set
        (a loop that only computes, a kernel call: no JS runs to look) is judged here, as a UART interrupt would judge
        it: its KeyboardInterrupt is written into the VM's memory, where the VM's next check raises it, and twin.mjs
        is told by the count at `taken_at`. Without access to node's memory (no ptrace rights) it waits for the VM to
        look, as before."""
        with self._line_lock:
            where = self.interrupt_map
            if process is not self.process or process.poll() is not None or where is None:
                return
            try:
                memory = self._memory or VmMemory(process.pid, where)
            except OSError:
                return
            self._memory = memory
            for _ in range(count):
                unread = struct.unpack("i", fcntl.ioctl(self._attention_read, termios.FIONREAD, b"\0" * 4))[0]
                if not unread or memory.read(where.interrupt_char_at) != CTRL_C:
                    return
                try:
                    os.read(self._attention_read, 1)
                except BlockingIOError:
                    return  # twin.mjs read it first: its verdict
                memory.write(where.exception + 8, 0)  # the exception's traceback_data, as mp_sched_keyboard_interrupt
                if where.sched_at:
                    memory.write(where.sched_at, where.sched_value)
                memory.write(where.pending_at, where.exception)
                memory.write(where.taken_at, memory.read(where.taken_at) + 1)

    def _from_vm(self, process: subprocess.Popen, bridge: Bridge) -> None:
        """Board -> host: what this VM prints, to the pty."""
        try:
            while data := process.stdout.read1(READ_MAX):
                view = memoryview(self.faults.outbound(data))
                while view:
                    view = view[os.write(self._master, view):]
        except (OSError, ValueError):
            pass

    def _serve_bridge(self, process: subprocess.Popen, bridge: Bridge) -> None:
        try:
            bridge.serve()
        except OSError:
            pass
        except BaseException:  # noqa: BLE001 - the VM's call fails; the twin says why on its stderr
            traceback.print_exc(file=sys.stderr)
            with contextlib.suppress(OSError):
                bridge.line.shutdown(socket.SHUT_RDWR)

    def serve(self, stop: threading.Event) -> BaseException | None:
        """Serve until `stop` is set; a VM that dies is replaced by a fresh one on the same pty and flash (a reset),
        saying so on the line, unless RESTARTS_MAX died within RESTART_WINDOW_S: then the reason it gave."""
        deaths: list[float] = []
        while not stop.wait(0.05):
            if self.process.poll() is None or self._closing:
                continue
            now = time.monotonic()
            if self._resetting:  # the line faults' reset: a board reset, not a failure
                self._resetting = False
            else:
                deaths = [t for t in deaths if now - t < RESTART_WINDOW_S] + [now]
                why = f"the VM exited with status {self.process.returncode}: {self.last_words()}"
                if len(deaths) >= RESTARTS_MAX:
                    self.failure = RuntimeError(why)
                    break
                print(f"kbench twin: {why}; starting another", file=sys.stderr, flush=True)
            with self._line_lock:
                self._end_vm()
                with contextlib.suppress(OSError):
                    os.write(self._master, RESTARTED)
                self._spawn()
            self.restarts += 1
        return self.failure

    def _reset(self) -> bool:
        """The line faults' reset (FaultSpec.reset): the board resets while its frame server runs; serve() boots a
        fresh VM. True when there was a VM to reset."""
        if self.process.poll() is not None:
            return False
        self._resetting = True
        self.bridge.serving = False
        self.process.kill()
        return True

    def _end_vm(self) -> None:
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self._memory is not None:
            self._memory.close()
            self._memory = None
        for close in (lambda: os.close(self._attention_write), lambda: os.close(self._attention_read),
                      self._bridge_ours.close):
            with contextlib.suppress(OSError):
                close()

    def last_words(self) -> str:
        """The last error line node wrote to its stderr, else its last line (cut to 300 characters); "" for none."""
        self._stderr.seek(0)
        lines = [line.strip() for line in self._stderr.read()[-65536:].decode(errors="replace").splitlines()]
        lines = [line for line in lines if line and not line.startswith("Node.js v")]
        errors = [line for line in lines if "Error" in line]
        return (errors or lines or [""])[-1][:300]

    def close(self) -> None:
        self._closing = True
        self._end_vm()
        for fd in (self._master, self._slave):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._stderr.close()
