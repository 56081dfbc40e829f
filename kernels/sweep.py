"""`python -m kernels.sweep`: the flash kernel's (Br, Bc) tile sweep on the GPU, one heatmap panel per N.

Every (N, Br, Bc) cell is one row of the one results schema (host/results.py), measured by the GPU target itself
(kernels/target.py `run` with the tile forced): the launch is judged against the float64 golden (host/verdict.py)
before it is timed with the device's timer (CUDA events, L2 flushed between repeats), so a cell is `ok`, `wrong`
(outside the derived tolerance: figures kept), `skipped` (the block does not fit the device's opt-in shared memory,
kernels/budget.py `fits`: not run), `oom` or `error` (one cell's failure is that cell's row; the sweep goes on).

Each row is a progress line on stderr as it finishes ([k/total], elapsed seconds), in a log as on a terminal; Ctrl-C
or SIGTERM ends the sweep in one line saying how many rows results.csv kept. One sweep writes into an --out at a
time: OUT/.kbench.lock (host/out_lock.py, shared with host.compare and codesign explore) is taken before anything
there changes and names the running sweep to a second one; the lock of a sweep that no longer runs is taken over in
one line. The default grid suits the device:
on a GPU the grid of docs/gpu.md; on the fake (numpy on the CPU, where N = 4096 at Br = 8 takes minutes per cell)
a small grid that runs in seconds.

Outputs, under --out (default reports/latest/sweep, which git ignores): results.csv (appended and flushed row by
row, readable by `python -m host.report`), runs.jsonl (the command, the device and its limits) and
sweep_heatmap.png (Br down, Bc across, TFLOP/s in each cell, the best cell outlined, cells that are not ok grey with
an x). Last, a table per N: the best tile, and the budget's largest square tile for comparison.

Usage: ``python -m kernels.sweep [--br LIST] [--bc LIST] [--seq LIST] [--dim 64] [--heads 16] [--batch 1]
[--causal 0] [--iters 10] [--gpu-device cuda|fake] [--out DIR]``.
Exit status: 0 every cell ok or skipped; 1 a cell wrong or failed, no cell measured at all, or no device to run on
(no GPU: one ``kbench: ...`` line with the reason), or another sweep writing into --out (one line naming it;
nothing there changed); 2 bad arguments only, an unusable --out included (one ``kbench: error: ...`` line on
stderr); 130 interrupted (Ctrl-C) and 143 terminated (SIGTERM), each one line with the rows kept.
CuPy is imported only through kernels.cuda.
"""

from __future__ import annotations

import argparse
import math
import shlex
import signal
import sys
import textwrap
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from host.cli_common import (Parser, Terminated, folder, guard, int_list, integer, output_folder, stop_line,
                             terminate_on_sigterm)
from host.errors import KbenchError, ResultsError, UnavailableError
from host.out_lock import sweep_lock
from host.problem import LIMITS, AttentionProblem
from host.results import FAILED_STATUSES, Result
from host.results_file import ResultsFile
from host.safe_files import keep_aside
from host.run_log import RunInfo
from host.target_api import Inputs, RunContext, RunOptions
from kernels import budget, target
from kernels.headline_timing import figure

RESULTS_NAME = "results.csv"
RUNS_NAME = "runs.jsonl"
HEATMAP_NAME = "sweep_heatmap.png"
WARMUP = 3

#: The default grid per device: on a GPU the sweep of docs/gpu.md; on the numpy fake a grid of seconds (its flash
#: walks the tiles in Python: N = 4096 at Br = Bc = 8 is 512² tile steps per head, minutes per cell).
DEFAULTS = {"cuda": {"br": (8, 16, 32, 64), "bc": (8, 16, 32, 64), "seq": (64, 128, 512, 1024, 4096)},
            "fake": {"br": (16, 32, 64), "bc": (16, 32, 64), "seq": (64, 256)}}
DEFAULT_OUT = Path("reports/latest/sweep")
#: How the lock of OUT names this tool to a second sweep.
TOOL = "kernels.sweep"


# ---------------------------------------------------------------------------------------------------------- measure

def measure(problem: AttentionProblem, inputs: Inputs, br: int, bc: int, limits: budget.DeviceLimits, iters: int,
            context: RunContext, settings: target.Settings) -> Result:
    """One cell: skipped when the block does not fit `limits`, else the GPU target's row for this tile."""
    fits, why = budget.fits(br, bc, problem.dim, limits)
    if not fits:
        return context.result(problem, target="gpu", kernel="flash", device=target.device(settings), br=br, bc=bc,
                              status="skipped", message=why)
    options = RunOptions(context=context, kernel="flash", warmup=WARMUP, iters=iters,
                         settings=target.Settings(device=settings.device, tile=(br, bc)))
    try:
        [row] = target.run(problem, inputs, options)
        return row
    except KbenchError as exc:
        status, message = getattr(exc, "status", "error"), f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - one cell's failure (compile, launch, OOM) is that cell's row
        status, message = "error", f"{type(exc).__name__}: {exc}"
    return context.result(problem, target="gpu", kernel="flash", device=target.device(settings), br=br, bc=bc,
                          status=status, message=message.replace("\n", " ")[:500])


