"""`python -m host.compare`: sweep one attention problem over shapes, targets and kernels into one report.

The only module that knows every target. Targets are found by name in `TARGETS` and imported when selected, so a
machine without CuPy, mpremote or unicorn still runs the CPU rows. Each finished row is appended to
OUT/results.csv at once; ``--resume`` completes an interrupted sweep without duplicating or losing a row. At the end
OUT/results.md and its plots are rendered from the files alone.

Exit status: 0 all rows ok or skipped, 1 some row failed (recorded in its row), 2 bad arguments, 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import itertools
import os
import platform
import secrets
import shlex
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from host.errors import KbenchError, LinkError, SpecError, UnavailableError
from host.cli import Parser, guard, int_list, integer, name_list
from host.problem import LIMITS, AttentionProblem
from host.results import CONFIG_FIELDS, Result, ResultsFile, RunInfo
from host.target import Inputs, RunContext, RunOptions

#: target name → the module that implements it (see host/target.py for what such a module exposes).
TARGETS = {
    "cpu": "host.cpu",
    "gpu": "kernels.target",
    "mcu": "mcu.target",
}
#: warm-up and timed calls per row when neither --warmup nor --iters is given and the target has no REPEATS
DEFAULT_REPEATS = (2, 10)

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def seq_list(name: str):
    """An argparse type: a comma-separated list of ints within problem.LIMITS[name]."""
    return int_list(name, *LIMITS[name])


def build_parser() -> Parser:
    parser = Parser(prog="python -m host.compare", description=__doc__.split("\n\n")[0],
                    formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--seq", type=seq_list("seq"), default=(128, 256, 512), help="sequence lengths N")
    parser.add_argument("--dim", type=seq_list("dim"), default=(64,), help="head dimensions d")
    parser.add_argument("--heads", type=seq_list("heads"), default=(4,), help="heads H")
    parser.add_argument("--batch", type=seq_list("batch"), default=(1,), help="batch sizes B")
    parser.add_argument("--causal", choices=("0", "1", "both"), default="both", help="causal masking")
    parser.add_argument("--seed", type=integer("seed", 0), default=0, help="input seed")
    parser.add_argument("--targets", type=name_list, default=None,
                        help=f"targets to run (default: every available one of {', '.join(TARGETS)})")
    parser.add_argument("--kernels", type=name_list, default=None, help="kernels to run (default: all)")
    parser.add_argument("--warmup", type=integer("warmup", 0), default=None,
                        help=f"untimed calls first (default: the target's own; {DEFAULT_REPEATS[0]} for cpu and gpu, "
                             "0 for mcu)")
    parser.add_argument("--iters", type=integer("iters", 1), default=None,
                        help=f"timed calls per row (default: the target's own; {DEFAULT_REPEATS[1]} for cpu and gpu, "
                             "1 for mcu, whose DWT cycles barely vary)")
    parser.add_argument("--out", type=Path, default=Path("reports/latest"), help="output folder")
    parser.add_argument("--resume", action="store_true",
                        help="keep OUT/results.csv and run only the configurations it lacks (failed rows again)")
    parser.add_argument("--serial", metavar="PORT", default=None,
                        help="the MCU target's board, e.g. /dev/ttyACM0 (deploy first: python -m mcu.deploy --port PORT)")
    parser.add_argument("--baud", type=integer("baud", 1200, 12_000_000), default=115200,
                        help="the board's baud rate (USB CDC ignores it)")
    parser.add_argument("--sim", action="store_true",
                        help="the MCU target on the board twin (python -m mcu.sim), started and deployed here")
    parser.add_argument("--sim-faults", metavar="SPEC", default="",
                        help="line faults for the twin, e.g. drop=0.001,flip=0.001,delay=0.01,reset=200 (docs/twin.md)")
    parser.add_argument("--cpu-cache-sim", action="store_true",
                        help="without hardware counters, simulate the CPU's caches with valgrind's cachegrind")
    return parser


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


def select_targets(requested: tuple[str, ...] | None) -> tuple[dict[str, ModuleType], dict[str, str]]:
    """Import the requested targets (default: all); return ({name: module} available, {name: reason} unavailable)."""
    names = requested or tuple(TARGETS)
    unknown = [name for name in names if name not in TARGETS]
    if unknown:
        raise SpecError(f"--targets: unknown target {unknown[0]!r}; allowed: {', '.join(TARGETS)}")
    ready, missing = {}, {}
    for name in names:
        try:
            module = importlib.import_module(TARGETS[name])
            ok, reason = module.available()
        except ImportError as exc:
            ok, reason = False, f"cannot import {TARGETS[name]}: {exc}"
        if ok:
            ready[name] = module
        else:
            missing[name] = reason
    return ready, missing


def plan(args: argparse.Namespace, targets: dict[str, ModuleType]) -> list[Job]:
    """Every (problem, target, kernel) the arguments ask for, in sweep order (small problems first)."""
    kernels = {name: tuple(module.KERNELS) for name, module in targets.items()}
    known = sorted({kernel for names in kernels.values() for kernel in names})
    if args.kernels:
        unknown = [kernel for kernel in args.kernels if kernel not in known]
        if unknown:
            raise SpecError(f"--kernels: unknown kernel {unknown[0]!r}; allowed: {', '.join(known) or 'none'}")
    causal = {"0": (False,), "1": (True,), "both": (False, True)}[args.causal]
    jobs = []
    for batch, heads, dim, seq, is_causal in itertools.product(args.batch, args.heads, args.dim, args.seq, causal):
        for target, names in kernels.items():
            for kernel in names:
                if args.kernels and kernel not in args.kernels:
                    continue
                problem = AttentionProblem(batch=batch, heads=heads, seq=seq, dim=dim, causal=is_causal,
                                           dtype=targets[target].KERNELS[kernel], seed=args.seed)
                jobs.append(Job(target, kernel, problem))
    return jobs


def git_revision() -> str:
    """The checkout's short revision, '+dirty' when it has changes; 'unknown' outside a git checkout."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT_ROOT, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT_ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (rev + ("+dirty" if dirty else "")) if rev else "unknown"


