"""The rows of a sweep: a `Job` (one target's kernel on one problem), the plan that lists them, and `measure`, which
runs one job into its result rows with any failure recorded in its row. host.compare runs jobs here; a cluster sweep
(host/sweep/cluster.py) runs the same `measure` inside a Dask worker (host/sweep/worker.py).
"""

from __future__ import annotations

import argparse
import itertools
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

from host.sweep.registry import kernel_table
from host.errors import KbenchError, SpecError, UnavailableError
from host.problem import AttentionProblem
from host.results import CONFIG_FIELDS, Result
from host.target_api import Inputs, RunContext, RunOptions

#: warm-up and timed calls per row when neither --warmup nor --iters is given and the target has no REPEATS
DEFAULT_REPEATS = (2, 10)

@dataclass(frozen=True)
class Job:
    """One row to measure: a target's kernel on one problem, for a named workload where --workload asked for it."""

    target: str
    kernel: str
    problem: AttentionProblem
    workload: str = ""  # the workload's name (host/workloads.toml); "" for the shape options

    def key(self) -> tuple:
        """The same tuple as Result.config_key() of the row this job writes."""
        p = self.problem
        values = {"target": self.target, "kernel": self.kernel, "dtype": p.dtype, "batch": p.batch,
                  "heads": p.heads, "seq": p.seq, "dim": p.dim, "causal": p.causal, "seed": p.seed,
                  "q_len": p.q_len, "kv_heads": p.kv_heads, "workload": self.workload, "br": None, "bc": None}
        return tuple(values[name] for name in CONFIG_FIELDS)

    def label(self) -> str:
        """The row as progress names it: 'gpu/flash float16 B1 H1 N64 d64 causal', 'cpu/numpy B1 H32/8 N4096 q1 d128'
        (8 K/V heads, one query), 'llama3-8b-decode: cpu/numpy B16 H32/8 N8192 q1 d128 causal' (a workload's); the
        dtype is named where it is not the problem's default float32 (a target may run one kernel in several dtypes,
        each its own row)."""
        p = self.problem
        dtype = "" if p.dtype == AttentionProblem.dtype else f" {p.dtype}"
        kv = "" if p.kv_heads is None else f"/{p.kv_heads}"
        queries = "" if p.q_len is None else f" q{p.q_len}"
        workload = f"{self.workload}: " if self.workload else ""
        return (f"{workload}{self.target}/{self.kernel}{dtype} B{p.batch} H{p.heads}{kv} N{p.seq}{queries} d{p.dim}"
                f"{' causal' if p.causal else ''}")


def check_pairings(args: argparse.Namespace) -> None:
    """Refuse, in one line and before anything is measured, the values of --q-len and --kv-heads that do not make a
    problem with every value they are swept against: a q_len above a --seq (q_len ≤ seq: queries against a KV cache
    of seq keys), a kv_heads that does not divide a --heads. Every pair is named; the sweep is the product of the
    lists, so a user who wants the pairs that fit runs the lists that fit, in turn, into one --out (--resume)."""
    problems = []
    over = [(q_len, seq) for q_len in getattr(args, "q_len", (None,)) if q_len is not None for seq in args.seq
            if q_len > seq]
    if over:
        pairs = ", ".join(f"--q-len {q_len} with --seq {seq}" for q_len, seq in over)
        problems.append(f"{pairs}: q_len must be at most seq (queries against a KV cache of seq keys)")
    apart = [(kv, heads) for kv in getattr(args, "kv_heads", (None,)) if kv is not None for heads in args.heads
             if kv > heads or heads % kv]
    if apart:
        pairs = ", ".join(f"--kv-heads {kv} with --heads {heads}" for kv, heads in apart)
        problems.append(f"{pairs}: kv_heads must divide heads (grouped-query attention)")
    if problems:
        raise SpecError("; ".join(problems) + "; the sweep runs every pair of the lists: give the values that fit "
                        "together, in separate runs into one --out with --resume")


def plan(args: argparse.Namespace, targets: dict[str, ModuleType], settings: dict[str, object],
         unavailable: dict[str, str] | None = None) -> list[Job]:
    """Every (problem, target, kernel) the arguments ask for, in sweep order (small problems first). A --kernels
    name (checked against every selected target before: registry.check_kernels) that no available target runs is
    a missing capability, UnavailableError naming the `unavailable` targets and why."""
    tables = {name: kernel_table(module, settings.get(name)) for name, module in targets.items()}
    known = sorted({kernel for pairs in tables.values() for kernel, _ in pairs})
    if args.kernels:
        unknown = [kernel for kernel in args.kernels if kernel not in known]
        if unknown:
            why = "; ".join(f"{name}: {reason}" for name, reason in (unavailable or {}).items())
            raise UnavailableError(f"--kernels {unknown[0]}: no target that runs it can run here ({why or 'none'}); "
                                   f"the available targets run: {', '.join(known) or 'none'}")
    causal = {"0": (False,), "1": (True,), "both": (False, True)}[args.causal]
    jobs = []
    shapes = ((*shape, "") for shape in itertools.product(args.batch, args.heads, getattr(args, "kv_heads", (None,)),
                                                            args.dim, args.seq, getattr(args, "q_len", (None,)),
                                                            causal))
    workloads = getattr(args, "workloads", None)  # --workload: each a whole shape (host/workloads.py)
    if workloads:
        shapes = ((w.problem.batch, w.problem.heads, w.problem.kv_heads, w.problem.dim, w.problem.seq,
                   w.problem.q_len, w.problem.causal, w.name) for w in workloads)
    for batch, heads, kv_heads, dim, seq, q_len, is_causal, workload in shapes:
        for target, pairs in tables.items():
            for kernel, dtype in pairs:
                if args.kernels and kernel not in args.kernels:
                    continue
                problem = AttentionProblem(batch=batch, heads=heads, seq=seq, dim=dim, causal=is_causal,
                                           dtype=dtype, seed=args.seed, q_len=q_len, kv_heads=kv_heads)
                jobs.append(Job(target, kernel, problem, workload))
    return jobs