def sweep(problems: Sequence[AttentionProblem], brs: Sequence[int], bcs: Sequence[int], limits: budget.DeviceLimits,
          iters: int, context: RunContext, settings: target.Settings, sink: Callable[[Result], None]) -> list[Result]:
    """Every (problem, Br, Bc), N by N; each row goes to `sink` as it finishes."""
    rows = []
    for problem in problems:
        try:
            inputs = Inputs(problem)
        except MemoryError as exc:  # the problem itself does not fit this machine: every cell says so
            inputs, why = None, f"out of memory: {exc}"
        for br in brs:
            for bc in bcs:
                if inputs is None:
                    row = context.result(problem, target="gpu", kernel="flash", device=target.device(settings), br=br,
                                         bc=bc, status="oom", message=why)
                else:
                    row = measure(problem, inputs, br, bc, limits, iters, context, settings)
                sink(row)
                rows.append(row)
    return rows


def tflops(row: Result) -> float | None:
    """The row's TFLOP/s when it ran and passed, else None."""
    ran = row.status == "ok" and row.gflops is not None and math.isfinite(row.gflops)
    return row.gflops / 1e3 if ran else None


# ---------------------------------------------------------------------------------------------------------- heatmap

def best(rows: Iterable[Result]) -> Result | None:
    """The row with the highest TFLOP/s among those that ran and passed; None if none did."""
    ran = [row for row in rows if tflops(row) is not None]
    return max(ran, key=tflops) if ran else None


