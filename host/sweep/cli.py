"""`python -m host.compare`: sweep one attention problem over shapes, targets and kernels into one report.

Targets are found by name in host/sweep/registry.py's `TARGETS` (the only place that knows every target) and their
heavy libraries are imported only when they run, so a machine without CuPy, mpremote or unicorn still runs the CPU
rows. Each finished row is appended to OUT/results.csv at once; ``--resume`` completes an interrupted sweep without
duplicating or losing a row. At the end OUT/results.md and its plots are rendered from the files alone. One sweep
writes into an --out at a time: OUT/.kbench.lock (host/out_lock.py, shared with kernels.sweep and codesign explore)
is taken before anything there is read or changed and names the running sweep to a second one; the lock of a sweep
that no longer runs is taken over in one line.

Each target declares its own options (host/target_api.py); `--help` lists them in one group per target.
Exit status: 0 all rows ok (some may be skipped or oom); 1 some row wrong (outside its tolerance, or not
bit-exact) or failed (recorded in its row), no row measured at all, no selected target able to run here (no GPU, no
board, a port that does not exist: one line with each reason), a results file that failed during the sweep, a
report that could not be written whole (its rows are kept; one line per output missing), or another sweep writing
into --out (one line naming it; nothing there changed); 2 bad arguments only: a bad value (an
unknown target name included) or an unusable --out (with --resume, one whose results cannot be read); 130
interrupted (Ctrl-C) and 143 terminated (SIGTERM), each one line; finished rows are kept.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shlex
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Callable

import numpy as np

from host.errors import ResultsError, SpecError, UnavailableError
from host.cli_common import (Given, Parser, Terminated, folder, given, guard, int_list, integer, name_list,
                             output_folder, real, stop_line, terminate_on_sigterm, typed)
from host.out_lock import sweep_lock
from host.problem import LIMITS
from host.results import FAILED_STATUSES, Result
from host.results_file import ResultsFile
from host.run_log import RunInfo, read_runs
from host.target_api import RunContext
from host.sweep.registry import (TARGETS, TargetEntry, check_kernels, load_targets, open_sessions, select_targets,
                                  target_settings, unused_options)
from host.sweep.jobs import (DEFAULT_REPEATS, Job, LastInputs, check_pairings, check_repeats, measure, plan, repeats,
                             skipped_row)
from host.sweep.resume import open_out
from host.sweep.summary import summarize_run

#: Test hook: after this many rows are appended, the sweep sends itself KBENCH_STOP_SIGNAL (KILL, TERM or INT), so
#: kill-and-resume tests stop it at a known row instead of racing a timer.
STOP_AFTER_ROWS_ENV = "KBENCH_STOP_AFTER_ROWS"
STOP_SIGNAL_ENV = "KBENCH_STOP_SIGNAL"
#: How the lock of OUT names this tool to a second sweep.
TOOL = "host.compare"

def seq_list(name: str):
    """An argparse type: a comma-separated list of ints within problem.LIMITS[name]."""
    return int_list(name, *LIMITS[name])


def build_parser() -> tuple[Parser, dict[str, TargetEntry]]:
    parser = Parser(prog="python -m host.compare", doc=__doc__)
    shape = parser.add_argument_group("problem shape (the sweep runs every combination of the lists)")
    shape.add_argument("--seq", type=seq_list("seq"), default=(128, 256, 512), metavar="LIST", action=Given,
                       help="sequence lengths N (keys per head: the KV cache), comma-separated (default 128,256,512)")
    shape.add_argument("--dim", type=seq_list("dim"), default=(64,), action=Given,
                       help="head dimensions d (default 64)")
    shape.add_argument("--heads", type=seq_list("heads"), default=(4,), action=Given, help="heads H (default 4)")
    shape.add_argument("--batch", type=seq_list("batch"), default=(1,), action=Given,
                       help="batch sizes B (default 1)")
    shape.add_argument("--q-len", type=int_list("q_len", *LIMITS["seq"]), default=(None,), metavar="LIST",
                       dest="q_len", action=Given,
                       help="queries per head against the seq keys (decode: 1; a prefill chunk: more), each at most "
                            "every --seq: a q_len above one is refused before anything runs, in one line naming the "
                            "pairs (default: seq, self-attention; a q_len equal to a seq is that seq's self-attention "
                            "row)")
    shape.add_argument("--kv-heads", type=int_list("kv_heads", *LIMITS["heads"]), default=(None,), metavar="LIST",
                       dest="kv_heads", action=Given,
                       help="K/V heads, each dividing every --heads, refused like --q-len otherwise (grouped-query "
                            "attention; default: heads)")
    shape.add_argument("--causal", choices=("0", "1", "both"), default="both", action=Given,
                       help="causal masking (default both)")
    shape.add_argument("--workload", type=name_list, default=None, metavar="NAMES",
                       help="named workloads instead of the shape options, none of which may be given with it (a "
                            "model's heads, K/V heads, head dim and masking in prefill or decode at a stated context "
                            "and batch: host/workloads.toml); each row records its workload and results.md groups "
                            "the rows under it; list: print them")
    parser.add_argument("--seed", type=integer("seed", *LIMITS["seed"]), default=0, help="input seed (default 0)")
    parser.add_argument("--targets", type=name_list, default=None,
                        help=f"targets to run, from {', '.join(TARGETS)} (default: every available one)")
    parser.add_argument("--kernels", type=name_list, default=None, help="kernels to run (default: all)")
    warmup = parser.add_argument("--warmup", type=integer("warmup", 0, 100_000), default=None)
    iters = parser.add_argument("--iters", type=integer("iters", 1, 100_000), default=None)
    parser.add_argument("--out", type=folder, default=Path("reports/latest"),
                        help="output folder (default reports/latest)")
    parser.add_argument("--resume", action="store_true",
                        help="keep OUT/results.csv and run only the configurations it lacks (failed and wrong rows "
                             "again)")
    cluster = parser.add_argument_group("cluster options (docs/cluster.md)")
    cluster.add_argument("--cluster", metavar="ADDRESS", default=None,
                         help="run the rows on the Dask workers of this scheduler, e.g. tcp://10.0.0.5:8786 (workers: "
                              "python -m host.cluster worker); rows come back to OUT here")
    cluster.add_argument("--cluster-gpu", metavar="MODEL", default=None,
                         help="with --cluster: GPU rows only on workers whose GPU is this model, e.g. 'NVIDIA H200'")
    cluster.add_argument("--cluster-wait", type=real("cluster-wait", 0, 86_400), default=60.0, metavar="S",
                         help="with --cluster: seconds a row waits for a worker with its device when none is left, "
                              "before it is written as an error (default 60)")
    entries = load_targets(parser)
    warmup.help = f"untimed calls first (default: each target's own: {_repeats_text(entries, 0)})"
    iters.help = f"timed calls per row (default: each target's own: {_repeats_text(entries, 1)})"
    return parser, entries


def _repeats_text(entries: dict[str, TargetEntry], index: int) -> str:
    """'2 for cpu, gpu; 0 for mcu': each loaded target's default warm-up (index 0) or timed calls (index 1)."""
    by_count: dict[int, list[str]] = {}
    for name, entry in entries.items():
        if entry.module is not None:
            by_count.setdefault(getattr(entry.module, "REPEATS", DEFAULT_REPEATS)[index], []).append(name)
    return "; ".join(f"{count} for {', '.join(names)}" for count, names in by_count.items())


