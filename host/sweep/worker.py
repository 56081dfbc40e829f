"""What runs inside a Dask worker of a cluster sweep (docs/cluster.md): the kbench worker plugin, which holds the
devices the worker owns (a board's link session, a GPU) for the worker's whole life, and `run_row`, the task that
measures one row there with the sweep's options.

What a worker owns, and how it says so, comes from the targets' own declarations (host/target_api.py ClusterNeeds,
found through the registry): the settings fields that choose each device, and the Dask resource its rows need, one
unit each (a board is `stm32f407=1`). A target whose devices have a model name also gets one resource named after
the model (`gpu-nvidia-h200=1`, see `model_resource`), so a sweep can ask for a device of a given model. Rows of a
target without a declaration need no resource and run on any worker. `python -m host.cluster worker` builds the
plugin from its options; the sweep's side is host/sweep/cluster.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import os
import platform
import re
import signal
import threading

from distributed import WorkerPlugin, get_worker

from host.errors import UnavailableError
from host.results import Result
from host.sweep.jobs import Job, LastInputs, measure
from host.sweep.registry import cluster_needs, target_module
from host.target_api import RunContext, git_revision

PLUGIN_NAME = "kbench"
#: Test hook: a worker whose environment sets this to N kills itself (SIGKILL) as its Nth row starts, so fault tests
#: lose a worker mid-row at a known point instead of racing a timer.
DIE_AT_ROW_ENV = "KBENCH_WORKER_DIE_AT_ROW"


def model_slug(model: str) -> str:
    """A model name as a resource suffix: 'NVIDIA H200' → 'nvidia-h200' (lower case, runs of other characters
    become one '-'); '' when nothing of it is left."""
    return re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")


def model_resource(resource: str, model: str) -> str:
    """The resource naming a device model: ('gpu', 'NVIDIA H200') → 'gpu-nvidia-h200'; the resource itself when
    the model leaves no name. The same rule turns a sweep's --cluster-gpu into the resource it asks for."""
    slug = model_slug(model)
    return f"{resource}-{slug}" if slug else resource


class KbenchWorker(WorkerPlugin):
    """The devices one worker owns, opened when the worker starts (a board answers HELLO and has its code deployed
    once, by its target's open_session) and closed when it stops. `owned` maps a target name to its settings for the
    device (built from the target's device options; the target must declare CLUSTER). Opening fails the worker's
    start, so a worker whose device does not answer never joins the cluster."""

    name = PLUGIN_NAME

    def __init__(self, owned: dict[str, object]):
        needs = cluster_needs()
        unknown = [target for target in owned if target not in needs]
        if unknown:
            raise ValueError(f"a worker owns devices of {', '.join(needs)}; got {unknown[0]!r}")
        self.owned = dict(owned)
        self.needs = {target: needs[target] for target in owned}
        self.sessions: dict[str, object] = {}
        self.devices: dict[str, str] = {}
        self.models: dict[str, str] = {}
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
                module = target_module(target)
                ok, reason = module.available(settings)
                if not ok:
                    raise UnavailableError(f"{target}: {reason}")
                opener = getattr(module, "open_session", None)
                session = self._stack.enter_context(opener(settings)) if opener else None
                self.sessions[target] = session
                self.devices[target] = module.device(settings, session)
                model = self.needs[target].model
                if model is not None:
                    self.models[target] = model(settings, session)
            self.opened = True
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._stack.close()
        self.sessions.clear()
        self.opened = False

    def resources(self) -> dict[str, float]:
        """The Dask resources this worker advertises for what it owns (after `open`: a device's model names one)."""
        found: dict[str, float] = {}
        for target, needs in self.needs.items():
            found[needs.resource] = 1
            if target in self.models:
                found[model_resource(needs.resource, self.models[target])] = 1
        return found

    def settings_for(self, target: str, sweep_settings: object) -> object:
        """The sweep's settings for `target` with the fields this worker decides (its device) put in."""
        owned = self.owned.get(target)
        if owned is None:
            return sweep_settings
        if sweep_settings is None:
            return owned
        fields = self.needs[target].options
        return dataclasses.replace(sweep_settings, **{name: getattr(owned, name) for name in fields})


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
    module = target_module(job.target)
    here = dataclasses.replace(context, host=platform.node(), git_rev=_revision())
    name = str(worker.name)
    needs = cluster_needs().get(job.target)
    if needs and (plugin is None or job.target not in plugin.owned):
        row = here.result(job.problem, target=job.target, kernel=job.kernel, device="", status="error",
                          message=f"worker {name} ({worker.address}) holds no {needs.resource} for the kbench plugin "
                                  "(start workers with python -m host.cluster worker)")
        return [row.replace(worker=name, workload=job.workload)]
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
