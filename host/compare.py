"""`python -m host.compare`: sweep one attention problem over shapes, targets and kernels into one report.

Targets are found by name in host/compare_targets.py's `TARGETS` (the only place that knows every target) and their
heavy libraries are imported only when they run, so a machine without CuPy, mpremote or unicorn still runs the CPU
rows. Each finished row is appended to OUT/results.csv at once; ``--resume`` completes an interrupted sweep without
duplicating or losing a row. At the end OUT/results.md and its plots are rendered from the files alone.

Each target declares its own options (host/target_api.py); `--help` lists them in one group per target.
Exit status: 0 all rows ok (some may be skipped or oom); 1 some row wrong (outside its tolerance, or not
bit-exact) or failed (recorded in its row), or no row measured at all; 2 bad arguments, an unusable --out, or no
target able to run; 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import platform
import shlex
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

import numpy as np

from host.errors import KbenchError, ResultsError, SpecError
from host.cli_common import Parser, folder, guard, int_list, integer, name_list, output_folder
from host.problem import LIMITS, AttentionProblem
from host.results import CONFIG_FIELDS, FAILED_STATUSES, STATUSES, Result, ResultsFile
from host.run_log import RunInfo, read_runs
from host.target_api import Inputs, RunContext, RunOptions
from host.compare_targets import (TARGETS, TargetEntry, check_kernels, kernel_table, load_targets, open_sessions,
                                  select_targets, target_settings, unused_options)

#: warm-up and timed calls per row when neither --warmup nor --iters is given and the target has no REPEATS
DEFAULT_REPEATS = (2, 10)
#: Test hook: after this many rows are appended, the sweep sends itself KBENCH_STOP_SIGNAL (KILL, TERM or INT), so
#: kill-and-resume tests stop it at a known row instead of racing a timer.
STOP_AFTER_ROWS_ENV = "KBENCH_STOP_AFTER_ROWS"
STOP_SIGNAL_ENV = "KBENCH_STOP_SIGNAL"

def seq_list(name: str):
    """An argparse type: a comma-separated list of ints within problem.LIMITS[name]."""
    return int_list(name, *LIMITS[name])


def build_parser() -> tuple[Parser, dict[str, TargetEntry]]:
    parser = Parser(prog="python -m host.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", type=seq_list("seq"), default=(128, 256, 512), metavar="LIST",
                        help="sequence lengths N, comma-separated (default 128,256,512)")
    parser.add_argument("--dim", type=seq_list("dim"), default=(64,), help="head dimensions d (default 64)")
    parser.add_argument("--heads", type=seq_list("heads"), default=(4,), help="heads H (default 4)")
    parser.add_argument("--batch", type=seq_list("batch"), default=(1,), help="batch sizes B (default 1)")
    parser.add_argument("--causal", choices=("0", "1", "both"), default="both", help="causal masking (default both)")
    parser.add_argument("--seed", type=integer("seed", 0), default=0, help="input seed (default 0)")
    parser.add_argument("--targets", type=name_list, default=None,
                        help=f"targets to run, from {', '.join(TARGETS)} (default: every available one)")
    parser.add_argument("--kernels", type=name_list, default=None, help="kernels to run (default: all)")
    parser.add_argument("--warmup", type=integer("warmup", 0), default=None,
                        help=f"untimed calls first (default: the target's own; {DEFAULT_REPEATS[0]} for cpu and gpu, "
                             "0 for mcu)")
    parser.add_argument("--iters", type=integer("iters", 1), default=None,
                        help=f"timed calls per row (default: the target's own; {DEFAULT_REPEATS[1]} for cpu and gpu, "
                             "1 for mcu, whose DWT cycles barely vary)")
    parser.add_argument("--out", type=folder, default=Path("reports/latest"), help="output folder (default reports/latest)")
    parser.add_argument("--resume", action="store_true",
                        help="keep OUT/results.csv and run only the configurations it lacks (failed and wrong rows "
                             "again)")
    return parser, load_targets(parser)


@dataclass(frozen=True)
class Job:
    """One row to measure: a target's kernel on one problem."""

    target: str
    kernel: str
    problem: AttentionProblem

    def key(self) -> tuple:
        """The same tuple as Result.config_key() of the row this job writes."""
        p = self.problem
        values = {"target": self.target, "kernel": self.kernel, "dtype": p.dtype, "batch": p.batch,
                  "heads": p.heads, "seq": p.seq, "dim": p.dim, "causal": p.causal, "seed": p.seed,
                  "br": None, "bc": None}
        return tuple(values[name] for name in CONFIG_FIELDS)

    def label(self) -> str:
        p = self.problem
        return f"{self.target}/{self.kernel} B{p.batch} H{p.heads} N{p.seq} d{p.dim}{' causal' if p.causal else ''}"


