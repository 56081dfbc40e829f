"""Run the board twin on a pseudo-terminal: a Cortex-M4 board speaking MicroPython's REPL, for hosts without a board.

    python -m mcu.sim [--root DIR] [--clock HZ] [--mpy-abi N] [--faults SPEC] [--memory-limit MIB] [--exit-on-stdin-eof]
                      [--vm]

The first line of stdout is the pty's path (e.g. /dev/pts/7): give it to `mpremote connect`, to pyserial, or to
kbench's MCU target. The twin speaks MicroPython's REPL as the STM32 port does (docs/twin.md) over a board
filesystem that is DIR (default: a fresh temporary folder, deleted at exit). Ctrl-C (SIGINT), SIGTERM or SIGHUP
end it, status 0, and so does the end of stdin with --exit-on-stdin-eof (a host that starts the twin as its child
gives it a pipe, so the twin ends with the host however the host ends). --mpy-abi makes the twin announce another
sys.implementation._mpy; --faults injects line faults (mcu/sim/faults.py). --memory-limit caps the twin process's
address space (MEMORY_LIMIT_MIB by default, 0 for none) so that board code which allocates more than the host can
spare (`b'a' * 2**31`) gets a MemoryError, as on a board, instead of taking the host's memory. --vm runs the board
as the real MicroPython VM (its WebAssembly port under Node, a heap of the F407's size: mcu/sim/vm_process.py,
docs/twin.md "The VM twin").

Exit status: 0 stopped (Ctrl-C, SIGTERM or SIGHUP while serving is how a twin is stopped, not an interruption);
1 the twin's REPL failed; 2 bad arguments only (one `kbench: error:` line naming the value); 130 interrupted by
Ctrl-C before the pty was served.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Sequence

from host.cli_common import Parser, guard, integer
from host.errors import SpecError, TargetError
from mcu.sim.faults import FaultSpec
from mcu.sim.interpreter import DEFAULT_CLOCK_HZ
from mcu.sim.modules import MPY_ABI
from mcu.sim.server import PtyServer

#: The twin process's address-space limit (RLIMIT_AS), in MiB. Measured on Linux x86-64, CPython 3.11, unicorn
#: 2.1.4: the twin maps 26 MB at start, 166 MB once numpy and Unicorn are imported and 1.23 GB once the Cortex-M4
#: emulator exists (Unicorn reserves a 1 GiB translation buffer), 1.39 GB after a kernel call with its threads' stacks
#: and malloc arenas. 2 GiB leaves about 600 MB to board code, which a board's 100 KB heap never needs, and makes any
#: single allocation of 2 GiB fail at once. Raise it with --memory-limit where another Unicorn reserves more.
MEMORY_LIMIT_MIB = 2048
#: BLAS threads the twin never uses: each reserves address space that would count against the limit.
SINGLE_THREADED_BLAS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def limit_memory(mib: int) -> None:
    """Cap the address space of this process at `mib` MiB (0: leave it), never above a limit already in place."""
    if mib <= 0:
        return
    for name, value in SINGLE_THREADED_BLAS.items():
        os.environ.setdefault(name, value)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    wanted = mib << 20
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if soft == resource.RLIM_INFINITY or wanted < soft:
        resource.setrlimit(resource.RLIMIT_AS, (wanted, hard))


def build_parser() -> Parser:
    parser = Parser(prog="python -m mcu.sim", doc=__doc__)
    parser.add_argument("--root", metavar="DIR",
                        help="the board's filesystem: an existing folder (default: a temporary one, deleted at exit)")
    parser.add_argument("--clock", type=integer("clock", 1_000_000, 1_000_000_000), default=DEFAULT_CLOCK_HZ,
                        help=f"core clock in Hz for DWT_CYCCNT and ticks (default {DEFAULT_CLOCK_HZ})")
    parser.add_argument("--mpy-abi", type=integer("mpy-abi", 0, 0xFFFF), default=MPY_ABI,
                        help=f"sys.implementation._mpy to announce (default {MPY_ABI}: .mpy 6.3, armv7emsp)")
    parser.add_argument("--faults", type=FaultSpec.argument, default=FaultSpec(),
                        help="line faults while a frame server runs, e.g. drop=0.001,flip=0.001,delay=0.01,reset=40 "
                             "(default: none)")
    parser.add_argument("--memory-limit", type=integer("memory-limit", 0, 1 << 24), default=MEMORY_LIMIT_MIB,
                        metavar="MIB", help=f"address-space limit of the twin in MiB; board code beyond it gets "
                        f"MemoryError (default {MEMORY_LIMIT_MIB}; 0: no limit)")
    parser.add_argument("--vm", action="store_true",
                        help="run the board as the real MicroPython VM (WebAssembly, under Node; default: the "
                             "CPython twin)")
    parser.add_argument("--exit-on-stdin-eof", action="store_true",
                        help="stop when stdin reaches its end (default: run until a signal)")
    return parser


def serve(root: str | None, clock_hz: int, mpy_abi: int = MPY_ABI, faults: FaultSpec = FaultSpec(),
          exit_on_stdin_eof: bool = False, vm: bool = False) -> int:
    with contextlib.ExitStack() as stack:
        if root is None:
            root = stack.enter_context(tempfile.TemporaryDirectory(prefix="kbench-twin-"))
        elif not Path(root).is_dir():
            raise SpecError(f"--root {root!r} is not a directory")
        if vm:
            from mcu.sim.vm_process import VmServer, vm_missing

            if vm_missing():
                raise TargetError(f"--vm: {vm_missing()}")
            server = VmServer(root, clock_hz, faults=faults, mpy_abi=mpy_abi)
        else:
            server = PtyServer(root, clock_hz, mpy_abi, faults)
        stack.callback(server.close)
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGINT too where a shell ignored it
            signal.signal(signum, lambda number, frame: stop.set())
        if exit_on_stdin_eof:
            threading.Thread(target=_set_at_stdin_eof, args=(stop,), name="twin-stdin", daemon=True).start()
        # the path last: whoever reads it may signal the twin at once, so the handlers must be in place
        print(server.path, flush=True)
        print(f"kbench twin on {server.path}: root {root}, clock {clock_hz} Hz", file=sys.stderr, flush=True)
        failure = server.serve(stop)
        if failure is not None:
            raise TargetError(f"the twin's REPL stopped: {type(failure).__name__}: {failure}")
    return 0


def _set_at_stdin_eof(stop: threading.Event) -> None:
    """Set `stop` when stdin ends. Reads the descriptor itself, not sys.stdin's buffer: a daemon thread blocked in a
    buffered read holds the buffer's lock, and the interpreter aborts when it finalises stdin at exit after a signal
    ("Fatal Python error: _enter_buffered_busy")."""
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    stop.set()


def main(argv: Sequence[str] | None = None) -> int:
    def body() -> int:
        args = build_parser().parse_args(argv)
        limit_memory(args.memory_limit)
        return serve(args.root, args.clock, args.mpy_abi, args.faults, args.exit_on_stdin_eof, args.vm)

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