def check_out(out: Path, resume: bool) -> None:
    """Refuse, in one line and before any target starts, an --out that is a file, lies under a file or cannot be
    made or written, files there that are not files (a folder named results.csv), and (with --resume) a results
    file or run log there that cannot be read."""
    output_folder(out)
    for name in ("results.csv", "runs.jsonl"):
        if (out / name).is_symlink() and not (out / name).exists():  # appending would create its target, elsewhere
            raise SpecError(f"--out {out}: {out / name} is a link to {os.readlink(out / name)}, which does not exist; "
                            "remove the link or choose another --out")
        if (out / name).exists() and not (out / name).is_file():
            raise SpecError(f"--out {out}: {out / name} is not a file; move it aside or choose another --out")
        if resume and (out / name).exists() and not os.access(out / name, os.W_OK):
            raise SpecError(f"--out {out} --resume: {out / name} cannot be written (its permissions); allowed: a "
                            "file this user may append to, or another --out")
    if resume:
        results = ResultsFile(out / "results.csv")
        try:  # the header and first rows now; all rows are read once, by open_out (a bad one refused the same way)
            with contextlib.closing(results.rows()) as rows:
                next(rows, None)
            read_runs(out / "runs.jsonl")
        except ResultsError as exc:  # the folder named by --out cannot be resumed: a bad argument (exit 2)
            raise SpecError(f"--out {out} --resume: {exc}; move it aside or choose another --out") from None
        unknown = results.unknown_columns()
        if unknown:  # an append would drop them: refused before anything is measured
            raise SpecError(f"--out {out} --resume: {results.path} has columns this kbench does not know "
                            f"({', '.join(unknown)}), which a resume would drop; move them to another file")