def repeats(args: argparse.Namespace, module: ModuleType) -> tuple[int, int]:
    """(warmup, iters) for a target: the command line's where given, else the target's REPEATS, else the default."""
    warmup, iters = getattr(module, "REPEATS", DEFAULT_REPEATS)
    return (warmup if args.warmup is None else args.warmup), (iters if args.iters is None else args.iters)


def open_sessions(args: argparse.Namespace, targets: dict[str, ModuleType], unavailable: dict[str, str],
                  stack: contextlib.ExitStack) -> dict[str, object]:
    """Connect the targets that need a device for the whole sweep (open_session); one that cannot connect moves
    from `targets` to `unavailable` with the reason."""
    settings = {"serial": args.serial, "baud": args.baud, "sim": args.sim, "sim_faults": args.sim_faults}
    sessions = {}
    for name in list(targets):
        opener = getattr(targets[name], "open_session", None)
        if opener is None:
            continue
        try:
            sessions[name] = stack.enter_context(opener(settings))
        except (UnavailableError, LinkError) as exc:
            unavailable[name] = str(exc)
            del targets[name]
    return sessions


def measure(job: Job, inputs: Inputs, module: ModuleType, args: argparse.Namespace, context: RunContext,
            sessions: dict[str, object] | None = None) -> list[Result]:
    """Run one job; a failure becomes a row with status error (or oom) and the sweep goes on."""
    warmup, iters = repeats(args, module)
    extra = {"cpu_cache_sim": args.cpu_cache_sim, **(sessions or {})}
    options = RunOptions(context=context, kernel=job.kernel, warmup=warmup, iters=iters, extra=extra)
    try:
        return module.run(job.problem, inputs, options)
    except MemoryError as exc:
        status, message = "oom", f"out of memory: {exc or 'MemoryError'}"
    except KbenchError as exc:
        status, message = getattr(exc, "status", "error"), f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - any failure of one row is recorded in that row
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        status = "error"
        message = f"{type(exc).__name__}: {exc} (at {Path(frame.filename).name}:{frame.lineno})"
    return [context.result(job.problem, target=job.target, kernel=job.kernel, device=module.device(), status=status,
                           message=message.replace("\n", " "))]


