"""`python -m codesign explore --seq 1024 --dim 64 --heads 16 [--causal] [--space space.toml] [--results DIR ...]`:
run the operating-point explorer (codesign/explore.py) and write OUT/points.csv (every point), OUT/front.csv (the
Pareto fronts, also printed), OUT/energy_latency.png (energy per inference against latency, area as colour, the
front drawn, measured targets marked) and OUT/efficiency.png (throughput per mm² against energy efficiency).
"""

from __future__ import annotations

import contextlib
import csv
import os
import sys
from pathlib import Path

import numpy as np

from codesign.explore import SWEPT, explore, fronts, load_space, sensitivity, space_size
from codesign.measured import MeasuredPoint, load
from codesign.technology import GateCalibration, Technology
from host.cli_common import Parser, folder, integer, output_folder
from host.errors import KbenchError, SpecError
from host.problem import LIMITS, AttentionProblem
from host.q15 import DIM_MAX, SEQ_MAX

#: Columns of front.csv besides the point's own.
FRONT_COLUMNS = ("front", "array", "dataflow", "exp_lanes", "dividers", "div_latency", "buffers_kb", "clock_mhz",
                 "dram", "dram_gbps", "node_nm", "acc_bits", "overflow", "latency_s", "energy_j", "energy_j_low", "energy_j_high", "area_mm2",
                 "area_mm2_low", "area_mm2_high", "synth_area_mm2", "synth_area_mm2_low", "synth_area_mm2_high",
                 "synth_ge", "utilisation", "dram_stall_share", "gops", "bit_exact", "rel_l2",
                 "share_array", "share_buffers", "share_softmax", "share_score", "share_dividers", "share_dram",
                 "share_leakage")
MARKERS = {"gpu": ("*", "tab:red"), "mcu": ("^", "tab:green"), "cpu": ("s", "tab:purple")}


def write_points(columns: dict[str, np.ndarray], path: Path) -> None:
    names = list(columns)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(names)
        writer.writerows(zip(*(_text(columns[name]) for name in names)))


def _text(values: np.ndarray) -> list[str]:
    if values.dtype.kind == "f":
        return ["" if not np.isfinite(v) else f"{v:.6g}" for v in values.tolist()]
    return [str(v) for v in values.tolist()]


def front_rows(columns: dict[str, np.ndarray], chosen: list[tuple[str, np.ndarray]]) -> list[dict[str, str]]:
    rows = []
    for name, idx in chosen:
        for i in idx:
            row = {"front": name}
            for key in FRONT_COLUMNS[1:]:
                value = columns[key][i]
                row[key] = f"{value:.6g}" if isinstance(value, (float, np.floating)) else str(value)
            rows.append(row)
    return rows


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _measured(ax, points: list[MeasuredPoint], x_of, y_of) -> None:
    """Each measured row as a large marker (star: GPU, triangle: MCU, square: CPU), named in the legend."""
    shades = {}
    for point in points:
        x, y = x_of(point), y_of(point)
        if x is None or y is None:
            continue
        marker, colour = MARKERS.get(point.target, ("o", "black"))
        shade = shades.setdefault(point.target, 0)
        shades[point.target] += 1
        ax.scatter([x], [y], marker=marker, s=150 - 25 * shade, color=colour, alpha=1 - 0.25 * min(shade, 3),
                   edgecolors="black", zorder=5,
                   label=f"{point.label}: {point.energy_source.split(':')[0].split(' (')[0]} energy")


def _nothing_exact(columns) -> str:
    """Why a plot or a front is empty: every point skipped, or no accumulator wide enough."""
    if not np.isfinite(columns["latency_s"]).any():
        return "no point of this space can run: every one has a buffer below one tile (points.csv: skipped)"
    return ("no point is bit-exact for every input: every accumulator width in the space is below the contract's "
            "exact width for its array (docs/codesign.md, \"Accumulator width\"); points.csv has their measured rel-L2")