#: The options a named workload sets, as (flag, argparse dest).
SHAPE_OPTIONS = (("--seq", "seq"), ("--dim", "dim"), ("--heads", "heads"), ("--batch", "batch"), ("--q-len", "q_len"),
                 ("--kv-heads", "kv_heads"), ("--causal", "causal"))


def run_sweep(args: argparse.Namespace, argv: list[str], parser: argparse.ArgumentParser,
              entries: dict[str, TargetEntry]) -> int:
    if args.workload is not None:
        from host.workloads import check_list_alone, listing, named

        if "list" in args.workload:
            if len(args.workload) > 1:  # another name beside list would be dropped unread
                raise SpecError(f"--workload {','.join(args.workload)}: list prints the table and runs nothing; "
                                "give it alone, or workload names without it")
            check_list_alone(parser, argv)
            print(listing())
            return 0
        shape_flags = [flag for flag, dest in SHAPE_OPTIONS if dest in given(args)]  # given, at any value
        if shape_flags:
            raise SpecError(f"--workload sets the problem's shape; drop {', '.join(shape_flags)} (or drop "
                            "--workload)")
        args.workloads = named(args.workload)
    else:
        check_pairings(args)
    settings = target_settings(args, entries)
    # the targets' own options typed on the command line, whatever their values (a default typed out too)
    target_options = typed(parser, argv, [dest for entry in entries.values() for dest in entry.dests])
    warnings = unused_options(target_options, entries, args.targets)  # printed once the options are accepted
    cluster_options = args.cluster_gpu is not None or args.cluster_wait != parser.get_default("cluster_wait")
    if args.cluster is None and cluster_options:
        raise SpecError("--cluster-gpu and --cluster-wait apply to a cluster sweep; give --cluster ADDRESS too")
    if args.cluster is not None:
        return _cluster_sweep(args, argv, entries, settings, target_options, warnings)
    for warning in warnings:
        print(f"kbench: {warning}", file=sys.stderr)
    with contextlib.ExitStack() as stack:
        stack.enter_context(sweep_lock(output_folder(args.out), TOOL))  # before anything in OUT is read or changed
        check_out(args.out, args.resume)
        for warning in check_kernels(args.kernels, entries, settings, args.targets):
            print(f"kbench: {warning}", file=sys.stderr)
        targets, unavailable = select_targets(args.targets, entries, settings)
        check_repeats(args, targets, settings)  # before a board or twin starts
        sessions = open_sessions(settings, targets, unavailable, stack)
        _check_any(targets, unavailable)
        devices = {name: module.device(settings.get(name), sessions.get(name)) for name, module in targets.items()
                   if getattr(module, "RESUME_BY_DEVICE", True)}

        def local_rows(todo: list[Job], context: RunContext, started: Callable[[Job], None]):
            """Measure the jobs here, one by one, with the sessions held for the sweep."""
            inputs = LastInputs()
            for job in todo:
                started(job)
                module = targets[job.target]
                yield job, measure(job, inputs.of(job), module, repeats(args, module), context,
                                   settings.get(job.target), sessions.get(job.target))

        return _sweep(args, argv, targets, unavailable, settings, local_rows,
                      {name: device for name, device in devices.items() if device})