def plan(args: argparse.Namespace, targets: dict[str, ModuleType], settings: dict[str, object]) -> list[Job]:
    """Every (problem, target, kernel) the arguments ask for, in sweep order (small problems first)."""
    tables = {name: kernel_table(module, settings.get(name)) for name, module in targets.items()}
    known = sorted({kernel for pairs in tables.values() for kernel, _ in pairs})
    if args.kernels:
        unknown = [kernel for kernel in args.kernels if kernel not in known]
        if unknown:
            raise SpecError(f"--kernels: unknown kernel {unknown[0]!r}; allowed: {', '.join(known) or 'none'}")
    causal = {"0": (False,), "1": (True,), "both": (False, True)}[args.causal]
    jobs = []
    for batch, heads, dim, seq, is_causal in itertools.product(args.batch, args.heads, args.dim, args.seq, causal):
        for target, pairs in tables.items():
            for kernel, dtype in pairs:
                if args.kernels and kernel not in args.kernels:
                    continue
                problem = AttentionProblem(batch=batch, heads=heads, seq=seq, dim=dim, causal=is_causal,
                                           dtype=dtype, seed=args.seed)
                jobs.append(Job(target, kernel, problem))
    return jobs


def repeats(args: argparse.Namespace, module: ModuleType) -> tuple[int, int]:
    """(warmup, iters) for a target: the command line's where given, else the target's REPEATS, else the default."""
    warmup, iters = getattr(module, "REPEATS", DEFAULT_REPEATS)
    return (warmup if args.warmup is None else args.warmup), (iters if args.iters is None else args.iters)


def measure(job: Job, inputs: Callable[[], Inputs], module: ModuleType, args: argparse.Namespace,
            context: RunContext, settings: object = None, session: object = None) -> list[Result]:
    """Run one job; a failure becomes a row with status error (or oom) and the sweep goes on. `inputs` builds (or
    returns the cached) inputs inside the row, so inputs too large for the machine are this row's oom."""
    warmup, iters = repeats(args, module)
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


def prepare_out(out: Path, resume: bool, planned: set[tuple] = frozenset(),
                devices: dict[str, str] | None = None) -> tuple[ResultsFile, set[tuple]]:
    """Open OUT/results.csv; with resume keep its finished rows (dropping the failed and wrong rows this sweep
    measures again, `planned` being its untiled keys; rows of other configurations stay as they are), else start
    afresh, keeping the previous file as results.csv.prev. A finished row counts as done only where its target's
    device is the one `devices` names for it now (a sweep resumed on a real GPU measures again what a fake GPU or
    another machine measured; those rows stay in the file beside the new ones)."""
    out.mkdir(parents=True, exist_ok=True)
    results = ResultsFile(out / "results.csv")
    if not resume:
        for name in ("results.csv", "runs.jsonl"):
            if (out / name).exists():
                os.replace(out / name, out / f"{name}.prev")
        return results, set()
    rows = results.read()  # first: a file that is not results is refused before anything changes it
    if results.torn_line:
        print(f"kbench: {results.path}:{results.torn_line}: a torn last row (a writer killed mid-row) is dropped and "
              "measured again", file=sys.stderr)
    results.repair()
    kept = [row for row in rows if row.status not in FAILED_STATUSES or untiled_key(row) not in planned]
    if len(kept) != len(rows):
        results.rewrite(kept)
    devices = devices or {}
    finished = [row for row in kept if row.status not in FAILED_STATUSES]
    elsewhere = [row for row in finished if row.target in devices and row.device != devices[row.target]
                 and untiled_key(row) in planned]
    if elsewhere:
        where = sorted({f"{row.target} on {row.device or '?'}" for row in elsewhere})
        print(f"kbench: {len(elsewhere)} finished rows in {results.path} were measured on another device "
              f"({'; '.join(where)}): kept, and measured again here", file=sys.stderr)
    return results, {untiled_key(row) for row in finished if row not in elsewhere}