def plot_energy_latency(columns, chosen, points, problem: AttentionProblem, path: Path) -> None:
    figure = _figure(10, 8)
    ax = figure.add_subplot()
    ok = np.isfinite(columns["latency_s"])
    exact = ok & (columns["bit_exact"] == "all inputs")
    inexact = ok & ~exact
    ax.scatter(columns["latency_s"][inexact], columns["energy_j"][inexact], s=2, color="lightgrey",
               linewidths=0, rasterized=True, label="accumulator below the exact width (rel-L2 in points.csv)")
    if exact.any():
        shown = ax.scatter(columns["latency_s"][exact], columns["energy_j"][exact], c=columns["area_mm2"][exact], s=3,
                           cmap="viridis", norm="log", alpha=0.6, linewidths=0, rasterized=True)
        figure.colorbar(shown, ax=ax, label="area, mm² (geometric mean of the band)")
    else:
        ax.text(0.5, 0.5, _nothing_exact(columns), transform=ax.transAxes, ha="center", va="center", wrap=True)
    _, best = chosen[0]
    if len(best):
        middle = columns["energy_j"][best]
        ax.errorbar(columns["latency_s"][best], middle, yerr=(middle - columns["energy_j_low"][best],
                                                              columns["energy_j_high"][best] - middle),
                    fmt="o", markersize=5, markerfacecolor="none", color="tab:orange", elinewidth=0.8, zorder=4,
                    label=f"Pareto front in latency, energy and area ({len(best)} bit-exact points; bars: the "
                          "energy band)")
    _measured(ax, points, lambda p: p.latency_s, lambda p: p.energy_j)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("latency per inference, s (ASIC: modelled cycles / clock)")
    ax.set_ylabel("energy per inference, J")
    ax.set_title(f"ASIC operating points vs measured targets: B {problem.batch}, H {problem.heads}, N {problem.seq}, "
                 f"d {problem.dim}{', causal' if problem.causal else ''}")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        figure.legend(loc="outside lower center", ncols=2, fontsize=8)
    figure.savefig(path, dpi=110)