def _check_any(targets: dict[str, ModuleType], unavailable: dict[str, str]) -> None:
    """No selected target can run here (no GPU, no board, a port that does not exist, no worker holding one): the
    machine cannot run what was asked, so UnavailableError (exit 1), not a bad argument."""
    if not targets:
        raise UnavailableError("nothing can be measured: " + "; ".join(f"target {name} unavailable: {reason}"
                                                                 for name, reason in unavailable.items()))


def _cluster_sweep(args: argparse.Namespace, argv: list[str], entries: dict[str, TargetEntry],
                   settings: dict[str, object], target_options: frozenset[str], warnings: list[str]) -> int:
    """The sweep on a Dask cluster's workers (host/sweep/cluster.py): targets chosen by what the workers hold."""
    try:
        from host.sweep.cluster import Cluster, check_address, check_local_options
    except ModuleNotFoundError as exc:
        if exc.name not in ("distributed", "dask"):
            raise
        raise UnavailableError(f"--cluster {args.cluster}: Dask distributed is not installed here: pip install -e "
                               "'.[cluster]' (docs/cluster.md), or leave --cluster out") from None

    check_address(args.cluster)
    check_local_options(target_options)
    for warning in warnings:
        print(f"kbench: {warning}", file=sys.stderr)
    names = list(args.targets or TARGETS)
    unknown = [name for name in names if name not in TARGETS]
    if unknown:
        raise SpecError(f"--targets: unknown target {unknown[0]!r}; allowed: {', '.join(TARGETS)}")
    with contextlib.ExitStack() as stack:
        stack.enter_context(sweep_lock(output_folder(args.out), TOOL))  # the rows come back into OUT here
        check_out(args.out, args.resume)
        for warning in check_kernels(args.kernels, entries, settings, args.targets):
            print(f"kbench: {warning}", file=sys.stderr)
        named = {name: entries[name].module for name in args.targets or () if entries[name].module is not None}
        check_repeats(args, named, settings)  # the targets --targets names, before the cluster is reached
        cluster = stack.enter_context(Cluster(args.cluster, args.cluster_wait, args.cluster_gpu))
        unavailable = {name: entries[name].reason for name in names if entries[name].module is None}
        unavailable.update(cluster.unavailable([name for name in names if name not in unavailable]))
        targets = {name: entries[name].module for name in names if name not in unavailable}
        check_repeats(args, targets, settings)  # the rest: those some worker holds
        _check_any(targets, unavailable)

        def cluster_rows(todo: list[Job], context: RunContext, started: Callable[[Job], None]):
            """A row whose shape its target cannot run is skipped here, as a local sweep skips it, never sent to
            a worker (it names no device and no worker); the others are measured on the workers."""
            calls = {name: repeats(args, module) for name, module in targets.items()}
            dispatched = []
            for job in todo:
                skipped = skipped_row(job, targets[job.target], context, device="")
                if skipped is None:
                    dispatched.append(job)
                else:
                    yield job, [skipped]
            yield from cluster.rows(dispatched, calls, settings, context)

        return _sweep(args, argv, targets, unavailable, settings, cluster_rows, {}, cluster.describe())