def check_out(out: Path, resume: bool) -> None:
    """Refuse, in one line and before any target starts, an --out that is a file, lies under a file or cannot be
    made or written, files there that are not files (a folder named results.csv), and (with --resume) a results
    file or run log there that cannot be read."""
    output_folder(out)
    for name in ("results.csv", "runs.jsonl"):
        if (out / name).exists() and not (out / name).is_file():
            raise SpecError(f"--out {out}: {out / name} is not a file; move it aside or choose another --out")
    if resume:
        ResultsFile(out / "results.csv").read()
        read_runs(out / "runs.jsonl")


def untiled_key(row: Result) -> tuple:
    """A row's configuration without its tile: compare runs each kernel with the tile its target chooses."""
    return tuple(None if name in ("br", "bc") else value for name, value in zip(CONFIG_FIELDS, row.config_key()))


def run_sweep(args: argparse.Namespace, argv: list[str], parser: argparse.ArgumentParser,
              entries: dict[str, TargetEntry]) -> int:
    settings = target_settings(args, entries)
    for warning in unused_options(args, parser, entries, args.targets):
        print(f"kbench: {warning}", file=sys.stderr)
    check_out(args.out, args.resume)
    check_kernels(args.kernels, entries, settings, args.targets)
    with contextlib.ExitStack() as stack:
        targets, unavailable = select_targets(args.targets, entries, settings)
        sessions = open_sessions(settings, targets, unavailable, stack)
        if not targets:
            raise SpecError("nothing can be measured: " + "; ".join(f"target {name} unavailable: {reason}"
                                                                     for name, reason in unavailable.items()))
        return _sweep(args, argv, targets, unavailable, settings, sessions)


def _sweep(args: argparse.Namespace, argv: list[str], targets: dict[str, ModuleType], unavailable: dict[str, str],
           settings: dict[str, object], sessions: dict[str, object]) -> int:
    from tqdm import tqdm

    context = RunContext.start()  # before the output folder changes: a report inside the checkout is not "dirty" code
    stop_after = _stop_hook()
    jobs = plan(args, targets, settings)
    devices = {name: module.device(settings.get(name), sessions.get(name)) for name, module in targets.items()
               if getattr(module, "RESUME_BY_DEVICE", True)}
    results, done = prepare_out(args.out, args.resume, {job.key() for job in jobs},
                                {name: device for name, device in devices.items() if device})
    todo = [job for job in jobs if job.key() not in done]
    for name, reason in unavailable.items():
        print(f"kbench: target {name} unavailable: {reason}", file=sys.stderr)
    if args.resume:
        print(f"kbench: resuming: {len(jobs) - len(todo)} of {len(jobs)} rows already in {results.path}",
              file=sys.stderr)
    if not todo and args.resume:
        print("kbench: nothing left to measure; no run recorded", file=sys.stderr)
        summarize_run(args, [], unavailable, len(jobs))
        return 0
    RunInfo(run_id=context.run_id, timestamp=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            command="python -m host.compare " + shlex.join(argv), git_rev=context.git_rev, host=context.host,
            machine={"platform": platform.platform(), "python": platform.python_version(), "numpy": np.__version__,
                     "cpus": os.cpu_count()}, unavailable=dict(unavailable)).append_to(args.out / "runs.jsonl")
    written: list[Result] = []
    cache: dict[str, Inputs] = {}

    def inputs_of(problem: AttentionProblem) -> Inputs:
        """The problem's inputs, built once for all the jobs that share them (jobs are planned problem by problem)."""
        if "inputs" not in cache or cache["inputs"].problem != problem:
            cache.clear()  # the previous problem's arrays go before the next ones are built
            cache["inputs"] = Inputs(problem)
        return cache["inputs"]

    with tqdm(todo, unit="row", file=sys.stderr, dynamic_ncols=True, disable=None) as bar:
        for job in bar:
            bar.set_description(job.label())
            base = job.problem.with_(dtype="float32")
            for row in measure(job, lambda: inputs_of(base), targets[job.target], args, context,
                               settings.get(job.target), sessions.get(job.target)):
                results.append(row)
                written.append(row)
                if stop_after is not None and len(written) == stop_after[0]:
                    os.kill(os.getpid(), stop_after[1])
    summarize_run(args, written, unavailable, len(jobs) - len(todo))
    if written and all(row.status in ("oom", "skipped") for row in written):
        print(f"kbench: no row was measured ({len(written)} rows oom or skipped)", file=sys.stderr)
        return 1
    return 1 if any(row.status in FAILED_STATUSES for row in written) else 0


