"""The report's PNG plots, drawn from result rows with matplotlib's object API (no pyplot, no display):

- latency_vs_seq.png: median latency against sequence length, one connected series per configuration (target,
  kernel, shape), the median's 95 % confidence interval as error bars, x ticks at the sequence lengths measured;
- error.png: rel-L2 and max-abs error against the float64 golden at each sequence length, in the same series and
  colours, wrong rows (outside tolerance) ringed in red, zero errors marked on the axis; series with the same errors
  at every length (the asic target and the MCU compute the same Q15 bits) are one line, the legend naming both;
- roofline.png: achieved GFLOP/s against FLOPs per modelled byte under each machine's roof: measured in the run
  (CPU, GPU), from a datasheet (the Cortex-M4's) or from a model (the asic target's), each roof in the colour of the
  rows under it and a line style of its own; the legend below the plot.

Each plot function returns its figure, or the reason it drew none (and results.md says it); host/report/render.py
writes the figure (host/report/plot_axes.py's `png_bytes`), each file whole or not at all.
Layer L3: it imports only host.results and host.report's common, digest and plot_axes.
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Callable, Iterable, NamedTuple, Sequence

import numpy as np
import pandas as pd

from host.report.common import is_measured_roof, roof_text
from host.report.digest import PLOTTED_STATUSES, POINT_FIELDS, Digest
from host.report.plot_axes import figure, finish, log_axis, place_legend, seq_axis
from host.results import Result

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: The fields of a row the plots use (results_frame's columns, with "tile").
FRAME_FIELDS = ("target", "kernel", "dtype", "dim", "heads", "kv_heads", "batch", "causal", "host", "device", "status",
                "seq", "q_len", "workload",
                "br", "bc", "p50_ms", "p50_ci_low_ms", "p50_ci_high_ms", "gflops", "gbps", "peak_gflops",
                "peak_gbps", "peak_source", "max_abs", "rel_l2", "bit_exact")
NUMERIC_FIELDS = ("seq", "br", "bc", "p50_ms", "p50_ci_low_ms", "p50_ci_high_ms", "gflops", "gbps", "peak_gflops",
                  "peak_gbps", "max_abs", "rel_l2")
#: Above SUMMARY_ROWS rows, sequence lengths are binned when more than this many distinct ones were measured.
SEQ_BINS = 200
BINS_PER_OCTAVE = 8

LATENCY_PNG = "latency_vs_seq.png"
ERROR_PNG = "error.png"
ROOFLINE_PNG = "roofline.png"

#: One series per distinct value of these fields; the tile joins them only for a Br×Bc sweep (see `series`).
SERIES_FIELDS = ("target", "kernel", "dtype", "dim", "heads", "kv_heads", "q_len", "batch", "causal", "workload",
                 "host")
#: Series fields a label names only when they differ within one target/kernel: otherwise the kernel implies them.
IMPLIED = ("dtype", "host")
MARKERS = ("o", "s", "^", "D", "v", "P")  # a new marker each time the 10 colours repeat
WRONG_RING = dict(marker="o", markersize=13, mfc="none", mec="red", mew=2, ls="")  # around the series' own marker
#: Each roof's line style, in roof order (dashed, dash-dot, dotted, dash-dot-dot); its colour is that of its rows.
ROOF_LINES = ((0, (6, 2)), (0, (6, 2, 1, 2)), (0, (1, 1.5)), (0, (8, 2, 1, 2, 1, 2)))
#: A roof shared by several target/kernels' rows (a GPU's naive, fused and flash) is drawn in grey.
SHARED_ROOF_COLOR = "0.3"


def results_frame(results: Iterable[Result] | Digest) -> pd.DataFrame:
    """The rows the plots draw from, one column per field they use, plus each row's tile as text; missing figures
    (and any that is not finite) are NaN in the numeric columns. Above SUMMARY_ROWS rows (a Digest that summarised),
    one row per configuration, status and sequence length instead (`aggregated`); `frame.attrs["note"]` then says so
    for the plots' titles."""
    digest = results if isinstance(results, Digest) else Digest.of(results)
    if digest.summarised:
        frame, note = aggregated(digest)
        frame.attrs["note"] = note
    else:
        frame = pd.DataFrame({name: [getattr(r, name) for r in digest.rows] for name in FRAME_FIELDS})
    for name in NUMERIC_FIELDS:
        values = pd.to_numeric(frame[name], errors="coerce")
        frame[name] = values.where(np.isfinite(values)) if values.dtype.kind == "f" else values
    frame["tile"] = [tile_text(br, bc) for br, bc in zip(frame.br, frame.bc)]
    return frame