def heatmap(rows: Sequence[Result], path: Path, title: str = "") -> Path:
    """One panel per N: Br on y, Bc on x, TFLOP/s in each cell; the best cell outlined; failed, errored or skipped
    cells grey with an x. matplotlib's object API on Agg, imported here."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    rows = [row for row in rows if row.br is not None and row.bc is not None]
    if not rows:
        raise ResultsError("no sweep rows (flash rows with a tile) to plot")
    ns = sorted({row.seq for row in rows})
    brs = sorted({row.br for row in rows})
    bcs = sorted({row.bc for row in rows})
    fig = Figure(figsize=(0.75 * len(bcs) * len(ns) + 1.2 * len(ns), 0.6 * len(brs) + 1.6), layout="constrained")
    axes = fig.subplots(1, len(ns), squeeze=False)[0]
    for ax, n in zip(axes, ns):
        panel = {(row.br, row.bc): row for row in rows if row.seq == n}
        grid = np.full((len(brs), len(bcs)), np.nan)  # (Br, Bc)
        for (br, bc), cell in panel.items():
            if tflops(cell) is not None:
                grid[brs.index(br), bcs.index(bc)] = tflops(cell)
        shown = np.ma.masked_invalid(grid)
        image = ax.imshow(shown, cmap=_grey_bad("viridis"), origin="upper", aspect="auto")
        if shown.count():
            fig.colorbar(image, ax=ax, shrink=0.8, label="TFLOP/s")
        low, high = (float(shown.min()), float(shown.max())) if shown.count() else (0.0, 1.0)
        for i, br in enumerate(brs):
            for j, bc in enumerate(bcs):
                cell = panel.get((br, bc))
                if cell is None:
                    continue
                if tflops(cell) is None:
                    ax.text(j, i, "x", ha="center", va="center", color="dimgrey", fontsize=11)
                    continue
                light = (tflops(cell) - low) / (high - low) > 0.6 if high > low else True
                ax.text(j, i, f"{tflops(cell):.3g}", ha="center", va="center", fontsize=8,
                        color="black" if light else "white")
        top = best(panel.values())
        if top is not None:
            ax.add_patch(Rectangle((bcs.index(top.bc) - 0.5, brs.index(top.br) - 0.5), 1, 1, fill=False,
                                   edgecolor="red", linewidth=2.5))
        ax.set_xticks(range(len(bcs)), [str(bc) for bc in bcs])
        ax.set_yticks(range(len(brs)), [str(br) for br in brs])
        ax.set_xlabel("Bc (keys per tile)")
        ax.set_ylabel("Br (queries per tile)")
        ax.set_title(f"N = {n}" + (f": best {top.br}×{top.bc}" if top else ": none ran"), fontsize=10)
    if title:  # wrapped to the figure's width (about 0.55 em per character): a long device name is not clipped
        width = fig.get_figwidth() * 72 / (10 * 0.55)
        fig.suptitle(textwrap.fill(title, max(20, int(width))), fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def _grey_bad(name: str):
    from matplotlib import colormaps

    return colormaps[name].with_extremes(bad="lightgrey")


# ---------------------------------------------------------------------------------------------------------- summary

def summary(rows: Sequence[Result], limits: budget.DeviceLimits) -> str:
    """Per N: the best tile and its TFLOP/s; the budget's largest square tile keeping 2 blocks per SM (over
    budget.CANDIDATES) and the largest such square in the swept grid, each with its measured TFLOP/s."""
    lines = [f"{'N':>6} {'d':>4}  {'best Br×Bc':>10} {'TFLOP/s':>8}   {'budget square':>13} {'TFLOP/s':>8}   "
             f"{'swept square':>12} {'TFLOP/s':>8}"]
    swept_squares = sorted({row.br for row in rows} & {row.bc for row in rows})
    for n in sorted({row.seq for row in rows}):
        panel = [row for row in rows if row.seq == n]
        d = panel[0].dim
        by_tile = {(row.br, row.bc): row for row in panel}
        top = best(panel)
        square = budget.largest_square_tile(d, limits, candidates=target.TILE_CHOICES)  # one the kernel runs
        swept = budget.largest_square_tile(d, limits, candidates=swept_squares) if swept_squares else None
        lines.append(f"{n:>6} {d:>4}  {_tile(top):>10} {_tflops(top):>8}   {_square(square):>13} "
                     f"{_tflops(by_tile.get((square, square)), 'not swept'):>8}   {_square(swept):>12} "
                     f"{_tflops(by_tile.get((swept, swept)), '-'):>8}")
    return "\n".join(lines)


def _tile(row: Result | None) -> str:
    return f"{row.br}×{row.bc}" if row else "none ran"


def _square(tile: int | None) -> str:
    return f"{tile}×{tile}" if tile else "none"


def _tflops(row: Result | None, missing: str = "-") -> str:
    if row is None:
        return missing
    value = tflops(row)
    return figure(value) if value is not None else row.status


# ---------------------------------------------------------------------------------------------------------- CLI

def build_parser() -> argparse.ArgumentParser:
    tiles = target.TILE_CHOICES
    parser = Parser(prog="python -m kernels.sweep", doc=__doc__)
    parser.add_argument("--br", type=int_list("Br", min(tiles), max(tiles), tiles), metavar="LIST",
                        help=f"query-tile rows, from {','.join(map(str, tiles))} ({_default_help('br')})")
    parser.add_argument("--bc", type=int_list("Bc", min(tiles), max(tiles), tiles), metavar="LIST",
                        help=f"key-tile columns, from {','.join(map(str, tiles))} ({_default_help('bc')})")
    parser.add_argument("--seq", type=int_list("seq", *LIMITS["seq"]), metavar="LIST",
                        help=f"sequence lengths N ({_default_help('seq')})")
    parser.add_argument("--dim", type=integer("dim", *LIMITS["dim"]), default=64, help="head dimension d (default 64)")
    parser.add_argument("--heads", type=integer("heads", *LIMITS["heads"]), default=16, help="heads (default 16)")
    parser.add_argument("--batch", type=integer("batch", *LIMITS["batch"]), default=1, help="batch (default 1)")
    parser.add_argument("--causal", type=integer("causal", 0, 1), default=0, help="1 for the causal mask (default 0)")
    parser.add_argument("--iters", type=integer("iters", 1, 100_000), default=10,
                        help="timed launches per cell (default 10)")
    parser.add_argument("--gpu-device", choices=target.DEVICES, default="cuda",
                        help="cuda: the GPU (default); fake: kernels/fake.py, to try the sweep without a GPU")
    parser.add_argument("--out", type=folder, default=DEFAULT_OUT,
                        help=f"output folder (default {DEFAULT_OUT}, inside a folder git ignores)")
    return parser


def _default_help(name: str) -> str:
    return "; ".join(f"default on {device}: {','.join(map(str, grid[name]))}" for device, grid in DEFAULTS.items())


def with_device_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """The grid options left out take the device's defaults (DEFAULTS)."""
    for name, value in DEFAULTS[args.gpu_device].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """The sweep with parsed, device-checked arguments: files under args.out, a progress line per row on stderr, the
    summary on stdout, OUT locked throughout; an interrupt ends it in one line with the rows kept (130; SIGTERM
    143)."""
    problems = [AttentionProblem(batch=args.batch, heads=args.heads, seq=n, dim=args.dim, causal=bool(args.causal))
                for n in args.seq]
    settings = target.Settings(device=args.gpu_device)
    limits, source = budget.choose_device(None) if settings.device == "cuda" else (budget.PROFILES["h200"],
                                                                                  "the fake device's h200 profile")
    context = RunContext.start()  # before the output folder changes
    out: Path = output_folder(args.out)
    with sweep_lock(out, TOOL):  # before the previous files are moved aside
        device = start_files(out, context, argv, target.device(settings), limits, source)
        print(f"device: {device}; limits: {source}", flush=True)
        progress = Progress(ResultsFile(out / RESULTS_NAME), len(problems) * len(args.br) * len(args.bc))
        try:
            rows = sweep(problems, args.br, args.bc, limits, args.iters, context, settings, progress)
        except (KeyboardInterrupt, Terminated) as stop:
            line, code = stop_line(stop)
            print(f"kbench: {line}; {progress.done} of {progress.total} rows kept in {out / RESULTS_NAME}",
                  file=sys.stderr)
            return code
        return finish(rows, args, out, limits, device)