def _stop_hook() -> tuple[int, int] | None:
    """(rows, signal) from the test hook's environment variables, or None when they are not set."""
    rows = os.environ.get(STOP_AFTER_ROWS_ENV)
    if not rows:
        return None
    if not (rows.isascii() and rows.isdigit() and int(rows) >= 1):
        raise SpecError(f"{STOP_AFTER_ROWS_ENV}={rows!r} is not a row count; allowed: 1 or more")
    name = os.environ.get(STOP_SIGNAL_ENV, "KILL")
    if name not in ("KILL", "TERM", "INT"):
        raise SpecError(f"{STOP_SIGNAL_ENV}={name!r} is unknown; allowed: KILL, TERM, INT")
    return int(rows), getattr(signal, f"SIG{name}")


def summarize_run(args: argparse.Namespace, written: list[Result], unavailable: dict[str, str], kept: int) -> None:
    """Print this run's rows as a short table, the unavailable targets, and where the report is."""
    from host.report import render

    width = max([16] + [len(row.target) + 1 + len(row.kernel) for row in written])
    print(f"{'target/kernel':<{width}} {'dtype':<8} {'B':>3} {'H':>4} {'N':>6} {'d':>4} {'causal':>6} {'p50 ms':>10} "
          f"{'GFLOP/s':>9} {'rel_l2':>9}  status")
    for row in written:
        fmt = lambda x, f: "-" if x is None else format(x, f)  # noqa: E731
        print(f"{row.target + '/' + row.kernel:<{width}} {row.dtype:<8} {row.batch:>3} {row.heads:>4} {row.seq:>6} {row.dim:>4} "
              f"{int(row.causal):>6} {fmt(row.p50_ms, '10.4g')} {fmt(row.gflops, '9.4g')} "
              f"{fmt(row.rel_l2, '9.2e')}  {row.status}{': ' + row.message if row.message else ''}")
    for name, reason in unavailable.items():
        print(f"unavailable: {name}: {reason}")
    counts = ", ".join(f"{sum(r.status == status for r in written)} {status}" for status in STATUSES
                       if any(r.status == status for r in written))
    print(f"{len(written)} rows written ({counts or 'none'}), {kept} of this sweep's rows already done before")
    try:
        paths = render(args.out)
    except KbenchError as exc:
        print(f"kbench: report not rendered: {exc}", file=sys.stderr)
        return
    print("report: " + ", ".join(str(path) for path in paths))


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM ends a sweep like Ctrl-C: finished rows stay, the summary says how to resume."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C ends a sweep even where a shell ignored SIGINT

    def body() -> int:
        try:
            parser, entries = build_parser()
            return run_sweep(parser.parse_args(argv), argv, parser, entries)
        except KeyboardInterrupt:
            print("kbench: interrupted; finished rows are kept in results.csv: rerun with --resume to complete the "
                  "sweep", file=sys.stderr)
            return 130

    return guard(body, usage_errors=(SpecError, ResultsError))


if __name__ == "__main__":
    sys.exit(main())
