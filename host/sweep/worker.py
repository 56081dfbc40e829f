"""What runs inside a Dask worker of a cluster sweep (docs/cluster.md): the kbench worker plugin, which holds the
devices the worker owns (a board's link session, a GPU) for the worker's whole life, and `run_row`, the task that
measures one row there with the sweep's options.

A worker advertises what it owns as Dask resources: a board is `stm32f407=1`, a GPU is `gpu=1` plus one resource
named after its model (`gpu-nvidia-h200=1`, see `gpu_resource`), so a sweep can ask for a GPU of a given name. Rows
of a target that needs no device (cpu, asic) need no resource and run on any worker. `python -m host.cluster worker`
builds the plugin from its options; the sweep's side is host/sweep/cluster.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import importlib
import itertools
import os
import platform
import re
import signal
import threading

from distributed import WorkerPlugin, get_worker

from host.sweep.registry import TARGETS
from host.errors import UnavailableError
from host.results import Result
from host.sweep.jobs import Job, LastInputs, measure
from host.target_api import RunContext, git_revision

PLUGIN_NAME = "kbench"
#: Test hook: a worker whose environment sets this to N kills itself (SIGKILL) as its Nth row starts, so fault tests
#: lose a worker mid-row at a known point instead of racing a timer.
DIE_AT_ROW_ENV = "KBENCH_WORKER_DIE_AT_ROW"
BOARD_RESOURCE = "stm32f407"
GPU_RESOURCE = "gpu"
#: The resource a row of each target needs (one unit); a target not named here needs none and runs anywhere.
TARGET_RESOURCES = {"mcu": BOARD_RESOURCE, "gpu": GPU_RESOURCE}
#: The settings fields a worker decides for the device it owns (with the host.compare flag that sets each locally):
#: which board or twin, which GPU backend. The sweep's other options (tiles, dtypes, kernels) apply on every worker.
OWNED_FLAGS = {"mcu": {"serial": "--serial", "baud": "--baud", "sim": "--sim", "sim_faults": "--sim-faults"},
               "gpu": {"device": "--gpu-device"}}


def gpu_resource(model: str) -> str:
    """The resource naming a GPU model: 'NVIDIA H200' → 'gpu-nvidia-h200' (lower case, runs of other characters
    become one '-'). The same rule turns a sweep's --cluster-gpu into the resource it asks for."""
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")
    return f"{GPU_RESOURCE}-{slug}" if slug else GPU_RESOURCE


class KbenchWorker(WorkerPlugin):
    """The devices one worker owns, opened when the worker starts (a board answers HELLO and has its code deployed
    once, by its target's open_session) and closed when it stops. `owned` maps a target name to its settings for the
    device (mcu: the board's port or the twin; gpu: the CUDA device or the fake). Opening fails the worker's start,
    so a worker whose device does not answer never joins the cluster."""

    name = PLUGIN_NAME

    def __init__(self, owned: dict[str, object]):
        unknown = [target for target in owned if target not in OWNED_FLAGS]
        if unknown:
            raise ValueError(f"a worker owns devices of {', '.join(OWNED_FLAGS)}; got {unknown[0]!r}")
        self.owned = dict(owned)
        self.sessions: dict[str, object] = {}
        self.devices: dict[str, str] = {}
        self.opened = False
        self._stack = contextlib.ExitStack()

    async def setup(self, worker) -> None:
        if not self.opened:  # python -m host.cluster worker opens the devices before the worker starts
            await asyncio.to_thread(self.open)

    def teardown(self, worker) -> None:
        self.close()

    def open(self) -> None:
        """Open every owned device; UnavailableError (with the reason) when one cannot run here."""
        try:
            for target, settings in self.owned.items():
                module = importlib.import_module(TARGETS[target])
                ok, reason = module.available(settings)
                if not ok:
                    raise UnavailableError(f"{target}: {reason}")
                opener = getattr(module, "open_session", None)
                session = self._stack.enter_context(opener(settings)) if opener else None
                self.sessions[target] = session
                self.devices[target] = module.device(settings, session)
            self.opened = True
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._stack.close()
        self.sessions.clear()
        self.opened = False

    def resources(self) -> dict[str, float]:
        """The Dask resources this worker advertises for what it owns (after `open`: a GPU's model names one)."""
        found: dict[str, float] = {}
        for target in self.owned:
            found[TARGET_RESOURCES[target]] = 1
            if target == "gpu" and self.devices.get(target):
                found[gpu_resource(self.devices[target].split(" (")[0])] = 1
        return found

    def settings_for(self, target: str, sweep_settings: object) -> object:
        """The sweep's settings for `target` with the fields this worker decides (its device) put in."""
        owned = self.owned.get(target)
        if owned is None:
            return sweep_settings
        if sweep_settings is None:
            return owned
        return dataclasses.replace(sweep_settings, **{name: getattr(owned, name) for name in OWNED_FLAGS[target]})


_row_lock = threading.Lock()
_inputs = LastInputs()


def run_row(job: Job, calls: tuple[int, int], sweep_settings: object, context: RunContext) -> list[Result]:
    """The task of one row, run by a Dask worker: measure `job` with the sweep's settings and this worker's devices;
    rows are stamped with this worker's host, code revision and name. A row that needs a device this worker does
    not hold (a plain `dask worker` without the kbench plugin) is an error row saying so."""
    worker = get_worker()
    if os.environ.get(DIE_AT_ROW_ENV) == str(next(_rows_started)):
        os.kill(os.getpid(), signal.SIGKILL)
    plugin: KbenchWorker | None = worker.plugins.get(PLUGIN_NAME)
    module = importlib.import_module(TARGETS[job.target])
    here = dataclasses.replace(context, host=platform.node(), git_rev=_revision())
    name = str(worker.name)
    needs = TARGET_RESOURCES.get(job.target)
    if needs and (plugin is None or job.target not in plugin.owned):
        row = here.result(job.problem, target=job.target, kernel=job.kernel, device="", status="error",
                          message=f"worker {name} ({worker.address}) holds no {needs} for the kbench plugin "
                                  "(start workers with python -m host.cluster worker)")
        return [row.replace(worker=name)]
    settings = plugin.settings_for(job.target, sweep_settings) if plugin else sweep_settings
    session = plugin.sessions.get(job.target) if plugin else None
    with _row_lock:  # one row at a time in this process, however many threads the worker runs tasks in
        rows = measure(job, _inputs.of(job), module, calls, here, settings, session)
    return [row.replace(worker=name) for row in rows]


_rows_started = itertools.count(1)  # this process's rows, for the test hook


@functools.lru_cache(maxsize=None)
def _revision() -> str:
    """This worker's code revision (asked of git once per process)."""
    return git_revision()