def _sweep(args: argparse.Namespace, argv: list[str], targets: dict[str, ModuleType], unavailable: dict[str, str],
           settings: dict[str, object], rows_of: Callable, devices: dict[str, str], cluster: dict | None = None) -> int:
    """Plan the jobs, open OUT (resuming where asked), then append each job's rows as `rows_of(todo, context,
    started)` yields them (here, or from a cluster's workers); `devices` says which device each target's finished
    rows must come from to count as done (none on a cluster: any worker's row counts)."""
    from tqdm import tqdm

    context = RunContext.start()  # before the output folder changes: a report inside the checkout is not "dirty" code
    stop_after = _stop_hook()
    jobs = plan(args, targets, settings, unavailable)
    try:
        opened = open_out(args.out, args.resume, {job.key() for job in jobs}, devices)
    except ResultsError as exc:  # the folder named by --out cannot be resumed or set aside: a bad argument (exit 2)
        raise SpecError(f"--out {args.out}{' --resume' if args.resume else ''}: {exc}; move it aside or choose "
                        "another --out") from None
    results = opened.results
    todo = [job for job in jobs if job.key() not in opened.done]
    for name, reason in unavailable.items():
        print(f"kbench: target {name} unavailable: {reason}", file=sys.stderr)
    if args.resume:
        print(f"kbench: resuming: {len(jobs) - len(todo)} of {len(jobs)} rows already in {results.path}",
              file=sys.stderr)
    if not todo and args.resume:
        opened.drop_superseded([])
        print("kbench: nothing left to measure; no run recorded", file=sys.stderr)
        return 0 if summarize_run(args, [], unavailable, len(jobs)) else 1
    RunInfo(run_id=context.run_id, timestamp=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            command="python -m host.compare " + shlex.join(argv), git_rev=context.git_rev, host=context.host,
            machine={"platform": platform.platform(), "python": platform.python_version(), "numpy": np.__version__,
                     "cpus": os.cpu_count(), **({"cluster": cluster} if cluster else {})},
            unavailable=dict(unavailable)).append_to(args.out / "runs.jsonl")
    written: list[Result] = []
    started = time.monotonic()
    try:
        with tqdm(total=len(todo), unit="row", file=sys.stderr, dynamic_ncols=True, disable=None) as bar:
            if cluster:
                bar.set_description(f"on {len(cluster['workers'])} workers")
            with contextlib.closing(iter(rows_of(todo, context, lambda job: bar.set_description(job.label())))) as rows:
                for done, (job, job_rows) in enumerate(rows, 1):
                    for row in job_rows:
                        try:
                            results.append(row)
                        except ResultsError as exc:  # a full disk: the rows before it are on disk, whole
                            raise ResultsError(f"{exc}; the row of {job.label()} ({row.status}) could not be written; "
                                               f"{len(written)} rows measured now and the {opened.rows_before} "
                                               "from before are kept there") from None
                        written.append(row)
                        if stop_after is not None and len(written) == stop_after[0]:
                            os.kill(os.getpid(), stop_after[1])
                    bar.update(1)
                    if bar.disable:  # no bar (stderr is a log, not a terminal): a line per finished job instead
                        print(progress_line(done, len(todo), job, job_rows, time.monotonic() - started),
                              file=sys.stderr, flush=True)
    except (KeyboardInterrupt, Terminated) as stop:  # the one line of a stopped sweep, saying what it kept
        opened.drop_superseded(written)
        line, code = stop_line(stop)
        if written or results.path.exists():
            kept = (f"{len(written)} rows measured now and the {opened.rows_before} from before are kept in "
                    f"{results.path}: rerun with --resume to complete the sweep")
        else:  # stopped before its first row of a fresh sweep: results.csv was never written
            kept = f"no row was measured, so {results.path} was not written: rerun to measure the sweep"
        print(f"kbench: {line}; {kept}", file=sys.stderr)
        return code
    opened.drop_superseded(written)
    reported = summarize_run(args, written, unavailable, len(jobs) - len(todo))
    if written and all(row.status in ("oom", "skipped") for row in written):
        print(f"kbench: no row was measured ({len(written)} rows oom or skipped)", file=sys.stderr)
        return 1
    return 1 if not reported or any(row.status in FAILED_STATUSES for row in written) else 0


def progress_line(done: int, total: int, job: Job, rows: list[Result], elapsed_s: float) -> str:
    """A finished job in a log: 'kbench: 3/12 cpu/numpy B1 H2 N97 d32 causal: ok (4.2 s)', the time since the
    sweep began."""
    statuses = Counter(row.status for row in rows)
    said = next(iter(statuses)) if len(rows) == 1 else ", ".join(f"{n} {status}" for status, n in statuses.items())
    return f"kbench: {done}/{total} {job.label()}: {said or 'no row'} ({elapsed_s:.1f} s)"


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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    terminate_on_sigterm()  # SIGTERM ends a sweep as Ctrl-C does (finished rows kept, one line), with 143

    def body() -> int:
        parser, entries = build_parser()
        return run_sweep(parser.parse_args(argv), argv, parser, entries)

    return guard(body, interrupted="finished rows are kept in results.csv: rerun with --resume to complete the sweep")