def tile_text(br: object, bc: object) -> str:
    """common.tile's 'Br×Bc' from a frame's cells, where a missing side is None or NaN."""
    missing = lambda x: x is None or (isinstance(x, float) and math.isnan(x))  # noqa: E731
    if missing(br) and missing(bc):
        return ""
    return f"{'' if missing(br) else int(br)}×{'' if missing(bc) else int(bc)}"


def aggregated(digest: Digest) -> tuple[pd.DataFrame, str]:
    """(frame, note): the digest's points (one per configuration, status and sequence length: host/report/digest.py
    Point) as frame rows. With more than SEQ_BINS distinct sequence lengths, lengths are merged into
    1/BINS_PER_OCTAVE-octave bins (drawn at each bin's geometric centre). The note says what a point is, for the
    titles."""
    binned = len({key[-1] for key in digest.points}) > SEQ_BINS
    points = digest.points
    if binned:
        points = {}
        for key, point in digest.points.items():
            merged_key = key[:-1] + (_seq_bin(key[-1]),)
            if merged_key in points:
                points[merged_key].merge(point)
            else:
                points[merged_key] = copy.deepcopy(point)
    columns: dict[str, list] = {name: [] for name in FRAME_FIELDS}
    for key, point in points.items():
        cells = dict(zip(POINT_FIELDS + ("seq",), key)) | point.cells()
        for name in FRAME_FIELDS:
            columns[name].append(cells[name])
    note = (f"{digest.count:,} rows: each point the median of a configuration's rows at one N"
            + (f", N in 1/{BINS_PER_OCTAVE}-octave bins" if binned else "") + "; errors the worst")
    return pd.DataFrame(columns), note


def _seq_bin(seq: int) -> int:
    """The geometric centre of seq's 1/BINS_PER_OCTAVE-octave bin (seq itself below 2)."""
    if seq < 2:
        return seq
    return int(round(2 ** (round(math.log2(seq) * BINS_PER_OCTAVE) / BINS_PER_OCTAVE)))


# ---------------------------------------------------------------------------------------------------------- series

#: How kernels/fake.py's device names itself in a row's device column: its lines say so in every legend.
FAKE_DEVICE = "fake GPU"


class Series(NamedTuple):
    """One plotted configuration: its legend label, its style (the same on every plot), its rows sorted by seq."""

    label: str
    color: str
    marker: str
    rows: pd.DataFrame


def _label_part(name: str, value: object) -> str:
    absent = value is None or (isinstance(value, float) and math.isnan(value))  # square rows: q_len, kv_heads None
    if name in ("kv_heads", "q_len"):
        number = "" if absent else int(value)
        return {"kv_heads": f"Hkv={number or 'H'}", "q_len": f"q_len={number or 'N'}"}[name]
    if name == "workload":
        return "" if absent else str(value)  # a row of the shape options: no name
    return {"dim": f"d={value}", "heads": f"H={value}", "batch": f"B={value}", "host": f"@{value}",
            "causal": "causal" if value else "non-causal"}.get(name, str(value))


def _varies(groups: list[tuple[tuple, pd.DataFrame]], i: int, within: bool) -> bool:
    """Whether field i of the series keys differs between series (within one target/kernel when `within`)."""
    values: dict[tuple, set] = {}
    for key, _ in groups:
        value = None if isinstance(key[i], float) and math.isnan(key[i]) else key[i]  # NaN != NaN: one absent value
        values.setdefault(key[:2] if within else (), set()).add(value)
    return any(len(v) > 1 for v in values.values())


def shared_text(frame: pd.DataFrame) -> str:
    """The series fields every plotted row shares (dtype, d, H, B, causal), for a title: 'fp32, d=59, H=2, B=1'."""
    rows = frame[frame.status.isin(PLOTTED_STATUSES)]
    if rows.empty:
        return ""
    keys = [key for key, _ in series_groups(rows)]  # as plotted: a self-attention row on its q_len line
    parts = []
    for i, name in enumerate(SERIES_FIELDS[2:], 2):
        values = {key[i] for key in keys}
        if name != "host" and len(values) == 1 and values != {None}:  # square rows (q_len, kv_heads None): nothing
            parts.append(_label_part(name, keys[0][i]))
    return ", ".join(part for part in parts if part)


