"""`python -m kernels.sweep`: the flash kernel's (Br, Bc) tile sweep on the GPU, one heatmap panel per N.

For each N and each tile (Br, Bc) the flash kernel is built, its output is diffed against the float64 golden, and
its launches are timed with CUDA events (kernels/target.py `_event_times`: warm-ups, L2 flushed between repeats).
A tile whose block does not fit the device's opt-in shared memory (kernels/budget.py `fits`) is recorded as
'skipped', not run; an exception in one cell is recorded in that cell's row and the sweep goes on.

Outputs, under --out: sweep.csv (one row per cell, appended and flushed as each finishes; columns `COLUMNS`),
sweep_meta.json (device, limits and arguments) and sweep_heatmap.png (Br down, Bc across, TFLOP/s in each cell,
the best cell outlined, failed or skipped cells grey with an x). Last, a table per N: the best tile, and the
budget's largest square tile for comparison.

Usage: ``python -m kernels.sweep [--br 8,16,32,64] [--bc 8,16,32,64] [--seq 64,128,512,1024,4096] [--dim 64]
[--heads 16] [--batch 1] [--causal 0] [--iters 10] [--out reports/sweep]``.
Exit status: 0 done, or skipped without a GPU (one ``kbench: sweep skipped: <reason>`` line on stderr); 1 a run
error; 2 bad arguments (one ``kbench: error: ...`` line on stderr). CuPy is imported only through kernels.target.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, astuple, dataclass, fields
from pathlib import Path

import numpy as np

from host.errors import ResultsError
from host.cli_common import Parser, guard, int_list, integer
from host.problem import LIMITS, AttentionProblem
from host.reference import errors
from host.target_api import Inputs
from kernels import budget, target

CSV_NAME = "sweep.csv"
META_NAME = "sweep_meta.json"
HEATMAP_NAME = "sweep_heatmap.png"

#: A cell fails above this relative L2 error against the float64 golden. A correct fp32 flash kernel lands near
#: 1e-7 (float32 rounding over d-long dot products and N-long sums); a wrong tile or a race shows up as O(1).
REL_L2_LIMIT = 1e-5
WARMUP = 3

OK, FAILED, ERROR, SKIPPED = "ok", "failed", "error", "skipped"

DEFAULTS = {"br": (8, 16, 32, 64), "bc": (8, 16, 32, 64), "seq": (64, 128, 512, 1024, 4096)}


@dataclass(frozen=True)
class Cell:
    """One (N, Br, Bc) of the sweep. Times in ms; smem_bytes from budget.flash_smem_bytes; blocks_per_sm as the
    budget predicts it for this device; median_ms, tflops and rel_l2 are None when the cell did not run."""

    N: int
    d: int
    Br: int
    Bc: int
    smem_bytes: int
    blocks_per_sm: int
    median_ms: float | None
    tflops: float | None
    rel_l2: float | None
    status: str
    message: str = ""

    @property
    def ran(self) -> bool:
        return self.status == OK and self.tflops is not None and math.isfinite(self.tflops)


COLUMNS = tuple(f.name for f in fields(Cell))


# ---------------------------------------------------------------------------------------------------------- measure

def measure(problem: AttentionProblem, inputs: Inputs, br: int, bc: int, limits: budget.DeviceLimits,
            iters: int) -> Cell:
    """One cell: skipped when the block does not fit `limits`, else built, checked against the golden and timed."""
    smem = budget.flash_smem_bytes(br, bc, problem.dim)
    blocks = budget.blocks_per_sm(smem, limits, target.FLASH_THREADS)
    cell = dict(N=problem.seq, d=problem.dim, Br=br, Bc=bc, smem_bytes=smem, blocks_per_sm=blocks)
    fits, why = budget.fits(br, bc, problem.dim, limits)
    if not fits:
        return Cell(**cell, median_ms=None, tflops=None, rel_l2=None, status=SKIPPED, message=why)
    try:
        rel_l2, median_ms = _check_and_time(problem, inputs, br, bc, iters)
    except Exception as exc:  # noqa: BLE001 - one cell's failure (compile, launch, OOM) is that cell's row
        return Cell(**cell, median_ms=None, tflops=None, rel_l2=None, status=ERROR,
                    message=f"{type(exc).__name__}: {exc}".replace("\n", " ")[:500])
    tflops = problem.flops() / (median_ms / 1e3) / 1e12
    if not rel_l2 <= REL_L2_LIMIT:  # NaN compares false: failed too
        return Cell(**cell, median_ms=median_ms, tflops=tflops, rel_l2=rel_l2, status=FAILED,
                    message=f"rel_l2 {rel_l2:.3g} > {REL_L2_LIMIT:g} against the float64 golden")
    return Cell(**cell, median_ms=median_ms, tflops=tflops, rel_l2=rel_l2, status=OK)


def _check_and_time(problem: AttentionProblem, inputs: Inputs, br: int, bc: int, iters: int) -> tuple[float, float]:
    """(rel_l2 of one launch against the golden, median ms of `iters` timed launches)."""
    launcher = target.Launcher("flash", problem, inputs, br, bc)
    launcher.launch()
    out = launcher.out.get().reshape(problem.shape)  # (B, H, N, d); waits for the launch
    rel_l2 = errors(out, inputs.golden).rel_l2
    times = target._event_times(launcher.launch, warmup=WARMUP, iters=iters)
    return rel_l2, float(np.median(times))


def sweep(problems: Sequence[AttentionProblem], brs: Sequence[int], bcs: Sequence[int], limits: budget.DeviceLimits,
          iters: int, sink: Callable[[Cell], None]) -> list[Cell]:
    """Every (problem, Br, Bc), N by N; each cell goes to `sink` as it finishes."""
    cells = []
    for problem in problems:
        inputs = Inputs(problem)
        for br in brs:
            for bc in bcs:
                cell = measure(problem, inputs, br, bc, limits, iters)
                sink(cell)
                cells.append(cell)
    return cells


# ---------------------------------------------------------------------------------------------------------- files

class CsvSink:
    """Writes the header, then one row per cell, flushed at once, so an interrupted sweep keeps what finished."""

    def __init__(self, path: Path):
        self._file = path.open("w", newline="")
        self._writer = csv.writer(self._file)
        self._writer.writerow(COLUMNS)
        self._file.flush()

    def __call__(self, cell: Cell) -> None:
        self._writer.writerow(["" if value is None else value for value in astuple(cell)])
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_cells(path: Path) -> list[Cell]:
    """The cells of a sweep.csv; ResultsError naming the file and row when it is not one."""
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise ResultsError(f"cannot read {path}: {exc}") from None
    cells = []
    for number, row in enumerate(rows, start=2):
        try:
            cells.append(Cell(
                N=int(row["N"]), d=int(row["d"]), Br=int(row["Br"]), Bc=int(row["Bc"]),
                smem_bytes=int(row["smem_bytes"]), blocks_per_sm=int(row["blocks_per_sm"]),
                median_ms=_float(row["median_ms"]), tflops=_float(row["tflops"]), rel_l2=_float(row["rel_l2"]),
                status=row["status"], message=row["message"] or ""))
        except (KeyError, TypeError, ValueError) as exc:
            raise ResultsError(f"{path}:{number} is not a sweep row ({type(exc).__name__}: {exc}): {row}") from None
    return cells


def _float(text: str) -> float | None:
    return float(text) if text not in ("", None) else None


# ---------------------------------------------------------------------------------------------------------- heatmap

def best(cells: Iterable[Cell]) -> Cell | None:
    """The cell with the highest TFLOP/s among those that ran and passed; None if none did."""
    ran = [cell for cell in cells if cell.ran]
    return max(ran, key=lambda cell: cell.tflops) if ran else None


def heatmap(cells: Sequence[Cell], path: Path, title: str = "") -> Path:
    """One panel per N: Br on y, Bc on x, TFLOP/s in each cell; the best cell outlined; failed, errored or skipped
    cells grey with an x. matplotlib's object API on Agg, imported here."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    if not cells:
        raise ResultsError("no sweep cells to plot")
    ns = sorted({cell.N for cell in cells})
    brs = sorted({cell.Br for cell in cells})
    bcs = sorted({cell.Bc for cell in cells})
    fig = Figure(figsize=(0.75 * len(bcs) * len(ns) + 1.2 * len(ns), 0.6 * len(brs) + 1.6), layout="constrained")
    axes = fig.subplots(1, len(ns), squeeze=False)[0]
    for ax, n in zip(axes, ns):
        panel = {(cell.Br, cell.Bc): cell for cell in cells if cell.N == n}
        grid = np.full((len(brs), len(bcs)), np.nan)  # (Br, Bc)
        for (br, bc), cell in panel.items():
            if cell.ran:
                grid[brs.index(br), bcs.index(bc)] = cell.tflops
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
                if not cell.ran:
                    ax.text(j, i, "x", ha="center", va="center", color="dimgrey", fontsize=11)
                    continue
                light = (cell.tflops - low) / (high - low) > 0.6 if high > low else True
                ax.text(j, i, f"{cell.tflops:.3g}", ha="center", va="center", fontsize=8,
                        color="black" if light else "white")
        top = best(panel.values())
        if top is not None:
            ax.add_patch(Rectangle((bcs.index(top.Bc) - 0.5, brs.index(top.Br) - 0.5), 1, 1, fill=False,
                                   edgecolor="red", linewidth=2.5))
        ax.set_xticks(range(len(bcs)), [str(bc) for bc in bcs])
        ax.set_yticks(range(len(brs)), [str(br) for br in brs])
        ax.set_xlabel("Bc (keys per tile)")
        ax.set_ylabel("Br (queries per tile)")
        ax.set_title(f"N = {n}" + (f": best {top.Br}×{top.Bc}" if top else ": none ran"), fontsize=10)
    if title:
        fig.suptitle(title, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def _grey_bad(name: str):
    from matplotlib import colormaps

    return colormaps[name].with_extremes(bad="lightgrey")


# ---------------------------------------------------------------------------------------------------------- summary

def summary(cells: Sequence[Cell], limits: budget.DeviceLimits) -> str:
    """Per N: the best tile and its TFLOP/s; the budget's largest square tile keeping 2 blocks per SM (over
    budget.CANDIDATES) and the largest such square in the swept grid, each with its measured TFLOP/s."""
    lines = [f"{'N':>6} {'d':>4}  {'best Br×Bc':>10} {'TFLOP/s':>8}   {'budget square':>13} {'TFLOP/s':>8}   "
             f"{'swept square':>12} {'TFLOP/s':>8}"]
    swept_squares = sorted({cell.Br for cell in cells} & {cell.Bc for cell in cells})
    for n in sorted({cell.N for cell in cells}):
        panel = [cell for cell in cells if cell.N == n]
        d = panel[0].d
        by_tile = {(cell.Br, cell.Bc): cell for cell in panel}
        top = best(panel)
        square = budget.largest_square_tile(d, limits)
        swept = budget.largest_square_tile(d, limits, candidates=swept_squares) if swept_squares else None
        lines.append(f"{n:>6} {d:>4}  {_tile(top):>10} {_tflops(top):>8}   {_square(square):>13} "
                     f"{_tflops(by_tile.get((square, square)), 'not swept'):>8}   {_square(swept):>12} "
                     f"{_tflops(by_tile.get((swept, swept)), '-'):>8}")
    return "\n".join(lines)


def _tile(cell: Cell | None) -> str:
    return f"{cell.Br}×{cell.Bc}" if cell else "none ran"


def _square(tile: int | None) -> str:
    return f"{tile}×{tile}" if tile else "none"


def _tflops(cell: Cell | None, missing: str = "-") -> str:
    if cell is None:
        return missing
    return f"{cell.tflops:.2f}" if cell.ran else cell.status


# ---------------------------------------------------------------------------------------------------------- CLI

def build_parser() -> argparse.ArgumentParser:
    tiles = target.TILE_CHOICES
    parser = Parser(prog="python -m kernels.sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--br", type=int_list("Br", min(tiles), max(tiles), tiles), default=DEFAULTS["br"], metavar="LIST",
                        help=f"query-tile rows, from {','.join(map(str, tiles))} (default 8,16,32,64)")
    parser.add_argument("--bc", type=int_list("Bc", min(tiles), max(tiles), tiles), default=DEFAULTS["bc"], metavar="LIST",
                        help=f"key-tile columns, from {','.join(map(str, tiles))} (default 8,16,32,64)")
    parser.add_argument("--seq", type=int_list("seq", *LIMITS["seq"]), default=DEFAULTS["seq"], metavar="LIST",
                        help="sequence lengths N (default 64,128,512,1024,4096)")
    parser.add_argument("--dim", type=integer("dim", *LIMITS["dim"]), default=64, help="head dimension d (default 64)")
    parser.add_argument("--heads", type=integer("heads", *LIMITS["heads"]), default=16, help="heads (default 16)")
    parser.add_argument("--batch", type=integer("batch", *LIMITS["batch"]), default=1, help="batch (default 1)")
    parser.add_argument("--causal", type=integer("causal", 0, 1), default=0, help="1 for the causal mask (default 0)")
    parser.add_argument("--iters", type=integer("iters", 1, 100_000), default=10, help="timed launches per cell (default 10)")
    parser.add_argument("--out", type=Path, default=Path("reports/sweep"), help="output folder (default reports/sweep)")
    return parser


def run(args: argparse.Namespace) -> int:
    """The sweep with parsed, GPU-checked arguments: files under args.out, the summary on stdout."""
    problems = [AttentionProblem(batch=args.batch, heads=args.heads, seq=n, dim=args.dim, causal=bool(args.causal))
                for n in args.seq]
    limits, source = budget.choose_device(None)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    device = target.device()
    meta = {"device": device, "limits": asdict(limits), "limits_source": source, "rel_l2_limit": REL_L2_LIMIT,
            "warmup": WARMUP, "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "args": {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()}}
    (out / META_NAME).write_text(json.dumps(meta, indent=2) + "\n")
    print(f"device: {device}; limits: {source}")
    sink = CsvSink(out / CSV_NAME)

    def record(cell: Cell) -> None:
        sink(cell)
        timing = f"{cell.median_ms:.4g} ms, {cell.tflops:.3g} TFLOP/s, " if cell.median_ms is not None else ""
        error = f"rel_l2 {cell.rel_l2:.2e} " if cell.rel_l2 is not None else ""
        note = f": {cell.message}" if cell.message and cell.status != OK else ""
        print(f"N={cell.N} Br={cell.Br} Bc={cell.Bc}: {timing}{error}{cell.status}{note}", file=sys.stderr)

    try:
        cells = sweep(problems, args.br, args.bc, limits, args.iters, record)
    finally:
        sink.close()
    d, h, b = args.dim, args.heads, args.batch
    heatmap(cells, out / HEATMAP_NAME, f"flash fp32 TFLOP/s, d={d}, H={h}, B={b}, causal={args.causal}; {device}")
    print(summary(cells, limits))
    failed = sum(cell.status in (FAILED, ERROR) for cell in cells)
    print(f"{len(cells)} cells, {failed} failed or errored, "
          f"{sum(cell.status == SKIPPED for cell in cells)} skipped; {out / CSV_NAME}, {out / HEATMAP_NAME}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    def body() -> int:
        args = build_parser().parse_args(argv)
        ok, reason = target.available()
        if not ok:
            print(f"kbench: sweep skipped: {reason}", file=sys.stderr)
            return 0
        return run(args)

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
