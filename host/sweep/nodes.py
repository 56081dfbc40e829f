"""`python -m host.cluster`: the nodes of a kbench cluster (docs/cluster.md), each started with one command.

    python -m host.cluster scheduler [--port 8786]                    the Dask scheduler the sweep connects to
    python -m host.cluster worker --scheduler tcp://HOST:8786 --board /dev/ttyACM0   a worker owning a board
    python -m host.cluster worker --scheduler tcp://HOST:8786 --gpu 1               a worker owning GPU 1
    python -m host.cluster worker --scheduler tcp://HOST:8786 --sim                 a worker owning a board twin
    python -m host.cluster worker --scheduler tcp://HOST:8786                       a worker for cpu and asic rows

A worker checks its devices before it joins (the board answers HELLO and gets its code deployed, CuPy sees the GPU),
then advertises them as Dask resources and measures one row at a time until it is stopped (Ctrl-C or SIGTERM, which
close the board's link). A sweep then runs there with `python -m host.compare --cluster tcp://HOST:8786 ...`.
Exit status: 0 stopped; 1 a device or the scheduler could not be reached; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import platform
import signal
import sys
from pathlib import Path

from host.cli_common import Parser, guard, integer, real
from host.errors import SpecError, UnavailableError

DEFAULT_PORT = 8786
DEFAULT_SCHEDULER = f"tcp://127.0.0.1:{DEFAULT_PORT}"
#: How long a worker tries to reach its scheduler at start before it gives up. A worker whose scheduler goes away
#: stops (exit 1): after a scheduler restart, start the workers again.
CONNECT_S = 30.0


def _settings_class(target: str) -> type:
    """A target's typed Settings, found by name in the registry (host code imports no target directly)."""
    from host.sweep.registry import TARGETS

    return importlib.import_module(TARGETS[target]).Settings


def _worker_parser(sub: argparse._SubParsersAction) -> None:
    default_baud = _settings_class("mcu")().baud
    parser = sub.add_parser("worker", help="start a worker owning this machine's board, twin or GPU",
                            description="Start a Dask worker for kbench sweeps, owning the devices named here.")
    parser.add_argument("--scheduler", default=DEFAULT_SCHEDULER, metavar="ADDRESS",
                        help=f"the scheduler's address (default {DEFAULT_SCHEDULER})")
    parser.add_argument("--name", default=None, help="the worker's name in rows and logs (default: host and device)")
    board = parser.add_mutually_exclusive_group()
    board.add_argument("--board", metavar="PORT", default=None, help="a board on this serial port, e.g. /dev/ttyACM0")
    board.add_argument("--sim", action="store_true", help="a board twin (python -m mcu.sim), started and deployed here")
    parser.add_argument("--baud", type=integer("baud", 1200, 12_000_000), default=default_baud,
                        help=f"the board's baud rate, ignored by USB CDC (default {default_baud})")
    parser.add_argument("--sim-faults", metavar="SPEC", default="", help="line faults for the twin (docs/twin.md)")
    gpu = parser.add_mutually_exclusive_group()
    gpu.add_argument("--gpu", nargs="?", const="", default=None, metavar="INDEX",
                     help="a CUDA GPU: its index (sets CUDA_VISIBLE_DEVICES), or none for the one CUDA shows first")
    gpu.add_argument("--fake-gpu", action="store_true",
                     help="the numpy fake GPU instead (for trying a cluster out on machines without one)")
    parser.add_argument("--connect-timeout", type=real("connect-timeout", 1, 3600), default=CONNECT_S,
                        help=f"seconds to reach the scheduler before giving up (default {CONNECT_S:g})")
    parser.set_defaults(handler=worker)


def _scheduler_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("scheduler", help="start the scheduler sweeps and workers connect to",
                            description="Start a Dask scheduler for kbench sweeps.")
    parser.add_argument("--host", default="", help="the interface to listen on (default: all)")
    parser.add_argument("--port", type=integer("port", 0, 65535), default=DEFAULT_PORT,
                        help=f"the port (default {DEFAULT_PORT}; 0 picks a free one)")
    parser.set_defaults(handler=scheduler)


def owned_devices(args: argparse.Namespace) -> dict[str, object]:
    """The worker's devices as target settings: the board or twin (mcu), the GPU (gpu)."""
    BoardSettings, GpuSettings = _settings_class("mcu"), _settings_class("gpu")
    if args.sim_faults and not args.sim:
        raise SpecError(f"--sim-faults {args.sim_faults!r} needs --sim (faults are injected by the twin)")
    owned: dict[str, object] = {}
    if args.board or args.sim:
        if args.sim_faults:
            from mcu.sim.faults import FaultSpec

            FaultSpec.parse(args.sim_faults, "--sim-faults")
        owned["mcu"] = BoardSettings(serial=args.board, baud=args.baud, sim=args.sim, sim_faults=args.sim_faults)
    if args.gpu is not None or args.fake_gpu:
        owned["gpu"] = GpuSettings(device="fake" if args.fake_gpu else "cuda")
    return owned


