"""`python -m kernels.nsight`: Nsight Compute's measured HBM traffic of the naive and flash kernels, next to the model.

scripts/run_nsight.sh drives it; three commands:

- ``drive --kernel K --seq N [--dim 64 --heads 16 --batch 1]``: the program ncu profiles. It builds the kernel's
  launcher, makes one warm-up call (compiles, touches the buffers) and then exactly one more call: ncu selects the
  second with ``--launch-skip C --launch-count C`` over the kernel-name filter, C being the kernels of one call.
- ``filter --kernel K``: prints those ncu arguments (the name filter, skip and count), so the script and this
  module agree on them.
- ``fold --csv FILE [--csv FILE ...] --out DIR``: reads ncu's ``--csv --page raw`` exports, one per run and named
  ``<kernel>_N<seq>.csv``; sums dram__bytes_read.sum + dram__bytes_write.sum over the kernels of the call (naive:
  scores, softmax, P·V), writes DIR/nsight.csv beside kernels.target.model_bytes, DIR/nsight_launches.csv (one row
  per profiled kernel) and DIR/hbm_traffic.png (log-log, measured and modelled bytes against N).

ncu's raw CSV: a header row (ID, Process ID, ..., Kernel Name, ..., one column per metric), on most versions a units
row (empty ID, a unit under each metric), then one row per profiled kernel. Values may carry thousands separators
and, without ``--print-units base``, scaled units (Kbyte, Mbyte, ...): both are undone here.

Exit status: 0 done; 1 no GPU for drive, or an export that cannot be read or folded; 2 bad arguments; 130
interrupted.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path

from host.errors import ResultsError, SpecError, UnavailableError
from host.cli_common import Parser, folder, guard, integer, output_folder
from host.problem import LIMITS, AttentionProblem
from host.results_file import ResultsFile
from kernels import budget, target
from kernels.fake import FakeDevice
from kernels.launch_configs import TILE_CHOICES

DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
L2_BYTES = "lts__t_bytes.sum"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
METRICS = (DRAM_READ, DRAM_WRITE, L2_BYTES, OCCUPANCY)

#: kernel → (ncu --kernel-name filter, kernels launched by one call of the Launcher).
PROFILED = {"naive": ("regex:^naive_(scores|softmax|pv)", 3), "flash": ("regex:flash_fwd", 1)}

#: Byte units ncu prints (decimal prefixes, as ncu scales them) and the binary ones, to bytes; "" where the export
#: has no units row (values are then in base units).
BYTE_UNITS = {"": 1, "byte": 1, "bytes": 1, "b": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
              "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
PERCENT_UNITS = {"%": 1.0, "": 1.0}

RUN_NAME = re.compile(r"^(?P<kernel>[a-z]+)_N(?P<seq>\d+)\.csv$")

FAKE_MODEL = FakeDevice.model()  # how a fake GPU's row begins its device

SUMMARY_NAME = "nsight.csv"
LAUNCHES_NAME = "nsight_launches.csv"
PLOT_NAME = "hbm_traffic.png"


# ---------------------------------------------------------------------------------------------------------- parse

@dataclass(frozen=True)
class Launch:
    """One profiled kernel launch: its name and METRICS in base units (bytes, percent)."""

    kernel_name: str
    dram_read: float
    dram_write: float
    l2_bytes: float
    occupancy_pct: float


def parse_raw(text: str, source: str = "ncu csv") -> list[Launch]:
    """The launches in ncu's ``--csv --page raw`` text. Lines before the header (==PROF== messages) are skipped; a
    units row, where present, scales each metric to base units. ResultsError names `source` and what is missing."""
    rows = list(csv.reader(io.StringIO(text)))
    start = next((i for i, row in enumerate(rows) if "Kernel Name" in row and "ID" in row), None)
    if start is None:
        raise ResultsError(f"{source}: no header row with 'ID' and 'Kernel Name' (is it ncu --csv --page raw?)")
    header = [name.strip() for name in rows[start]]
    missing = [metric for metric in METRICS if metric not in header]
    if missing:
        raise ResultsError(f"{source}: metric columns {', '.join(missing)} missing; header: {header}")
    column = {name: header.index(name) for name in ("ID", "Kernel Name", *METRICS)}
    units = {metric: "" for metric in METRICS}
    launches = []
    for number, row in enumerate(rows[start + 1:], start=start + 2):
        if len(row) < len(header):
            continue  # a blank or trailing message line
        if not row[column["ID"]].strip():  # the units row
            units = {metric: row[column[metric]].strip() for metric in METRICS}
            continue
        values = {metric: _value(row[column[metric]], units[metric], metric, f"{source}:{number}")
                  for metric in METRICS}
        launches.append(Launch(kernel_name=row[column["Kernel Name"]], dram_read=values[DRAM_READ],
                               dram_write=values[DRAM_WRITE], l2_bytes=values[L2_BYTES],
                               occupancy_pct=values[OCCUPANCY]))
    return launches


def _value(text: str, unit: str, metric: str, where: str) -> float:
    """A metric's value in base units: thousands separators dropped, the unit's scale applied; a count below 0, a
    value that is not finite, or an occupancy over 100 % is no measurement (ResultsError naming it)."""
    scales = PERCENT_UNITS if metric == OCCUPANCY else BYTE_UNITS
    scale = scales.get(unit.lower() if metric != OCCUPANCY else unit)
    if scale is None:
        raise ResultsError(f"{where}: unit {unit!r} of {metric} is unknown; known: {', '.join(sorted(scales))}")
    try:
        value = float(text.strip().replace(",", ""))
    except ValueError:
        raise ResultsError(f"{where}: {metric} = {text!r} is not a number") from None
    value *= scale
    top = 100.0 if metric == OCCUPANCY else math.inf
    if not (math.isfinite(value) and 0 <= value <= top):
        allowed = "0..100 %" if metric == OCCUPANCY else "a finite count of bytes, 0 or more"
        raise ResultsError(f"{where}: {metric} = {text!r} {unit} is out of range; allowed: {allowed}")
    return value


# ---------------------------------------------------------------------------------------------------------- fold

@dataclass(frozen=True)
class Traffic:
    """One (kernel, N): measured DRAM bytes of one call (summed over its kernels) beside target.model_bytes."""

    kernel: str
    N: int
    d: int
    heads: int
    batch: int
    launches: int
    kernel_names: str
    dram_read_bytes: float
    dram_write_bytes: float
    dram_bytes: float
    model_bytes: int
    measured_over_model: float
    l2_bytes: float
    achieved_occupancy_pct: float
    predicted_occupancy_pct: float | None
    Br: int | None = None  # flash's tile as profiled (the FFMA kernel's); None for naive
    Bc: int | None = None


def fold(kernel: str, problem: AttentionProblem, launches: Sequence[Launch], limits: budget.DeviceLimits,
         tile: tuple[int, int]) -> Traffic:
    """Sum one call's launches. achieved_occupancy_pct is the launches' unweighted mean (naive: three kernels);
    predicted_occupancy_pct (flash only) is budget.blocks_per_sm × 128 threads over the SM's thread limit."""
    if not launches:
        raise ResultsError(f"{kernel} N={problem.seq}: no profiled launches")
    read = sum(launch.dram_read for launch in launches)
    write = sum(launch.dram_write for launch in launches)
    model = target.model_bytes(kernel, problem)
    predicted = None
    if kernel == "flash":
        blocks = budget.blocks_per_sm(budget.flash_smem_bytes(*tile, problem.dim), limits, target.FLASH_THREADS)
        predicted = 100.0 * blocks * target.FLASH_THREADS / limits.max_threads_per_sm
    return Traffic(kernel=kernel, N=problem.seq, d=problem.dim, heads=problem.heads, batch=problem.batch,
                   launches=len(launches), kernel_names=";".join(launch.kernel_name for launch in launches),
                   dram_read_bytes=read, dram_write_bytes=write, dram_bytes=read + write, model_bytes=model,
                   measured_over_model=(read + write) / model,
                   l2_bytes=sum(launch.l2_bytes for launch in launches),
                   achieved_occupancy_pct=sum(launch.occupancy_pct for launch in launches) / len(launches),
                   predicted_occupancy_pct=predicted, **({"Br": tile[0], "Bc": tile[1]} if kernel == "flash" else {}))