def prepare_out(out: Path, resume: bool) -> tuple[ResultsFile, set[tuple]]:
    """Open OUT/results.csv; with resume keep its finished rows (dropping failed ones to retry them), else start
    afresh, keeping the previous file as results.csv.prev."""
    out.mkdir(parents=True, exist_ok=True)
    results = ResultsFile(out / "results.csv")
    if not resume:
        for name in ("results.csv", "runs.jsonl"):
            if (out / name).exists():
                os.replace(out / name, out / f"{name}.prev")
        return results, set()
    results.repair()
    rows = results.read()
    kept = [row for row in rows if row.status != "error"]
    if len(kept) != len(rows):
        results.rewrite(kept)
    return results, {untiled_key(row) for row in kept}


def untiled_key(row: Result) -> tuple:
    """A row's configuration without its tile: compare runs each kernel with the tile its target chooses."""
    return tuple(None if name in ("br", "bc") else value for name, value in zip(CONFIG_FIELDS, row.config_key()))


def run_sweep(args: argparse.Namespace, argv: list[str]) -> int:
    with contextlib.ExitStack() as stack:
        targets, unavailable = select_targets(args.targets)
        if (args.serial or args.sim) and "mcu" not in targets and "mcu" not in unavailable:
            print("kbench: --serial/--sim apply to the mcu target, which --targets leaves out", file=sys.stderr)
        sessions = open_sessions(args, targets, unavailable, stack)
        return _sweep(args, argv, targets, unavailable, sessions)


def _sweep(args: argparse.Namespace, argv: list[str], targets: dict[str, ModuleType], unavailable: dict[str, str],
           sessions: dict[str, object]) -> int:
    from tqdm import tqdm

    jobs = plan(args, targets)
    results, done = prepare_out(args.out, args.resume)
    todo = [job for job in jobs if job.key() not in done]
    context = RunContext(run_id=time.strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(2), git_rev=git_revision(),
                         host=platform.node())
    RunInfo(run_id=context.run_id, timestamp=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            command="python -m host.compare " + shlex.join(argv), git_rev=context.git_rev, host=context.host,
            machine={"platform": platform.platform(), "python": platform.python_version(), "numpy": np.__version__,
                     "cpus": os.cpu_count()}).append_to(args.out / "runs.jsonl")

    for name, reason in unavailable.items():
        print(f"kbench: target {name} unavailable: {reason}", file=sys.stderr)
    if args.resume:
        print(f"kbench: resuming: {len(jobs) - len(todo)} of {len(jobs)} rows already in {results.path}",
              file=sys.stderr)
    written: list[Result] = []
    inputs = None
    with tqdm(todo, unit="row", file=sys.stderr, dynamic_ncols=True, disable=None) as bar:
        for job in bar:
            bar.set_description(job.label())
            base = job.problem.with_(dtype="float32")
            if inputs is None or inputs.problem != base:
                inputs = Inputs(base)
            for row in measure(job, inputs, targets[job.target], args, context, sessions):
                results.append(row)
                written.append(row)
    summarize_run(args, written, unavailable, len(jobs) - len(todo))
    return 1 if any(row.status == "error" for row in written) else 0


def summarize_run(args: argparse.Namespace, written: list[Result], unavailable: dict[str, str], kept: int) -> None:
    """Print this run's rows as a short table, the unavailable targets, and where the report is."""
    from host.report import render

    print(f"{'target/kernel':<16} {'B':>3} {'H':>4} {'N':>6} {'d':>4} {'causal':>6} {'p50 ms':>10} "
          f"{'GFLOP/s':>9} {'rel_l2':>9}  status")
    for row in written:
        fmt = lambda x, f: "-" if x is None else format(x, f)  # noqa: E731
        print(f"{row.target + '/' + row.kernel:<16} {row.batch:>3} {row.heads:>4} {row.seq:>6} {row.dim:>4} "
              f"{int(row.causal):>6} {fmt(row.p50_ms, '10.4g')} {fmt(row.gflops, '9.4g')} "
              f"{fmt(row.rel_l2, '9.2e')}  {row.status}{': ' + row.message if row.message else ''}")
    for name, reason in unavailable.items():
        print(f"unavailable: {name}: {reason}")
    print(f"{len(written)} rows measured, {kept} kept from before, "
          f"{sum(r.status == 'error' for r in written)} failed")
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
            return run_sweep(build_parser().parse_args(argv), argv)
        except KeyboardInterrupt:
            print("kbench: interrupted; finished rows are kept in results.csv: rerun with --resume to complete the "
                  "sweep", file=sys.stderr)
            return 130

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