def plot_efficiency(columns, chosen, points, problem: AttentionProblem, path: Path) -> None:
    figure = _figure(10, 8)
    ax = figure.add_subplot()
    exact = np.isfinite(columns["latency_s"]) & (columns["bit_exact"] == "all inputs")
    if exact.any():
        shown = ax.scatter(columns["gops_per_j"][exact], columns["gops_per_mm2"][exact], c=columns["node_nm"][exact],
                           s=3, cmap="plasma_r", alpha=0.5, linewidths=0, rasterized=True)
        figure.colorbar(shown, ax=ax, label="technology node, nm")
    else:
        ax.text(0.5, 0.5, _nothing_exact(columns), transform=ax.transAxes, ha="center", va="center", wrap=True)
    _, best = chosen[0]
    if len(best):
        ax.scatter(columns["gops_per_j"][best], columns["gops_per_mm2"][best], s=18, facecolors="none",
                   edgecolors="tab:orange", label="energy-latency Pareto front")
    ops = problem.flops() / 1e9
    _measured(ax, points, lambda p: ops / p.energy_j,
              lambda p: None if p.area_mm2 is None else ops / p.latency_s / p.area_mm2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("energy efficiency, GOP/J (= GOP/s per W)")
    ax.set_ylabel("throughput per area, GOP/s per mm²")
    ax.set_title("Throughput per mm² vs energy efficiency (targets without a published die area are not placed)")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        figure.legend(loc="outside lower center", ncols=2, fontsize=8)
    figure.savefig(path, dpi=110)


def _summary(columns, chosen, points, problem) -> str:
    lines = []
    for name, idx in chosen:
        if not len(idx):
            lines.append(f"front {name}: empty: {_nothing_exact(columns)}")
            continue
        fast = idx[np.argmin(columns["latency_s"][idx])]
        frugal = idx[np.argmin(columns["energy_j"][idx])]
        small = idx[np.argmin(columns["area_mm2"][idx])]
        lines.append(f"front {name}: {len(idx)} points")
        for what, i in (("fastest", fast), ("least energy", frugal), ("smallest", small)):
            lines.append(f"  {what:<12} {columns['array'][i]} {columns['dataflow'][i]} e{columns['exp_lanes'][i]} "
                         f"div{columns['dividers'][i]}x{columns['div_latency'][i]} {columns['clock_mhz'][i]:g} MHz "
                         f"{columns['dram'][i]} {columns['dram_gbps'][i]:g} GB/s "
                         f"{columns['node_nm'][i]} nm acc{columns['acc_bits'][i]} {columns['overflow'][i]}: "
                         f"{columns['latency_s'][i] * 1e6:.3g} µs, {columns['energy_j'][i] * 1e3:.3g} mJ "
                         f"({columns['energy_j_low'][i] * 1e3:.3g}..{columns['energy_j_high'][i] * 1e3:.3g}), "
                         f"{columns['area_mm2'][i]:.3g} mm² ({columns['area_mm2_low'][i]:.3g}.."
                         f"{columns['area_mm2_high'][i]:.3g}; synthesis {columns['synth_area_mm2'][i]:.3g}: "
                         f"{columns['synth_area_mm2_low'][i]:.3g}..{columns['synth_area_mm2_high'][i]:.3g})")
    for p in points:
        lines.append(f"measured {p.label}: {p.latency_s * 1e6:.3g} µs, {p.energy_j * 1e3:.3g} mJ ({p.energy_source})")
    return "\n".join(lines)


def _write_all(out: Path, result, chosen, spread, measured, problem) -> None:
    """Every output file, each written under a temporary name and renamed into place only once all are done, so an
    interrupted or failed run leaves the folder as it was; a run without a sensitivity table removes an old one."""
    staged: list[tuple[Path, Path]] = []

    def stage(name: str) -> Path:
        path = out / f".tmp-{os.getpid()}-{name}"  # the real suffix kept: matplotlib picks the format from it
        staged.append((path, out / name))
        return path

    try:
        write_points(result.columns, stage("points.csv"))
        with open(stage("front.csv"), "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=FRONT_COLUMNS)
            writer.writeheader()
            writer.writerows(front_rows(result.columns, chosen))
        if spread:
            with open(stage("sensitivity.csv"), "w", newline="", encoding="utf-8") as handle:
                writer = csv.DictWriter(handle, fieldnames=list(spread[0]))
                writer.writeheader()
                writer.writerows(spread)
        plot_energy_latency(result.columns, chosen, measured, problem, stage("energy_latency.png"))
        plot_efficiency(result.columns, chosen, measured, problem, stage("efficiency.png"))
        for temporary, final in staged:
            os.replace(temporary, final)
        if not spread:
            (out / "sensitivity.csv").unlink(missing_ok=True)
    except OSError as exc:
        raise KbenchError(f"--out {out}: writing failed ({exc.strerror or exc}); files of an earlier run there are "
                          "unchanged") from None
    finally:
        for temporary, _ in staged:
            temporary.unlink(missing_ok=True)


@contextlib.contextmanager
def _locked(out: Path):
    """One explorer writing into `out` at a time: a lock file made exclusively, removed at the end."""
    lock = out / ".explore.lock"
    try:
        handle = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        raise SpecError(f"--out {out}: another explore is writing there ({lock} exists; delete it if no run is "
                        "active)") from None
    except OSError as exc:
        raise SpecError(f"--out {out}: cannot write in it ({exc.strerror or exc})") from None
    try:
        os.write(handle, f"{os.getpid()}\n".encode())
        os.close(handle)
        yield
    finally:
        lock.unlink(missing_ok=True)


def balanced(columns: dict[str, np.ndarray], chosen: list[tuple[str, np.ndarray]]) -> int | None:
    """The all-nodes front's point of least energy × latency: the base of the sensitivity table."""
    _, idx = chosen[0]
    if not len(idx):
        return None
    return int(idx[np.argmin(columns["energy_j"][idx] * columns["latency_s"][idx])])


def main(argv: list[str]) -> int:
    parser = Parser(prog="python -m codesign explore", description=__doc__)
    parser.add_argument("--seq", type=integer("seq", 1, SEQ_MAX), default=1024)
    parser.add_argument("--dim", type=integer("dim", 1, DIM_MAX), default=64)
    parser.add_argument("--heads", type=integer("heads", *LIMITS["heads"]), default=16)
    parser.add_argument("--batch", type=integer("batch", *LIMITS["batch"]), default=1)
    parser.add_argument("--causal", action="store_true", help="causal mask (default: none)")
    parser.add_argument("--space", type=Path, help="TOML file of space keys replacing the defaults "
                        "(codesign/explore.py DEFAULT_SPACE lists them)")
    parser.add_argument("--technology", type=Path, help="per-action table (default codesign/technology.toml)")
    parser.add_argument("--gates", type=Path, help="gate calibration for the synthesis-based area (default "
                        "codesign/rtl_gates.toml, written by `python -m codesign synth --write-calibration`)")
    parser.add_argument("--results", type=folder, nargs="+", default=[],
                        help="host.compare --out folders whose matching rows are placed beside the ASIC points")
    parser.add_argument("--out", type=folder, default=Path("explore"), help="output folder (default ./explore)")
    args = parser.parse_args(argv)
    problem = AttentionProblem(batch=args.batch, heads=args.heads, seq=args.seq, dim=args.dim, causal=args.causal,
                               dtype="q15")
    tech = Technology.load(args.technology)
    gates = GateCalibration.load(args.gates)
    space = load_space(args.space, tech)
    measured, left_out = load(list(dict.fromkeys(args.results)), problem)  # refuse a bad --results before the long work
    out = output_folder(args.out)
    configs, total = space_size(space)
    print(f"exploring {total:,} operating points ({configs:,} cycle-model configurations) for B {problem.batch} "
          f"H {problem.heads} N {problem.seq} d {problem.dim}{' causal' if problem.causal else ''}", file=sys.stderr)
    from tqdm import tqdm

    with _locked(out):
        try:
            with tqdm(total=configs, desc="cycle model", unit="config", leave=False, disable=None) as progress:
                result = explore(problem, space, tech, progress, gates)
            chosen = fronts(result)
            base = balanced(result.columns, chosen)
            spread = sensitivity(result, base) if base is not None else []
            _write_all(out, result, chosen, spread, measured, problem)
        except KeyboardInterrupt:
            raise KbenchError(f"interrupted: nothing written to {out} (files of an earlier run there are "
                              "unchanged)") from None
    skipped = int((result.columns["skipped"] != "").sum())
    print(f"{len(result):,} points in {result.seconds:.2f} s ({len(result) / result.seconds:,.0f} points/s); "
          f"{skipped:,} cannot run (a buffer below one tile: points.csv says which)")
    print(_summary(result.columns, chosen, measured, problem))
    if spread:
        c = result.columns
        print("sensitivity around the front's least energy-delay point ("
              + ", ".join(f"{k} {c[k][base]}" for k in SWEPT) + "): max/min when one parameter alone varies")
        print(f"  {'parameter':<11} {'latency':>8} {'energy':>8} {'area':>8}  best energy at")
        for row in spread:
            print(f"  {row['parameter']:<11} {row['latency_s_spread']:8.3g} {row['energy_j_spread']:8.3g} "
                  f"{row['area_mm2_spread']:8.3g}  {row['energy_j_best_at']}")
    for line in left_out:
        print(f"--results: left out {line}")
    names = ["points.csv", "front.csv", *(["sensitivity.csv"] if spread else []), "energy_latency.png", "efficiency.png"]
    print("wrote " + ", ".join(str(out / name) for name in names)
          + ("" if spread else " (no sensitivity table: the front is empty)"))
    return 0