def run_of(path: Path) -> tuple[str, int]:
    """(kernel, N) from a run file's name, ``<kernel>_N<seq>.csv``."""
    match = RUN_NAME.match(path.name)
    if not match or match["kernel"] not in PROFILED:
        raise SpecError(f"{path.name!r} is not named <kernel>_N<seq>.csv with kernel in {', '.join(PROFILED)}")
    return match["kernel"], int(match["seq"])


def write_csv(path: Path, rows: Sequence[object]) -> None:
    """Dataclass rows to CSV, None as an empty cell."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([field.name for field in fields(rows[0])])
        writer.writerows(["" if value is None else value for value in astuple(row)] for row in rows)


def plot(rows: Sequence[Traffic], path: Path) -> Path:
    """Log-log: measured DRAM bytes (markers) and modelled bytes (dashed) against N, one colour per kernel."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.4), layout="constrained")
    ax = fig.subplots()
    for index, kernel in enumerate(sorted({row.kernel for row in rows})):
        mine = sorted((row for row in rows if row.kernel == kernel), key=lambda row: row.N)
        n = [row.N for row in mine]
        colour = f"C{index}"
        ax.plot(n, [row.dram_bytes for row in mine], "o-", color=colour, label=f"{kernel}: measured (ncu DRAM)")
        ax.plot(n, [row.model_bytes for row in mine], "--", color=colour, label=f"{kernel}: model_bytes")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ns = sorted({row.N for row in rows})
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.minorticks_off()
    ax.set_xlabel("N (sequence length)")
    ax.set_ylabel("HBM bytes per call (read + write)")
    first = rows[0]
    ax.set_title(f"HBM traffic, fp32, d={first.d}, H={first.heads}, B={first.batch}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


# ---------------------------------------------------------------------------------------------------------- commands

def _problem(args: argparse.Namespace, seq: int) -> AttentionProblem:
    return AttentionProblem(batch=args.batch, heads=args.heads, seq=seq, dim=args.dim)


def _tile(args: argparse.Namespace, problem: AttentionProblem) -> tuple[int, int]:
    br, bc = target.default_tile(problem, target.sm_count()[0])
    tile = (args.br or br, args.bc or bc)
    target.check_tile(*tile)
    return tile


def cmd_drive(args: argparse.Namespace) -> int:
    """One warm-up call, then the call ncu selects."""
    ok, reason = target.available()
    if not ok:
        raise UnavailableError(f"nsight drive needs a GPU: {reason}")
    from host.target_api import Inputs

    problem = _problem(args, args.seq)
    launcher = target.launcher(args.kernel, problem, Inputs(problem), *_tile(args, problem))
    for _ in range(2):  # warm-up, then the profiled call
        launcher.launch()
        launcher.output()  # waits for the call
    print(f"nsight drive: {args.kernel} N={args.seq} d={args.dim} H={args.heads} B={args.batch}: "
          f"{PROFILED[args.kernel][1]} kernel(s) per call, 2 calls", file=sys.stderr)
    return 0


def cmd_filter(args: argparse.Namespace) -> int:
    name, count = PROFILED[args.kernel]
    print(f"--kernel-name {name} --launch-skip {count} --launch-count {count}")
    return 0


def cmd_fold(args: argparse.Namespace) -> int:
    output_folder(args.out, create=False)  # a file or a read-only place is refused before any export is read
    limits, source = budget.choose_device(None)
    rows, launch_rows = [], []
    for path in args.csv:
        kernel, seq = run_of(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ResultsError(f"cannot read {path}: {exc}") from None
        launches = parse_raw(text, str(path))
        expected = PROFILED[kernel][1]
        if len(launches) != expected:
            print(f"kbench: warning: {path} has {len(launches)} profiled launches, one call of {kernel} has "
                  f"{expected}", file=sys.stderr)
        problem = _problem(args, seq)
        rows.append(fold(kernel, problem, launches, limits, _tile(args, problem)))
        launch_rows.extend(_LaunchRow(kernel, seq, *astuple(launch)) for launch in launches)
    rows.sort(key=lambda row: (row.kernel, row.N))
    output_folder(args.out)
    write_csv(args.out / SUMMARY_NAME, rows)
    write_csv(args.out / LAUNCHES_NAME, launch_rows)
    plot(rows, args.out / PLOT_NAME)
    print(f"limits for predicted occupancy: {source}")
    print(f"{'kernel':<6} {'N':>6} {'measured B':>14} {'model B':>14} {'ratio':>6} {'L2 B':>14} {'occ %':>6} "
          f"{'pred %':>6}")
    for row in rows:
        predicted = f"{row.predicted_occupancy_pct:.0f}" if row.predicted_occupancy_pct is not None else "-"
        print(f"{row.kernel:<6} {row.N:>6} {row.dram_bytes:>14,.0f} {row.model_bytes:>14,} "
              f"{row.measured_over_model:>6.2f} {row.l2_bytes:>14,.0f} {row.achieved_occupancy_pct:>6.1f} "
              f"{predicted:>6}")
    print(f"{args.out / SUMMARY_NAME}, {args.out / LAUNCHES_NAME}, {args.out / PLOT_NAME}")
    return 0


#: The columns merge reads of nsight.csv; Br and Bc (flash's profiled tile) came with 2026-12-07's fold.
MERGE_COLUMNS = ("kernel", "N", "d", "heads", "batch", "dram_bytes", "Br", "Bc")


def read_summary(summary_path: Path) -> dict[tuple, int]:
    """nsight.csv's measured DRAM bytes by (kernel, N, d, heads, batch, Br, Bc) (naive: no tile); ResultsError when
    the file cannot be read or lacks a column."""
    try:
        with summary_path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            missing = [name for name in MERGE_COLUMNS if name not in (reader.fieldnames or ())]
            if missing:
                raise ResultsError(f"{summary_path} lacks column(s) {', '.join(missing)}: not a nsight.csv of "
                                   "`python -m kernels.nsight fold` (fold the exports again)")
            return {(row["kernel"], int(row["N"]), int(row["d"]), int(row["heads"]), int(row["batch"]),
                     int(row["Br"]) if row["Br"] else None, int(row["Bc"]) if row["Bc"] else None):
                    int(float(row["dram_bytes"])) for row in reader}
    except OSError as exc:
        raise ResultsError(f"cannot read {summary_path}: {exc.strerror or exc}") from None
    except (ValueError, TypeError) as exc:  # TypeError: a short row's missing cells read as None
        raise ResultsError(f"{summary_path}: a cell is missing or not a number ({exc})") from None


def profiled_as(row) -> bool:
    """Whether a results row ran what drive profiles: a float32 self-attention row (q_len and K/V heads as the
    problem's), not causal, on a real GPU (the fake's rows say so in their device)."""
    return (row.target == "gpu" and not row.causal and row.dtype == "float32" and row.q_len in (None, row.seq)
            and row.kv_heads in (None, row.heads) and not row.device.startswith(FAKE_MODEL))


def merge_measured(results_path: Path, summary_path: Path) -> int:
    """Write each profiled run's measured DRAM bytes from nsight.csv into the results.csv rows that ran the same
    kernel on the same shape (`profiled_as`; flash: the same tile, which also tells the FFMA kernel drive profiles
    from the 3xTF32 one), rewriting the file atomically; returns the rows changed."""
    measured = read_summary(summary_path)
    if not results_path.is_file():
        raise ResultsError(f"--results {results_path} is not a file (a results.csv of host.compare)")
    results = ResultsFile(results_path)
    rows, changed = [], 0
    for row in results.read():
        tile = (row.br, row.bc) if row.kernel == "flash" else (None, None)
        key = (row.kernel, row.seq, row.dim, row.heads, row.batch, *tile)
        if profiled_as(row) and key in measured:
            row = row.replace(measured_bytes=measured[key])
            changed += 1
        rows.append(row)
    results.rewrite(rows)
    return changed


def cmd_merge(args: argparse.Namespace) -> int:
    changed = merge_measured(args.results, args.summary)
    print(f"{changed} rows of {args.results} now carry measured_bytes from {args.summary}")
    return 0


@dataclass(frozen=True)
class _LaunchRow:
    kernel: str
    N: int
    kernel_name: str
    dram_read: float
    dram_write: float
    l2_bytes: float
    occupancy_pct: float


def _shape_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dim", type=integer("dim", *LIMITS["dim"]), default=64, help="head dimension d (default 64)")
    parser.add_argument("--heads", type=integer("heads", *LIMITS["heads"]), default=16, help="heads (default 16)")
    parser.add_argument("--batch", type=integer("batch", *LIMITS["batch"]), default=1, help="batch (default 1)")
    parser.add_argument("--br", type=integer("Br", min(TILE_CHOICES), max(TILE_CHOICES), TILE_CHOICES),
                        help=f"flash Br, one of {', '.join(map(str, TILE_CHOICES))} (default: target.default_tile)")
    parser.add_argument("--bc", type=integer("Bc", min(TILE_CHOICES), max(TILE_CHOICES), TILE_CHOICES),
                        help=f"flash Bc, one of {', '.join(map(str, TILE_CHOICES))} (default: target.default_tile)")


def _drive_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kernel", choices=PROFILED, required=True)
    parser.add_argument("--seq", type=integer("seq", *LIMITS["seq"]), required=True, help="sequence length N")
    _shape_options(parser)


def _filter_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kernel", choices=PROFILED, required=True)


def _fold_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--csv", type=Path, action="append", required=True,
                        help="an ncu --csv --page raw export named <kernel>_N<seq>.csv (repeat for each run)")
    parser.add_argument("--out", type=folder, required=True, help="folder for nsight.csv and hbm_traffic.png")
    _shape_options(parser)


def _merge_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--summary", type=Path, required=True, help="nsight.csv written by fold")
    parser.add_argument("--results", type=Path, required=True, help="a results.csv of host.compare")


#: command → (handler, what adds its arguments, one line of help).
COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], Callable[[argparse.ArgumentParser], None], str]] = {
    "drive": (cmd_drive, _drive_parser, "one warm-up call and one profiled call of a kernel"),
    "filter": (cmd_filter, _filter_parser, "print ncu's kernel filter, launch skip and count for a kernel"),
    "fold": (cmd_fold, _fold_parser, "sum ncu's raw CSV exports into nsight.csv and hbm_traffic.png"),
    "merge": (cmd_merge, _merge_parser, "fold nsight.csv's measured DRAM bytes into a results.csv's gpu rows"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m kernels.nsight", doc=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, (_, add_arguments, summary) in COMMANDS.items():
        add_arguments(commands.add_parser(name, help=summary, description=summary))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    def body() -> int:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command][0](args)

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