def series_groups(rows: pd.DataFrame) -> list[tuple[tuple, pd.DataFrame]]:
    """The rows by SERIES_FIELDS as (key, rows), in key order, a missing value (NaN) written None in the key.

    A self-attention row (q_len empty) at N = s is also the point at N = s of the series of q_len = s that has the
    same other fields, where there is one: q_len = seq is stored empty, so `--seq 16,64 --q-len 16` gives its q_len 16
    at N 16 as a self-attention row, and that row belongs on the q_len 16 line. A self-attention series all of whose
    rows found such a home is not drawn on its own (it would be a line of borrowed points only)."""
    absent = lambda value: value is None or (isinstance(value, float) and math.isnan(value))  # noqa: E731
    groups = {tuple(None if absent(value) else value for value in key): config
              for key, config in rows.groupby(list(SERIES_FIELDS), sort=True, dropna=False)}
    q = SERIES_FIELDS.index("q_len")
    for key, config in list(groups.items()):
        if key[q] is not None:
            continue
        homes = [key[:q] + (seq,) + key[q + 1:] for seq in config.seq]
        found = [home in groups for home in homes]
        for home, at_home in zip(homes, found):
            if at_home:
                groups[home] = pd.concat([groups[home], config[config.seq == home[q]]])
        if all(found):
            del groups[key]
    return list(groups.items())


