"""The explorer's two plots (`python -m codesign explore`): energy per inference against latency (area as colour) and
throughput per mm² against energy efficiency (one colour per technology node), each with the Pareto front drawn
apart from the points (red diamonds) and the rows of host.compare runs marked, measured or modelled as their timing
says. A title mentions those targets only when some were placed."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from codesign.measured import MeasuredPoint
from codesign.console import problem_text
from host.problem import AttentionProblem

#: target → (marker, colour) of its rows; large, black-edged.
MARKERS = {"gpu": ("*", "tab:red"), "mcu": ("^", "tab:green"), "cpu": ("s", "tab:purple")}
#: The Pareto front's look in both plots: hollow red diamonds, a colour neither colour map (viridis) has.
FRONT = {"marker": "D", "color": "red", "size": 5}


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _place(ax, points: list[MeasuredPoint], x_of, y_of) -> list[MeasuredPoint]:
    """Each row as a large marker (star: GPU, triangle: MCU, square: CPU), named in the legend with how its
    timing and energy were obtained; the rows placed (a row without a figure for an axis is not)."""
    shades: dict[str, int] = {}
    placed = []
    for point in points:
        x, y = x_of(point), y_of(point)
        if x is None or y is None:
            continue
        marker, colour = MARKERS.get(point.target, ("o", "black"))
        shade = shades.setdefault(point.target, 0)
        shades[point.target] += 1
        ax.scatter([x], [y], marker=marker, s=150 - 25 * shade, color=colour, alpha=1 - 0.25 * min(shade, 3),
                   edgecolors="black", zorder=5,
                   label=f"{point.label}: {point.kind} latency, "
                         f"{point.energy_source.split(':')[0].split(' (')[0]} energy")
        placed.append(point)
    return placed


def title(what: str, problem: AttentionProblem, placed: list[MeasuredPoint]) -> str:
    """'ASIC operating points (modelled) beside measured targets: …', the targets said only when placed."""
    kinds = " and ".join(sorted({point.kind for point in placed}))
    beside = f" beside {kinds} targets" if placed else ""
    return f"{what}: ASIC operating points (modelled){beside}\n{problem_text(problem, ', ')}"


def nothing_exact(columns) -> str:
    """Why a plot or a front is empty: every point skipped, or no accumulator wide enough."""
    if not np.isfinite(columns["latency_s"]).any():
        return "no point of this space can run: every one has a buffer below one tile (points.csv: skipped)"
    return ("no point is bit-exact for every input: every accumulator width in the space is below the contract's "
            "exact width for its array (docs/codesign.md, \"Accumulator width\"); points.csv has their measured rel-L2")


def _finish(figure, ax, path: Path) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        figure.legend(loc="outside lower center", ncols=2, fontsize=8)
    figure.savefig(path, dpi=110)


def plot_energy_latency(columns, chosen, points, problem: AttentionProblem, path: Path) -> None:
    figure = _figure(10, 8)
    ax = figure.add_subplot()
    ok = np.isfinite(columns["latency_s"])
    exact = ok & (columns["bit_exact"] == "all inputs")
    inexact = ok & ~exact
    ax.scatter(columns["latency_s"][inexact], columns["energy_j"][inexact], s=2, color="lightgrey",
               linewidths=0, rasterized=True)
    if inexact.any():
        ax.scatter([], [], s=30, color="lightgrey", label="accumulator below the exact width (rel-L2 in points.csv)")
    if exact.any():
        shown = ax.scatter(columns["latency_s"][exact], columns["energy_j"][exact], c=columns["area_mm2"][exact], s=3,
                           cmap="viridis", norm="log", alpha=0.6, linewidths=0, rasterized=True)
        figure.colorbar(shown, ax=ax, label="area, mm² (geometric mean of the band)")
    else:
        ax.text(0.5, 0.5, nothing_exact(columns), transform=ax.transAxes, ha="center", va="center", wrap=True)
    _, best = chosen[0]
    if len(best):
        middle = columns["energy_j"][best]
        ax.errorbar(columns["latency_s"][best], middle, yerr=(middle - columns["energy_j_low"][best],
                                                              columns["energy_j_high"][best] - middle),
                    fmt=FRONT["marker"], markersize=FRONT["size"], markerfacecolor="none",
                    markeredgecolor=FRONT["color"], ecolor=FRONT["color"], elinewidth=0.8, zorder=4,
                    label=f"Pareto front in latency, energy and area ({len(best)} bit-exact points; bars: the "
                          "energy band)")
    placed = _place(ax, points, lambda p: p.latency_s, lambda p: p.energy_j)
    ax.set_xlabel("latency per inference, s (ASIC: modelled cycles / clock)")
    ax.set_ylabel("energy per inference, J")
    ax.set_title(title("Energy against latency", problem, placed))
    _finish(figure, ax, path)


def plot_efficiency(columns, chosen, points, problem: AttentionProblem, path: Path) -> None:
    from matplotlib import colormaps

    figure = _figure(10, 8)
    ax = figure.add_subplot()
    exact = np.isfinite(columns["latency_s"]) & (columns["bit_exact"] == "all inputs")
    if exact.any():
        nodes = sorted(set(columns["node_nm"][exact].tolist()), reverse=True)
        colours = colormaps["viridis"](np.linspace(0.0, 0.9, len(nodes)))  # discrete: one colour per node
        for node, colour in zip(nodes, colours):
            here = exact & (columns["node_nm"] == node)
            ax.scatter(columns["gops_per_j"][here], columns["gops_per_mm2"][here], s=3, color=colour, alpha=0.5,
                       linewidths=0, rasterized=True)
            ax.scatter([], [], s=30, color=colour, label=f"{node} nm")  # the legend's dot, at a readable size
    else:
        ax.text(0.5, 0.5, nothing_exact(columns), transform=ax.transAxes, ha="center", va="center", wrap=True)
    _, best = chosen[0]
    if len(best):
        ax.scatter(columns["gops_per_j"][best], columns["gops_per_mm2"][best], s=FRONT["size"] ** 2,
                   marker=FRONT["marker"], facecolors="none", edgecolors=FRONT["color"], linewidths=1.0, zorder=4,
                   label="energy-latency Pareto front")
    ops = problem.flops() / 1e9
    placed = _place(ax, points, lambda p: ops / p.energy_j,
                    lambda p: None if p.area_mm2 is None else ops / p.latency_s / p.area_mm2)
    ax.set_xlabel("energy efficiency, GOP/J (= GOP/s per W)")
    ax.set_ylabel("throughput per area, GOP/s per mm²")
    left_out = len(points) - len(placed)
    ax.set_title(title("Throughput per mm² against energy efficiency", problem, placed)
                 + (f" ({left_out} target row(s) without a published die area not placed)" if left_out else ""))
    _finish(figure, ax, path)