def default_name(args: argparse.Namespace) -> str:
    """host-device: 'lab3-ttyACM0', 'lab3-gpu1', 'lab3-twin-4242' (a pid where one host may run several of a kind:
    the scheduler refuses a second worker of the same name)."""
    parts = [platform.node() or "host"]
    if args.board:
        parts.append(Path(args.board).name)
    if args.sim:
        parts.append(f"twin-{os.getpid()}")
    if args.gpu is not None or args.fake_gpu:
        parts.append(f"gpu{args.gpu}" if args.gpu else f"{'fake' if args.fake_gpu else ''}gpu-{os.getpid()}")
    if len(parts) == 1:
        parts.append(f"cpu-{os.getpid()}")
    return "-".join(parts)


def worker(args: argparse.Namespace) -> int:
    from host.sweep.cluster import check_address

    check_address(args.scheduler, "--scheduler")
    if args.gpu:
        if not args.gpu.isascii() or not args.gpu.isdigit():
            raise SpecError(f"--gpu {args.gpu!r} is not a GPU index; allowed: 0, 1, 2, ...")
        os.environ["CUDA_VISIBLE_DEVICES"] = args.gpu  # before anything initialises CUDA
    owned = owned_devices(args)
    name = args.name or default_name(args)
    from host.sweep.worker import KbenchWorker

    plugin = KbenchWorker(owned)
    say(f"{name}: checking {', '.join(owned) or 'no devices (cpu and asic rows only)'}")
    plugin.open()  # a device that does not answer stops the worker here, before it joins
    try:
        return asyncio.run(_serve_worker(args.scheduler, name, plugin, args.connect_timeout))
    finally:
        plugin.close()


async def _serve_worker(address: str, name: str, plugin, timeout: float) -> int:
    from distributed import Worker

    stop = _stop_event()
    node = Worker(address, name=name, nthreads=1, resources=plugin.resources(), plugins=(plugin,), memory_limit=0,
                  death_timeout=timeout)
    try:
        await asyncio.wait_for(node.start(), timeout)
    except (OSError, asyncio.TimeoutError) as exc:
        await node.close()
        raise UnavailableError(f"--scheduler {address}: not reached within {timeout:g} s "
                               f"({type(exc).__name__})") from None
    except RuntimeError as exc:  # the scheduler refused it: a name already taken, another Dask version
        await node.close()
        cause = str(exc.__cause__ or exc)
        if "name taken" in cause:
            raise UnavailableError(f"--name {name!r} is already taken on {address}; choose another (or leave --name "
                                   "out: the default adds this process's id)") from None
        raise UnavailableError(f"--scheduler {address} refused worker {name}: {cause}") from None
    devices = "; ".join(f"{target}: {device}" for target, device in plugin.devices.items()) or "none"
    resources = ", ".join(f"{key}={value:g}" for key, value in plugin.resources().items()) or "none"
    say(f"worker {name} at {node.address}, scheduler {address}; devices: {devices}; resources: {resources}")
    finished = asyncio.ensure_future(node.finished())
    await asyncio.wait([finished, asyncio.ensure_future(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
    if not finished.done():
        say(f"worker {name}: stopping")
        await node.close()
        return 0
    say(f"worker {name}: the scheduler at {address} is gone")
    return 1


def scheduler(args: argparse.Namespace) -> int:
    return asyncio.run(_serve_scheduler(args.host or None, args.port))


async def _serve_scheduler(host: str | None, port: int) -> int:
    from distributed import Scheduler

    stop = _stop_event()
    try:
        node = Scheduler(host=host, port=port, dashboard=False)
        await node.start()
    except (OSError, RuntimeError) as exc:  # Dask wraps the socket's OSError in "Scheduler failed to start."
        cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
        raise UnavailableError(f"the scheduler cannot listen on {host or '*'}:{port}: "
                               f"{getattr(cause, 'strerror', None) or cause}") from None
    say(f"scheduler at {node.address} (sweeps: python -m host.compare --cluster {node.address} ...)")
    await stop.wait()
    say("scheduler: stopping")
    await node.close()
    return 0


def _stop_event() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM, so a node closes cleanly (a worker closes its board's link)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    return stop


def say(line: str) -> None:
    print(f"kbench cluster: {line}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m host.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--verbose", action="store_true", help="Dask's own log lines too (default: warnings only)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{scheduler,worker}")
    _scheduler_parser(sub)
    _worker_parser(sub)

    def body() -> int:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
        importlib.import_module("distributed")  # configures its loggers, which are then quietened to warnings

        logging.getLogger("distributed").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
        return args.handler(args)

    return guard(body)