def series(frame: pd.DataFrame) -> list[Series]:
    """The ok and wrong rows as one connected series per configuration (SERIES_FIELDS), in a fixed order and style.

    The tile splits a configuration only when it was measured at several tiles at one seq (a Br×Bc sweep); a tile
    that merely follows seq, as the MCU planner's Br does, stays one line. A label names target/kernel and only the
    fields that tell series apart (d, H, B, causal; dtype and host only within one target/kernel); `shared_text`
    gives the fields every series shares, for the title."""
    rows = frame[frame.status.isin(PLOTTED_STATUSES)]
    if rows.empty:
        return []
    groups = series_groups(rows)
    varying = [name for i, name in enumerate(SERIES_FIELDS) if i < 2 or _varies(groups, i, within=name in IMPLIED)]
    out = []
    for key, config in groups:
        label = " ".join(part for part in (_label_part(name, value) for name, value in zip(SERIES_FIELDS, key)
                                           if name in varying) if part)
        label = label.replace(" ", "/", 1)  # target/kernel
        if config.device.astype(str).str.startswith(FAKE_DEVICE).any():  # numpy timed on the CPU: never a GPU's line
            label += f" ({FAKE_DEVICE})"
        swept = config.groupby("seq").tile.nunique().max() > 1
        parts = config.groupby(["br", "bc"], sort=True, dropna=False) if swept else [(None, config)]
        for _, part in parts:
            i = len(out)
            text = f"{label} {part.tile.iloc[0]}" if swept else label
            out.append(Series(text, f"C{i % 10}", MARKERS[i // 10 % len(MARKERS)], part.sort_values("seq")))
    return out


# ---------------------------------------------------------------------------------------------------------- plots

def plot_latency(frame: pd.DataFrame) -> Figure | str:
    """p50 against seq, log-log, one line per configuration, CI error bars; the reason when nothing to draw."""
    drawn = [(s, s.rows[(s.rows.status == "ok") & (s.rows.p50_ms > 0) & (s.rows.seq > 0)]) for s in series(frame)]
    drawn = [(s, rows) for s, rows in drawn if not rows.empty]
    if not drawn:
        return "no ok row has a positive p50 latency"
    fig = figure(9, 5.5)
    ax = fig.add_subplot()
    for s, rows in drawn:
        low = (rows.p50_ms - rows.p50_ci_low_ms).clip(lower=0).fillna(0)
        high = (rows.p50_ci_high_ms - rows.p50_ms).clip(lower=0).fillna(0)
        ax.errorbar(rows.seq, rows.p50_ms, yerr=[low, high], marker=s.marker, markersize=4, capsize=3,
                    color=s.color, label=s.label)
    seq_axis(ax, pd.concat([rows.seq for _, rows in drawn]))
    log_axis(ax, "y")
    finish(ax, "sequence length N", "median latency (ms), 95% CI",
            _titled("Attention latency against sequence length", frame))
    return fig


def plot_error(frame: pd.DataFrame) -> Figure | str:
    """rel_l2 and max_abs against seq per configuration (the latency plot's series), log y; wrong rows ringed in red,
    zero errors marked at the bottom of the panel; the reason when nothing to draw."""
    measured = [s._replace(rows=s.rows[s.rows.rel_l2.notna() | s.rows.max_abs.notna()]) for s in series(frame)]
    measured = same_errors_merged([s for s in measured if not s.rows.empty])
    if not measured:
        return "no ok or wrong row has an error figure (rel_l2, max_abs)"
    fig = figure(9, 7)
    axes = fig.subplots(2, 1, sharex=True)
    for ax, metric, label in ((axes[0], "rel_l2", "rel-L2 error"), (axes[1], "max_abs", "max |error|")):
        _error_panel(ax, measured, metric)
        finish(ax, "sequence length N" if ax is axes[1] else "", label, legend=False)
    seq_axis(axes[1], pd.concat([s.rows.seq for s in measured]))
    axes[0].set_title(_titled("Error against the float64 golden", frame))
    place_legend(axes[0], _error_legend(measured))
    return fig


def _error_figures(s: Series) -> tuple:
    """What error.png draws of a series: (seq, rel_l2, max_abs, status) per row, NaN as None so that equal is equal."""
    cells = s.rows[["seq", "rel_l2", "max_abs", "status"]].itertuples(index=False, name=None)
    return tuple(tuple(None if isinstance(x, float) and math.isnan(x) else x for x in row) for row in cells)


def same_errors_merged(measured: Sequence[Series]) -> list[Series]:
    """The series, those whose error figures are equal at every sequence length drawn once (else the later line
    hides under the earlier): labelled 'asic/sa32x32-os-acc40 non-causal = mcu/q15, same bits' ('same errors' unless
    every row of them is bit-exact with the Q15 model), in the first one's place and style."""
    groups: dict[tuple, list[Series]] = {}
    for s in measured:
        groups.setdefault(_error_figures(s), []).append(s)
    merged = []
    for group in groups.values():
        first, others = group[0], group[1:]
        if others:
            rest = first.label.partition(" ")[2]
            names = [s.label.partition(" ")[0] if s.label.partition(" ")[2] == rest else s.label for s in others]
            same = "same bits" if all(s.rows.bit_exact.eq(True).all() for s in group) else "same errors"
            first = first._replace(label=f"{first.label} = {' = '.join(names)}, {same}")
        merged.append(first)
    return merged


def _error_panel(ax: Axes, measured: Sequence[Series], metric: str) -> None:
    """One metric: each series' positive errors as a line, its zero errors as ▼ on the bottom edge, wrong rows
    ringed."""
    positive = [s.rows[s.rows[metric] > 0] for s in measured]
    if any(len(rows) for rows in positive):
        ax.set_yscale("log")
    else:
        ax.set_yticks([])
        zero = any((s.rows[metric] == 0).any() for s in measured)
        ax.text(0.5, 0.5, "bit-exact / zero error" if zero else f"no {metric} figure in any row",
                transform=ax.transAxes, ha="center", va="center")
    for s, rows in zip(measured, positive):
        ax.plot(rows.seq, rows[metric], marker=s.marker, markersize=5, lw=1, color=s.color)
        wrong = rows[rows.status == "wrong"]
        if len(wrong):
            ax.plot(wrong.seq, wrong[metric], **WRONG_RING)
        zero = s.rows[s.rows[metric] == 0]
        if len(zero):  # an empty unclipped line would still stretch the saved figure to (0, 0)
            ax.plot(zero.seq, np.zeros(len(zero)), "v", markersize=7, color=s.color, clip_on=False,
                    transform=ax.get_xaxis_transform())


def _error_legend(measured: Sequence[Series]) -> list:
    """Legend handles: one per series, then the meaning of the red ring and ▼ when the plot shows them."""
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color=s.color, marker=s.marker, lw=1, label=s.label) for s in measured]
    rows = pd.concat([s.rows for s in measured])
    if (rows.status == "wrong").any():
        handles.append(Line2D([], [], **WRONG_RING, label="wrong: outside tolerance"))
    if ((rows.rel_l2 == 0) | (rows.max_abs == 0)).any():
        handles.append(Line2D([], [], color="0.4", marker="v", ls="", label="zero error (on the axis)"))
    return handles


def roofline_data(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(points, roofs): the ok rows of every target that carry their machine's peaks, with their arithmetic
    intensity `ai`; and one roof per (host, device, roof source), `flops` and `bw` its highest peaks. A roof's source
    is "measured" (also for schema-1 rows, which left it empty) or the datasheet text of peak_source."""
    points = frame[(frame.status == "ok") & (frame.peak_gflops > 0) & (frame.peak_gbps > 0)
                   & (frame.gflops > 0) & (frame.gbps > 0)]
    points = points.assign(ai=points.gflops / points.gbps,
                           roof=["measured" if is_measured_roof(s) else s for s in points.peak_source])
    roofs = points.groupby(["host", "device", "roof"], sort=True).agg(flops=("peak_gflops", "max"),
                                                                      bw=("peak_gbps", "max"))
    return points, roofs


def plot_roofline(frame: pd.DataFrame) -> Figure | str:
    """Achieved GFLOP/s against FLOPs per modelled byte, under each machine's roof (each in the colour of its rows and
    a line style of its own, `roof_styles`), the legend below; the reason when nothing to draw."""
    ok, roofs = roofline_data(frame)
    if ok.empty:
        return "no ok row carries its machine's peaks (peak_gflops and peak_gbps) with GFLOP/s and GB/s"
    ridges = roofs.flops / roofs.bw
    ai = np.geomspace(min(ok.ai.min(), ridges.min()) / 4, max(ok.ai.max(), ridges.max()) * 4, 200)
    fig = figure(10, 6)
    ax = fig.add_subplot()
    groups = list(ok.groupby(["target", "kernel"], sort=True))
    for (key, roof), style in zip(roofs.iterrows(), roof_styles(ok, roofs)):
        host, device, source = key
        ax.plot(ai, np.minimum(roof.flops, ai * roof.bw), **style,
                label=f"{device or host}: {roof_text(roof.flops, roof.bw, source)}")
        ridge = roof.flops / roof.bw
        ax.annotate(f"ridge {ridge:.3g} FLOP/B", (ridge, roof.flops), textcoords="offset points", xytext=(4, -12),
                    fontsize="small", color=style["color"])
    what = "points" if frame.attrs.get("note") else "rows"
    for i, ((target, kernel), points) in enumerate(groups):
        ax.plot(points.ai, points.gflops, MARKERS[i // 10 % len(MARKERS)], markersize=5, color=f"C{i % 10}",
                label=f"{target}/{kernel} ({len(points)} {what})")
    log_axis(ax, "x")
    log_axis(ax, "y")
    finish(ax, "arithmetic intensity (FLOP per modelled byte)", "achieved GFLOP/s",
            "Roofline: each machine's ceilings, measured in the run, from its datasheet or from its model"
            + (f"\n{frame.attrs['note']}" if frame.attrs.get("note") else ""),
            legend=False)
    place_legend(ax, below=True)
    return fig


def roof_styles(points: pd.DataFrame, roofs: pd.DataFrame) -> list[dict]:
    """Each roof's line (in `roofs` order): the colour of the target/kernel whose rows sit under it (as the points
    are coloured; grey when several share it) and a line style of its own; thicker when not measured in the run."""
    colours = {key: f"C{i % 10}" for i, (key, _) in enumerate(points.groupby(["target", "kernel"], sort=True))}
    styles = []
    for i, (host, device, source) in enumerate(roofs.index):
        under = points[(points.host == host) & (points.device == device) & (points.roof == source)]
        owners = set(zip(under.target, under.kernel))
        colour = colours[owners.pop()] if len(owners) == 1 else SHARED_ROOF_COLOR
        styles.append(dict(color=colour, lw=1.5 if is_measured_roof(source) else 2.0,
                           ls=ROOF_LINES[i % len(ROOF_LINES)]))
    return styles


#: Each plot file, its title in results.md, and the function drawing it.
PLOTS: dict[str, tuple[str, Callable[[pd.DataFrame], "Figure | str"]]] = {
    LATENCY_PNG: ("Latency against sequence length", plot_latency),
    ERROR_PNG: ("Error against the float64 golden", plot_error),
    ROOFLINE_PNG: ("Roofline", plot_roofline),
}


def _titled(title: str, frame: pd.DataFrame) -> str:
    """The title, the fields every plotted row shares, and (above SUMMARY_ROWS rows) what a point stands for, on a
    second line."""
    shared = shared_text(frame)
    title = f"{title} ({shared})" if shared else title
    return f"{title}\n{frame.attrs['note']}" if frame.attrs.get("note") else title
