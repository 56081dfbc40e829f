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


def title(what: str, problem: AttentionProblem, placed: list[MeasuredPoint], bounds: str = "") -> str:
    """'ASIC operating points (modelled) beside measured targets: …', the targets said only when placed, and the
    --max-area/--max-power bounds when given."""
    kinds = " and ".join(sorted({point.kind for point in placed}))
    beside = f" beside {kinds} targets" if placed else ""
    within = f"; points within {bounds}" if bounds else ""
    return f"{what}: ASIC operating points (modelled){beside}\n{problem_text(problem, ', ')}{within}"


def nothing_exact(columns, allowed: np.ndarray | None = None, bounds: str = "") -> str:
    """Why a plot or a front is empty: every point skipped, none within the bounds, or no accumulator wide enough."""
    if not np.isfinite(columns["latency_s"]).any():
        return "no point of this space can run: every one has a buffer below one tile (points.csv: skipped)"
    exact = columns["bit_exact"] == "all inputs"
    if bounds and allowed is not None and exact.any():  # the bounds, not the widths, leave nothing
        if not allowed.any():
            return f"no point lies within {bounds}: raise --max-area or --max-power"
        if not (allowed & exact).any():
            return f"no point within {bounds} is bit-exact for every input (points.csv has their measured rel-L2)"
    return ("no point is bit-exact for every input: every accumulator width in the space is below the contract's "
            "exact width for its array (docs/codesign.md, \"Accumulator width\"); points.csv has their measured rel-L2")


def _finish(figure, ax, path: Path) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        figure.legend(loc="outside lower center", ncols=2, fontsize=8)
    figure.savefig(path, dpi=110)


def _outside(ax, columns, outside: np.ndarray, x: str, y: str, bounds: str) -> None:
    """The points beyond --max-area/--max-power, faint and hollow, so that the bound's edge shows."""
    if not outside.any():
        return
    ax.scatter(columns[x][outside], columns[y][outside], s=2, facecolors="none", edgecolors="silver", linewidths=0.3,
               alpha=0.5, rasterized=True)
    ax.scatter([], [], s=30, facecolors="none", edgecolors="silver", label=f"outside {bounds} (not on the front)")


def plot_energy_latency(columns, chosen, points, problem: AttentionProblem, path: Path,
                        allowed: np.ndarray | None = None, bounds: str = "") -> None:
    """Energy against latency; with `allowed` (--max-area/--max-power) only those points are coloured and ranked,
    the rest drawn faint."""
    figure = _figure(10, 8)
    ax = figure.add_subplot()
    ok = np.isfinite(columns["latency_s"])
    inside = ok if allowed is None else ok & allowed
    _outside(ax, columns, ok & ~inside, "latency_s", "energy_j", bounds)
    exact = inside & (columns["bit_exact"] == "all inputs")
    inexact = inside & ~exact
    ax.scatter(columns["latency_s"][inexact], columns["energy_j"][inexact], s=2, color="lightgrey",
               linewidths=0, rasterized=True)
    if inexact.any():
        ax.scatter([], [], s=30, color="lightgrey", label="accumulator below the exact width (rel-L2 in points.csv)")
    if exact.any():
        shown = ax.scatter(columns["latency_s"][exact], columns["energy_j"][exact], c=columns["area_mm2"][exact], s=3,
                           cmap="viridis", norm="log", alpha=0.6, linewidths=0, rasterized=True)
        figure.colorbar(shown, ax=ax, label="area, mm² (geometric mean of the band)")
    else:
        ax.text(0.5, 0.5, nothing_exact(columns, allowed, bounds), transform=ax.transAxes, ha="center",
                va="center", wrap=True)
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
    ax.set_title(title("Energy against latency", problem, placed, bounds))
    _finish(figure, ax, path)


def plot_efficiency(columns, chosen, points, problem: AttentionProblem, path: Path,
                    allowed: np.ndarray | None = None, bounds: str = "") -> None:
    """Throughput per mm² against energy efficiency, per node; `allowed` as in plot_energy_latency."""
    from matplotlib import colormaps

    figure = _figure(10, 8)
    ax = figure.add_subplot()
    ok = np.isfinite(columns["latency_s"])
    inside = ok if allowed is None else ok & allowed
    _outside(ax, columns, ok & ~inside & (columns["bit_exact"] == "all inputs"), "gops_per_j", "gops_per_mm2",
             bounds)
    exact = inside & (columns["bit_exact"] == "all inputs")
    if exact.any():
        nodes = sorted(set(columns["node_nm"][exact].tolist()), reverse=True)
        colours = colormaps["viridis"](np.linspace(0.0, 0.9, len(nodes)))  # discrete: one colour per node
        for node, colour in zip(nodes, colours):
            here = exact & (columns["node_nm"] == node)
            ax.scatter(columns["gops_per_j"][here], columns["gops_per_mm2"][here], s=3, color=colour, alpha=0.5,
                       linewidths=0, rasterized=True)
            ax.scatter([], [], s=30, color=colour, label=f"{node} nm")  # the legend's dot, at a readable size
    else:
        ax.text(0.5, 0.5, nothing_exact(columns, allowed, bounds), transform=ax.transAxes, ha="center",
                va="center", wrap=True)
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
    ax.set_title(title("Throughput per mm² against energy efficiency", problem, placed, bounds)
                 + (f" ({left_out} target row(s) without a published die area not placed)" if left_out else ""))
    _finish(figure, ax, path)