class LastInputs:
    """The inputs of the last problem asked for, kept for the jobs that share them (jobs are planned problem by
    problem, so one is enough); the previous problem's arrays go before the next ones are built. Thread-safe: a
    worker may run its row task in any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: Inputs | None = None

    def of(self, job: Job) -> Callable[[], Inputs]:
        """What `measure` calls for the job's inputs (float32, whatever the job's dtype), built inside its row."""
        return lambda: self._get(job.problem.with_(dtype="float32"))

    def _get(self, problem: AttentionProblem) -> Inputs:
        with self._lock:
            if self._last is None or self._last.problem != problem:
                self._last = None
                self._last = Inputs(problem)
            return self._last


def repeats(args: argparse.Namespace, module: ModuleType) -> tuple[int, int]:
    """(warmup, iters) for a target: the command line's where given, else the target's REPEATS, else the default."""
    warmup, iters = getattr(module, "REPEATS", DEFAULT_REPEATS)
    return (warmup if args.warmup is None else args.warmup), (iters if args.iters is None else args.iters)


def check_repeats(args: argparse.Namespace, modules: dict[str, ModuleType], settings: dict[str, object]) -> None:
    """Refuse, in one line and before any target starts, a --warmup + --iters over the MAX_REPEATS of a target that
    would run a row (one --kernels leaves without a kernel runs none): the MCU's RUN counts its calls in one byte,
    so every row of that target would be an error."""
    for name, module in modules.items():
        most = getattr(module, "MAX_REPEATS", None)
        warmup, iters = repeats(args, module)
        if most is None or warmup + iters <= most:
            continue
        if args.kernels and not {kernel for kernel, _ in kernel_table(module, settings.get(name))} & set(args.kernels):
            continue
        raise SpecError(f"--warmup {warmup} + --iters {iters} = {warmup + iters} calls a row is out of range for the "
                        f"{name} target; allowed: 1..{most} (run {name} apart with fewer, or leave it out of "
                        "--targets)")


def shape_supported(module: ModuleType, target: str, problem: AttentionProblem) -> tuple[bool, str]:
    """Whether `target` runs `problem`'s shape: a target that declares `supports(problem) -> (bool, reason)` says;
    any other runs self-attention with a K/V head per query head only (issue 32 brings decode and grouped heads to
    each target in turn)."""
    supports = getattr(module, "supports", None)
    if supports is not None:
        return supports(problem)
    if problem.square:
        return True, ""
    shape = ", ".join(part for part in (f"q_len {problem.q_len}" if problem.q_len is not None else "",
                                        f"kv_heads {problem.kv_heads}" if problem.kv_heads is not None else "") if part)
    return False, (f"the {target} target runs self-attention with a K/V head per query head only (q_len = seq, "
                   f"kv_heads = heads); this problem has {shape}")


def skipped_row(job: Job, module: ModuleType, context: RunContext, device: str) -> Result | None:
    """The `skipped` row of a job whose target cannot run its problem's shape (`shape_supported`), or None when it
    can. The sweep writes it without running anything: here for a local sweep (`measure`), on the coordinator for a
    cluster sweep, which never sends such a row to a worker."""
    runs, why = shape_supported(module, job.target, job.problem)
    if runs:
        return None
    return context.result(job.problem, target=job.target, kernel=job.kernel, device=device, status="skipped",
                          message=f"skipped: {why}").replace(workload=job.workload)


def measure(job: Job, inputs: Callable[[], Inputs], module: ModuleType, calls: tuple[int, int],
            context: RunContext, settings: object = None, session: object = None) -> list[Result]:
    """Run one job with `calls` = (warmup, iters); a failure becomes a row with status error (or oom) and the sweep
    goes on. `inputs` builds (or returns the cached) inputs inside the row, so inputs too large for the machine are
    this row's oom. Every row carries the job's workload name."""
    skipped = skipped_row(job, module, context, module.device(settings, session))
    if skipped is not None:
        return [skipped]
    return [row.replace(workload=job.workload) if job.workload else row
            for row in _run(job, inputs, module, calls, context, settings, session)]


def _run(job: Job, inputs: Callable[[], Inputs], module: ModuleType, calls: tuple[int, int],
         context: RunContext, settings: object, session: object) -> list[Result]:
    """The target's rows of one job whose shape it runs, or the one row of its failure."""
    warmup, iters = calls
    options = RunOptions(context=context, kernel=job.kernel, warmup=warmup, iters=iters, settings=settings,
                         session=session)
    try:
        return module.run(job.problem, inputs(), options)
    except MemoryError as exc:
        status, message = "oom", f"out of memory: {exc or 'MemoryError'}"
    except KbenchError as exc:
        status, message = getattr(exc, "status", "error"), f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - any failure of one row is recorded in that row
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        status = "error"
        message = f"{type(exc).__name__}: {exc} (at {Path(frame.filename).name}:{frame.lineno})"
    return [context.result(job.problem, target=job.target, kernel=job.kernel, device=module.device(settings, session),
                           status=status, message=message.replace("\n", " "))]

