"""Run the board twin on a pseudo-terminal: `python -m mcu.sim [--root DIR] [--clock HZ] [--mpy-abi N]
[--faults SPEC] [--exit-on-stdin-eof]`.

The first line of stdout is the pty's path (e.g. /dev/pts/7): give it to `mpremote connect`, to pyserial, or to
kbench's MCU target. The twin speaks MicroPython's REPL as the STM32 port does (docs/twin.md) over a board
filesystem that is DIR (default: a fresh temporary folder, deleted at exit). Ctrl-C (SIGINT), SIGTERM or SIGHUP
end it, status 0, and so does the end of stdin with --exit-on-stdin-eof (a host that starts the twin as its child
gives it a pipe, so the twin ends with the host however the host ends). --mpy-abi makes the twin announce another
sys.implementation._mpy; --faults injects line faults (mcu/sim/faults.py).
"""

from __future__ import annotations

import contextlib
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


def build_parser() -> Parser:
    parser = Parser(prog="python -m mcu.sim", description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="the board's filesystem: an existing folder (default: a temporary one)")
    parser.add_argument("--clock", type=integer("clock", 1_000_000, 1_000_000_000), default=DEFAULT_CLOCK_HZ,
                        help=f"core clock in Hz for DWT_CYCCNT and ticks (default {DEFAULT_CLOCK_HZ})")
    parser.add_argument("--mpy-abi", type=integer("mpy-abi", 0, 0xFFFF), default=MPY_ABI,
                        help=f"sys.implementation._mpy to announce (default {MPY_ABI}: .mpy 6.3, armv7emsp)")
    parser.add_argument("--faults", type=FaultSpec.argument, default=FaultSpec(),
                        help="line faults while a frame server runs, e.g. drop=0.001,flip=0.001,delay=0.01,reset=40")
    parser.add_argument("--exit-on-stdin-eof", action="store_true", help="stop when stdin reaches its end")
    return parser


def serve(root: str | None, clock_hz: int, mpy_abi: int = MPY_ABI, faults: FaultSpec = FaultSpec(),
          exit_on_stdin_eof: bool = False) -> int:
    with contextlib.ExitStack() as stack:
        if root is None:
            root = stack.enter_context(tempfile.TemporaryDirectory(prefix="kbench-twin-"))
        elif not Path(root).is_dir():
            raise SpecError(f"--root {root!r} is not a directory")
        server = PtyServer(root, clock_hz, mpy_abi, faults)
        stack.callback(server.close)
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGINT too where a shell ignored it
            signal.signal(signum, lambda number, frame: stop.set())
        if exit_on_stdin_eof:
            threading.Thread(target=lambda: (sys.stdin.buffer.read(), stop.set()), name="twin-stdin",
                             daemon=True).start()
        # the path last: whoever reads it may signal the twin at once, so the handlers must be in place
        print(server.path, flush=True)
        print(f"kbench twin on {server.path}: root {root}, clock {clock_hz} Hz", file=sys.stderr, flush=True)
        failure = server.serve(stop)
        if failure is not None:
            raise TargetError(f"the twin's REPL stopped: {type(failure).__name__}: {failure}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    def body() -> int:
        args = build_parser().parse_args(argv)
        return serve(args.root, args.clock, args.mpy_abi, args.faults, args.exit_on_stdin_eof)

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