def start_files(out: Path, context: RunContext, argv: Sequence[str], device: str, limits: budget.DeviceLimits,
                source: str) -> str:
    """A fresh results.csv and runs.jsonl (the previous ones kept beside as .prev, .prev.1, ...: never over an
    earlier copy), the run's record first."""
    keep_aside(out / RESULTS_NAME, out / RUNS_NAME)
    RunInfo(run_id=context.run_id, timestamp=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            command="python -m kernels.sweep " + shlex.join(argv), git_rev=context.git_rev, host=context.host,
            machine={"device": device, "limits": asdict(limits), "limits_source": source,
                     "warmup": WARMUP}).append_to(out / RUNS_NAME)
    return device


class Progress:
    """A sweep's sink: each row appended to results.csv as it finishes, then one line on stderr, flushed, so a log
    shows the sweep as a terminal does."""

    def __init__(self, results: ResultsFile, total: int):
        self.results, self.total, self.done, self.start = results, total, 0, time.monotonic()

    def __call__(self, row: Result) -> None:
        self.results.append(row)
        self.done += 1
        elapsed = time.monotonic() - self.start
        print(f"[{self.done}/{self.total}, {elapsed:.0f} s] {row_line(row)}", file=sys.stderr, flush=True)


def row_line(row: Result) -> str:
    """A row in one line: its cell, time, rate, error and status (with the message where it is not ok)."""
    timing = f"{row.p50_ms:.4g} ms, {row.gflops / 1e3:.3g} TFLOP/s, " if row.p50_ms is not None and row.gflops else ""
    error = f"rel_l2 {row.rel_l2:.2e} " if row.rel_l2 is not None else ""
    note = f": {row.message}" if row.message and row.status != "ok" else ""
    return f"N={row.seq} Br={row.br} Bc={row.bc}: {timing}{error}{row.status}{note}"


def finish(rows: Sequence[Result], args: argparse.Namespace, out: Path, limits: budget.DeviceLimits,
           device: str) -> int:
    """The heatmap, the summary and the counts; the exit status of the rows."""
    d, h, b = args.dim, args.heads, args.batch
    heatmap(rows, out / HEATMAP_NAME, f"flash fp32 TFLOP/s, d={d}, H={h}, B={b}, causal={args.causal}; {device}")
    print(summary(rows, limits))
    failed = sum(row.status in FAILED_STATUSES for row in rows)
    print(f"{len(rows)} cells, {failed} wrong or failed, {sum(row.status == 'skipped' for row in rows)} skipped, "
          f"{sum(row.status == 'oom' for row in rows)} oom; {out / RESULTS_NAME}, {out / HEATMAP_NAME}")
    if not any(row.status == "ok" for row in rows) and not failed:
        print("kbench: no cell was measured (every tile skipped or out of memory)", file=sys.stderr)
        return 1
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)

    def body() -> int:
        args = with_device_defaults(build_parser().parse_args(argv))
        output_folder(args.out, create=False)  # a bad --out is the user's, said before the missing GPU
        ok, reason = target.available(target.Settings(device=args.gpu_device))
        if not ok:
            raise UnavailableError(f"nothing can be measured: {reason} (--gpu-device fake runs the sweep without a "
                                   "GPU)")
        return run(args, argv)

    previous = signal.getsignal(signal.SIGTERM)
    terminate_on_sigterm()  # SIGTERM (a timeout, a job scheduler) ends the sweep as Ctrl-C does, with 143
    try:
        return guard(body)
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
