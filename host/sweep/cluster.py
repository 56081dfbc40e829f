"""The sweep's side of a cluster run (`python -m host.compare --cluster tcp://HOST:8786`, docs/cluster.md): connect to
the Dask scheduler, say which targets its workers can run, submit one task per row with the resource its target
needs, and hand each row back as it finishes.

Faults end as rows, never as a hang: a worker lost mid-row is Dask's to retry on another worker with the same
resource (up to the scheduler's allowed-failures, after which the row is an `error` naming the last worker); a row
whose resource no worker holds any more (the last board's worker is gone) waits `wait_s`, then becomes an `error`
row naming the worker that last ran it. Leaving early (Ctrl-C, an error) cancels every outstanding task. Imported
only with --cluster, so a local sweep never imports Dask.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from dataclasses import dataclass
from typing import Iterator

from distributed import Client, Future, KilledWorker, wait
from distributed import TimeoutError as DaskTimeoutError
from distributed.client import FuturesCancelledError

from host.errors import LinkError, SpecError, UnavailableError
from host.results import Result
from host.sweep.jobs import Job
from host.sweep.registry import cluster_needs
from host.sweep.worker import model_resource, model_slug, run_row
from host.target_api import RunContext

#: Scheduler addresses a sweep accepts: a plain Dask comm scheme, a host (a name, IPv4, or IPv6 in brackets) and a
#: port.
ADDRESS = re.compile(r"^(tcp|ws)://([^\s/:\[\]]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$")
#: Dask's encrypted schemes: they need certificates (distributed.Security), which kbench takes no option for.
SECURE = ("tls://", "wss://")
#: How long connecting to the scheduler may take, in seconds.
CONNECT_S = 10
#: How long fetching a finished row from its worker may take, in seconds (a row is a few kB).
FETCH_S = 10
#: How often the sweep looks at the cluster while rows run, in seconds.
POLL_S = 0.5


def check_address(address: str, option: str = "--cluster") -> str:
    """The scheduler address, or SpecError in one line: a malformed one, an encrypted scheme (kbench gives Dask no
    certificates), a port out of range."""
    if address.lower().startswith(SECURE):
        scheme = address.split(":", 1)[0].lower()
        raise SpecError(f"{option} {address}: {scheme}:// needs TLS certificates, which kbench has no option for; "
                        "allowed: tcp://HOST:PORT or ws://HOST:PORT (on a trusted network or a tunnel)")
    if not ADDRESS.match(address):
        raise SpecError(f"{option} {address!r} is not a scheduler address; allowed: tcp://HOST:PORT (or ws://; "
                        "IPv6 in brackets), e.g. tcp://10.0.0.5:8786 or tcp://[::1]:8786")
    port = int(address.rsplit(":", 1)[1])
    if not 1 <= port <= 65535:
        raise SpecError(f"{option} {address}: port {port} is out of range; allowed: 1..65535")
    return address


def check_local_options(given_dests: frozenset[str]) -> None:
    """Refuse the options that choose a local device (each target's declared device options, ClusterNeeds.options)
    where the command line gave them (`given_dests`, at any value: host.cli_common.typed): a cluster's workers own
    theirs."""
    needs = cluster_needs()
    for declared in needs.values():
        changed = [flag for flag in declared.options.values() if flag.lstrip("-").replace("-", "_") in given_dests]
        if changed:
            one = len(changed) == 1
            usage = " | ".join(other.usage for other in needs.values())
            raise SpecError(f"{', '.join(changed)} {'chooses' if one else 'choose'} a device of this machine; with "
                            f"--cluster each worker owns its devices (python -m host.cluster worker {usage}): leave "
                            f"{'it' if one else 'them'} out")


@dataclass(frozen=True)
class WorkerInfo:
    """A worker as the scheduler knows it: its address, the name it registered with, its resources."""

    address: str
    name: str
    resources: dict

    def holds(self, resource: str | None) -> bool:
        return resource is None or self.resources.get(resource, 0) >= 1


class Cluster:
    """A connection to one Dask scheduler for one sweep (a context manager that closes it)."""

    def __init__(self, address: str, wait_s: float, model: str | None = None):
        """`model` (--cluster-gpu): rows of a target whose devices have model names go to workers holding that
        model only."""
        self.address = check_address(address)
        self.wait_s = wait_s
        if model is not None and not model_slug(model):
            raise SpecError(f"--cluster-gpu {model!r} names no GPU model; allowed: a model as workers print it, "
                            "e.g. 'NVIDIA H200'")
        self.model = model
        self.needs = cluster_needs()
        # The client logs its lost connections itself; the sweep says so once, in one line (LinkError below).
        logging.getLogger("distributed.client").setLevel(logging.CRITICAL)
        try:
            self.client = Client(address, timeout=CONNECT_S)  # the default client: distributed.wait needs one
        except (OSError, DaskTimeoutError) as exc:
            raise UnavailableError(f"--cluster {address}: cannot reach the scheduler within {CONNECT_S} s "
                                   f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def resource(self, target: str) -> str | None:
        """The resource one row of `target` needs (its ClusterNeeds.resource; of the model --cluster-gpu names where
        its devices have models), or none."""
        needs = self.needs.get(target)
        if needs is None:
            return None
        return model_resource(needs.resource, self.model) if self.model and needs.model else needs.resource

    def workers(self) -> list[WorkerInfo]:
        info = self.client.scheduler_info(n_workers=-1)["workers"]
        return [WorkerInfo(address, str(worker.get("name", address)), dict(worker.get("resources") or {}))
                for address, worker in info.items()]

    def describe(self) -> dict:
        """The scheduler and its workers (name → resources), for the run's log."""
        return {"scheduler": self.address, "workers": {w.name: w.resources for w in self.workers()}}

    def unavailable(self, targets: list[str]) -> dict[str, str]:
        """{target: why no worker can run it} for the targets whose resource no worker holds now; with no worker at
        all, waits up to wait_s for the first to join."""
        if not self.workers():
            try:
                self.client.wait_for_workers(1, timeout=self.wait_s)
            except (DaskTimeoutError, TimeoutError):
                return {target: f"the scheduler at {self.address} has no worker (waited {self.wait_s:g} s; start one "
                                "with python -m host.cluster worker)" for target in targets}
        workers = self.workers()
        missing = {}
        for target in targets:
            need, needs = self.resource(target), self.needs.get(target)
            if not any(worker.holds(need) for worker in workers):
                held = ""
                if needs is not None and needs.model is not None:
                    prefix = needs.resource + "-"
                    models = sorted({name for w in workers for name in w.resources if name.startswith(prefix)})
                    held = f"; {needs.resource} models held: {', '.join(models) or 'none'}"
                usage = needs.usage if needs is not None else ""
                missing[target] = (f"no worker of {self.address} holds {need}{held} (workers: "
                                   f"{', '.join(sorted(w.name for w in workers))}; a worker with one starts with "
                                   f"python -m host.cluster worker {usage})")
        return missing

    def rows(self, jobs: list[Job], calls: dict[str, tuple[int, int]], settings: dict[str, object],
             context: RunContext) -> Iterator[tuple[Job, list[Result]]]:
        """Submit every job and yield (job, its rows) as each finishes, in the order they finish. Every job yields
        exactly once: its measured rows, or one error row when the cluster could not measure it. Closing the
        iterator early cancels the tasks still outstanding."""
        futures: dict[Future, Job] = {}
        for index, job in enumerate(jobs):
            need = self.resource(job.target)
            future = self.client.submit(run_row, job, calls[job.target], settings.get(job.target), context,
                                        key=f"kbench-{context.run_id}-{index}", pure=False,
                                        resources={need: 1} if need else None)
            futures[future] = job
        pending = set(futures)
        watch = _Watch(self, futures)
        try:
            yield from self._collect(pending, futures, context, watch)
        except (OSError, FuturesCancelledError) as exc:  # CommClosedError, or futures dropped with the connection
            raise LinkError(f"lost the scheduler at {self.address} ({type(exc).__name__}) with {len(pending)} rows "
                            "outstanding; finished rows are kept in results.csv: rerun with --resume") from None
        finally:
            if pending and self.client.status == "running":
                with contextlib.suppress(OSError):
                    self.client.cancel(list(pending))

    def _collect(self, pending: set[Future], futures: dict[Future, Job], context: RunContext,
                 watch: "_Watch") -> Iterator[tuple[Job, list[Result]]]:
        """Yield each pending task's rows as it finishes (removing it from `pending`)."""
        while pending:
            try:
                done = wait(list(pending), timeout=POLL_S, return_when="FIRST_COMPLETED").done
            except (DaskTimeoutError, TimeoutError):
                done = set()
            for future in done:
                found = self._rows_of(future, futures[future], context, watch)
                if found is not None:  # else its result was lost with its worker: Dask measures it again
                    pending.discard(future)
                    yield futures[future], found
            for future, message in watch.stranded(pending):
                future.cancel()
                pending.discard(future)
                yield futures[future], [_error_row(context, futures[future], message, watch.last.get(future.key))]

    def _rows_of(self, future: Future, job: Job, context: RunContext, watch: "_Watch") -> list[Result] | None:
        """A finished task's rows, or one error row saying what became of it; None when its result cannot be
        fetched now (it was held by a worker that died after finishing: Dask computes it again, on a worker that
        may not exist yet, so the fetch must not wait for it)."""
        if future.status == "finished":
            try:
                return future.result(timeout=FETCH_S)
            except (DaskTimeoutError, TimeoutError):
                return None
        last = watch.last.get(future.key)
        if future.status == "cancelled":
            return [_error_row(context, job, "the task was cancelled on the cluster (by the scheduler or another "
                                             "client)", last)]
        if future.status != "error":
            return None  # back to pending: its worker died after Dask said it was done
        try:
            exc = future.exception(timeout=FETCH_S)
        except (DaskTimeoutError, TimeoutError):
            return None
        if isinstance(exc, KilledWorker):
            worker = exc.last_worker
            name = str(getattr(worker, "name", "") or getattr(worker, "address", "?"))
            return [_error_row(context, job, f"lost worker: {exc.allowed_failures + 1} workers died while measuring "
                                             f"this row, the last {name} ({getattr(worker, 'address', '?')}); "
                                             "Dask's allowed-failures is spent", name)]
        return [_error_row(context, job, f"the cluster could not run the task: {type(exc).__name__}: {exc}", last)]


class _Watch:
    """What the sweep sees of the cluster while rows run: the worker that last ran each task, and since when each
    pending task's resource has been held by no worker."""

    LOOK_S = 2.0  # how often to ask the scheduler

    def __init__(self, cluster: Cluster, futures: dict[Future, Job]):
        self.cluster = cluster
        self.futures = futures
        self.last: dict[str, str] = {}  # task key → name of the worker last seen holding it (running or queued)
        self.since: dict[str, float] = {}  # task key → when its resource was first seen held by no worker
        self.looked = 0.0

    def stranded(self, pending: set[Future]) -> list[tuple[Future, str]]:
        """The pending tasks whose resource no worker has held for wait_s, each with the reason."""
        now = time.monotonic()
        if not pending or now - self.looked < self.LOOK_S:
            return []
        self.looked = now
        workers = self.cluster.workers()
        names = {w.address: w.name for w in workers}
        for address, keys in self.cluster.client.processing().items():
            for key in keys:
                self.last[key] = names.get(address, address)
        out = []
        for future in pending:
            need = self.cluster.resource(self.futures[future].target)
            if any(worker.holds(need) for worker in workers):
                self.since.pop(future.key, None)
                continue
            first = self.since.setdefault(future.key, now)
            if now - first >= self.cluster.wait_s:
                what = f"worker with {need}" if need else "worker"
                out.append((future, f"no worker left: the cluster has had no {what} for {now - first:.0f} s "
                                    f"(--cluster-wait {self.cluster.wait_s:g}); --resume measures it once one joins"))
        return out


def _error_row(context: RunContext, job: Job, message: str, worker: str | None) -> Result:
    where = f"; last given to worker {worker}" if worker and worker not in message else ""
    return context.result(job.problem, target=job.target, kernel=job.kernel, device="", status="error",
                          message=message + where).replace(worker=worker or "", workload=job.workload)

