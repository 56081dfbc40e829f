"""Run the board twin on a pseudo-terminal: a Cortex-M4 board speaking MicroPython's REPL, for hosts without a board.

    python -m mcu.sim [--root DIR] [--clock HZ] [--mpy-abi N] [--faults SPEC] [--exit-on-stdin-eof]

The first line of stdout is the pty's path (e.g. /dev/pts/7): give it to `mpremote connect`, to pyserial, or to
kbench's MCU target. The board is the real MicroPython VM (its WebAssembly port under Node, with a heap of the F407's
size: mcu/sim/vm_process.py, docs/twin.md), speaking its own REPL over a board filesystem that is DIR (default: a
fresh temporary folder, deleted at exit). Ctrl-C (SIGINT), SIGTERM or SIGHUP end it, status 0, and so does the end of
stdin with --exit-on-stdin-eof (a host that starts the twin as its child gives it a pipe, so the twin ends with the
host however the host ends). --mpy-abi makes the twin announce another sys.implementation._mpy; --faults injects line
faults (mcu/sim/faults.py).

Exit status: 0 stopped (Ctrl-C, SIGTERM or SIGHUP while serving is how a twin is stopped, not an interruption);
1 the twin cannot run here (no Node, or the port's package is not installed: it says which) or its VM kept failing;
2 bad arguments only (one `kbench: error:` line naming the value); 130 interrupted by Ctrl-C before the pty was served.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Sequence

from host.cli_common import Parser, guard, integer
from host.errors import SpecError, TargetError
from mcu.sim.faults import FaultSpec
from mcu.sim.peripherals import DEFAULT_CLOCK_HZ
from mcu.sim.vm_process import F407_MPY_ABI, VmServer, vm_missing


def build_parser() -> Parser:
    parser = Parser(prog="python -m mcu.sim", doc=__doc__)
    parser.add_argument("--root", metavar="DIR",
                        help="the board's filesystem: an existing folder (default: a temporary one, deleted at exit)")
    parser.add_argument("--clock", type=integer("clock", 1_000_000, 1_000_000_000), default=DEFAULT_CLOCK_HZ,
                        help=f"core clock in Hz for DWT_CYCCNT and ticks (default {DEFAULT_CLOCK_HZ})")
    parser.add_argument("--mpy-abi", type=integer("mpy-abi", 0, 0xFFFF), default=F407_MPY_ABI,
                        help=f"sys.implementation._mpy to announce (default {F407_MPY_ABI}: .mpy 6.3, armv7emsp)")
    parser.add_argument("--faults", type=FaultSpec.argument, default=FaultSpec(),
                        help="line faults while a frame server runs, e.g. drop=0.001,flip=0.001,delay=0.01,reset=40 "
                             "(default: none)")
    parser.add_argument("--exit-on-stdin-eof", action="store_true",
                        help="stop when stdin reaches its end (default: run until a signal)")
    return parser


def serve(root: str | None, clock_hz: int, mpy_abi: int = F407_MPY_ABI, faults: FaultSpec = FaultSpec(),
          exit_on_stdin_eof: bool = False) -> int:
    if root is not None and not Path(root).is_dir():
        raise SpecError(f"--root {root!r} is not a directory")
    if vm_missing():
        raise TargetError(f"the twin cannot run here: {vm_missing()}")
    with contextlib.ExitStack() as stack:
        if root is None:
            root = stack.enter_context(tempfile.TemporaryDirectory(prefix="kbench-twin-"))
        server = VmServer(root, clock_hz, faults=faults, mpy_abi=mpy_abi)
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
        return serve(args.root, args.clock, args.mpy_abi, args.faults, args.exit_on_stdin_eof)

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
