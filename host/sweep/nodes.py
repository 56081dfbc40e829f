"""`python -m host.cluster`: the nodes of a kbench cluster (docs/cluster.md), each started with one command.

    python -m host.cluster scheduler [--port 8786]                          the Dask scheduler the sweep connects to
    python -m host.cluster worker --scheduler tcp://HOST:8786 --serial /dev/ttyACM0   a worker owning a board
    python -m host.cluster worker --scheduler tcp://HOST:8786 --gpu-device cuda --gpu 1   a worker owning GPU 1
    python -m host.cluster worker --scheduler tcp://HOST:8786 --sim                   a worker owning a board twin
    python -m host.cluster worker --scheduler tcp://HOST:8786                         a worker for rows of no device

The worker's device options are the targets' own (host/target_api.py ClusterNeeds: the same flags as host.compare's,
with `--gpu INDEX` beside --gpu-device cuda). A worker checks its devices before it joins (the board answers HELLO and
gets its code deployed, CuPy sees the GPU), then advertises them as Dask resources and measures one row at a time
until it is stopped (Ctrl-C or SIGTERM, which close the board's link). A sweep then runs there with
`python -m host.compare --cluster tcp://HOST:8786 ...`.
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

from host.cli_common import Parser, guard, integer, real
from host.errors import UnavailableError
from host.sweep.registry import cluster_needs

DEFAULT_PORT = 8786
DEFAULT_SCHEDULER = f"tcp://127.0.0.1:{DEFAULT_PORT}"
#: How long a worker tries to reach its scheduler at start before it gives up. A worker whose scheduler goes away
#: stops (exit 1): after a scheduler restart, start the workers again.
CONNECT_S = 30.0


def _worker_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("worker", help="start a worker owning this machine's board, twin or GPU",
                            description="Start a Dask worker for kbench sweeps, owning the devices named here.")
    parser.add_argument("--scheduler", default=DEFAULT_SCHEDULER, metavar="ADDRESS",
                        help=f"the scheduler's address (default {DEFAULT_SCHEDULER})")
    parser.add_argument("--name", default=None, help="the worker's name in rows and logs (default: host and device)")
    devices = {}
    for target, needs in cluster_needs().items():
        group = parser.add_argument_group(f"{target} device, owned when one of these is given ({needs.usage}; its "
                                          f"rows ask for {needs.resource})")
        needs.add_options(group)
        dests = {}
        for action in group._group_actions:
            action.default = argparse.SUPPRESS  # an option not given is absent: a device is owned when one is given
            dests.update({flag: action.dest for flag in action.option_strings})
        devices[target] = {field: dests[flag] for field, flag in needs.options.items()}
    parser.add_argument("--connect-timeout", type=real("connect-timeout", 1, 3600), default=CONNECT_S,
                        help=f"seconds to reach the scheduler before giving up (default {CONNECT_S:g})")
    parser.set_defaults(handler=worker, devices=devices)


def _scheduler_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("scheduler", help="start the scheduler sweeps and workers connect to",
                            description="Start a Dask scheduler for kbench sweeps.")
    parser.add_argument("--host", default="", help="the interface to listen on (default: all)")
    parser.add_argument("--port", type=integer("port", 0, 65535), default=DEFAULT_PORT,
                        help=f"the port (default {DEFAULT_PORT}; 0 picks a free one)")
    parser.set_defaults(handler=scheduler)


def owned_devices(args: argparse.Namespace) -> dict[str, object]:
    """The worker's devices as target settings: each target one of whose device options was given, its Settings
    built from those (validated there: SpecError on a bad combination)."""
    needs = cluster_needs()
    owned: dict[str, object] = {}
    for target, dests in args.devices.items():
        given = {field: getattr(args, dest) for field, dest in dests.items() if hasattr(args, dest)}
        if given:
            owned[target] = needs[target].settings(**given)
    return owned


def default_name(owned: dict[str, object]) -> str:
    """host, the targets whose devices it owns, this process's id: 'lab3-mcu-4242', 'lab3-gpu-4243', 'lab3-4244'
    (the scheduler refuses a second worker of the same name)."""
    return "-".join([platform.node() or "host", *owned, str(os.getpid())])


def worker(args: argparse.Namespace) -> int:
    from host.sweep.cluster import check_address

    check_address(args.scheduler, "--scheduler")
    for needs in cluster_needs().values():
        if needs.prepare is not None:
            needs.prepare(args)  # before anything initialises a device (a GPU index: CUDA_VISIBLE_DEVICES)
    owned = owned_devices(args)
    name = args.name or default_name(owned)
    from host.sweep.worker import KbenchWorker

    plugin = KbenchWorker(owned)
    say(f"{name}: checking {', '.join(owned) or 'no devices (rows that need none only)'}")
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


def build_parser() -> Parser:
    parser = Parser(prog="python -m host.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--verbose", action="store_true", help="Dask's own log lines too (default: warnings only)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{scheduler,worker}")
    _scheduler_parser(sub)
    _worker_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()

    def body() -> int:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
        try:
            importlib.import_module("distributed")  # configures its loggers, which are then quietened to warnings
        except ModuleNotFoundError as exc:
            if exc.name not in ("distributed", "dask"):
                raise
            raise UnavailableError("Dask distributed is not installed here: pip install -e '.[cluster]' on every "
                                   "node (docs/cluster.md)") from None

        logging.getLogger("distributed").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
        return args.handler(args)

    return guard(body)

