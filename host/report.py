"""Turn an output folder's result files into results.md and PNG plots, reading nothing but those files.

`render(out_dir)` reads results.csv (every target's rows, possibly merged from several runs on several machines:
a GPU box, a lab bench) and runs.jsonl (one line per run: command, machine), and writes beside them:

- results.md: the runs, one table per (target, kernel) with only the columns that apply to that group, the rows
  that were skipped or failed with their message, and the plots;
- latency_vs_seq.png: median latency against sequence length, with the median's 95 % confidence interval;
- error.png: rel-L2 and max-abs error against the float64 golden, per (target, kernel);
- roofline.png: achieved GFLOP/s against arithmetic intensity under each device's measured ceilings (only when
  some row carries those ceilings).

A plot without data is not drawn; results.md says why. ``python -m host.report OUT_DIR`` does the same from a shell.
This is layer L3: it imports only host.results and host.errors, never a target.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
import pandas as pd

from host.errors import KbenchError, ResultsError
from host.cli import Parser, guard
from host.results import Result, ResultsFile, RunInfo, read_runs

if TYPE_CHECKING:
    from matplotlib.figure import Figure

RESULTS_CSV = "results.csv"
RUNS_JSONL = "runs.jsonl"
RESULTS_MD = "results.md"
LATENCY_PNG = "latency_vs_seq.png"
ERROR_PNG = "error.png"
ROOFLINE_PNG = "roofline.png"

#: Rows of one table are sorted by these problem fields, then by tile.
SORT_FIELDS = ("dtype", "batch", "heads", "dim", "causal", "seq", "br", "bc")
#: One latency line per distinct value of these fields (the tile too, so a Br×Bc sweep does not zigzag).
LINE_FIELDS = ("target", "kernel", "dtype", "dim", "heads", "batch", "causal", "tile", "host")
COUNTER_FIELDS = ("llc_loads", "llc_misses", "instructions", "cpu_cycles", "ipc")
DPI = 120
MARKERS = ("o", "s", "^", "D", "v", "P")  # a new marker each time the 10 colours repeat


# ---------------------------------------------------------------------------------------------------------- numbers

def fmt_num(x: float | int | None) -> str:
    """A figure with 3–4 significant digits; '' for None. Counts below 10⁴ stay exact, larger ones take k/M/G/T."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if isinstance(x, int):
        return str(x) if abs(x) < 10_000 else _si(x)
    ax = abs(x)
    if ax == 0:
        return "0"
    if ax >= 1_000_000 or ax < 1e-3:
        return _short_exp(f"{x:.3e}")
    if ax >= 1000:
        return f"{x:.0f}"
    return f"{x:.4g}"


def _si(count: int) -> str:
    """A large count with 4 significant digits and a decimal prefix: 537600 → '537.6k'."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(count) >= scale:
            return f"{count / scale:.4g}{prefix}"
    return str(count)


def fmt_sci(x: float | None) -> str:
    """An error figure in %.2e; '' for None."""
    return "" if x is None else f"{x:.2e}"


def _short_exp(text: str) -> str:
    """'1.235e+06' → '1.235e6'."""
    mantissa, exponent = text.split("e")
    return f"{mantissa}e{int(exponent)}"


def _yes_no(flag: bool | None) -> str:
    return "" if flag is None else ("yes" if flag else "no")


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or not den:
        return None
    return num / den


def _percent(fraction: float | None) -> str:
    return "" if fraction is None else f"{100 * fraction:.3g} %"


def _md_cell(text: str) -> str:
    """Text safe inside one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _code(text: str) -> str:
    """An inline code span, fenced with more backticks than the text holds in a row."""
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# ---------------------------------------------------------------------------------------------------------- columns

def _is_simulated(r: Result) -> bool:
    return "simulated" in r.counters_source.lower()


def _has_counters(r: Result) -> bool:
    return any(getattr(r, name) is not None for name in COUNTER_FIELDS)


def _p50_with_ci(r: Result) -> str:
    if r.p50_ms is None:
        return ""
    if r.p50_ci_low_ms is None or r.p50_ci_high_ms is None:
        return fmt_num(r.p50_ms)
    return f"{fmt_num(r.p50_ms)} [{fmt_num(r.p50_ci_low_ms)}, {fmt_num(r.p50_ci_high_ms)}]"


def _tile(r: Result) -> str:
    if r.br is None and r.bc is None:
        return ""
    return f"{'' if r.br is None else r.br}×{'' if r.bc is None else r.bc}"


def _energy(r: Result) -> str:
    if r.energy_j is None:
        return ""
    return f"{fmt_num(r.energy_j)} ({r.energy_source})" if r.energy_source else fmt_num(r.energy_j)


@dataclass(frozen=True)
class Column:
    """One table column: its header, its cell text, and which rows make it apply (default: a non-empty cell)."""

    header: str
    cell: Callable[[Result], str]
    applies: Callable[[Result], bool] | None = None
    counter: bool = False  # a counter figure: labelled when the counts are simulated

    def applies_to(self, r: Result) -> bool:
        return self.applies(r) if self.applies is not None else self.cell(r) != ""


def _counter(header: str, value: Callable[[Result], float | int | None], fmt: Callable = fmt_num) -> Column:
    return Column(header, lambda r: fmt(value(r)), counter=True)


COLUMNS: tuple[Column, ...] = (
    Column("dtype", lambda r: r.dtype),
    Column("B", lambda r: str(r.batch)),
    Column("H", lambda r: str(r.heads)),
    Column("N", lambda r: str(r.seq)),
    Column("d", lambda r: str(r.dim)),
    Column("causal", lambda r: _yes_no(r.causal)),
    Column("Br×Bc", _tile),
    Column("p50 ms [95% CI]", _p50_with_ci),
    Column("mean ms", lambda r: fmt_num(r.mean_ms)),
    Column("p99 ms", lambda r: fmt_num(r.p99_ms)),
    Column("min ms", lambda r: fmt_num(r.min_ms)),
    Column("iters", lambda r: fmt_num(r.iters)),
    Column("GFLOP/s", lambda r: fmt_num(r.gflops)),
    Column("GB/s (modelled)", lambda r: fmt_num(r.gbps)),
    Column("% of peak GFLOP/s", lambda r: _percent(_ratio(r.gflops, r.peak_gflops))),
    Column("% of peak GB/s", lambda r: _percent(_ratio(r.gbps, r.peak_gbps))),
    Column("measured bytes", lambda r: fmt_num(r.measured_bytes)),
    Column("max_abs", lambda r: fmt_sci(r.max_abs)),
    Column("rel_l2", lambda r: fmt_sci(r.rel_l2)),
    Column("bit_exact", lambda r: _yes_no(r.bit_exact)),
    _counter("LLC loads", lambda r: r.llc_loads),
    _counter("LLC misses", lambda r: r.llc_misses),
    _counter("miss ratio", lambda r: _ratio(r.llc_misses, r.llc_loads), _percent),
    _counter("instructions", lambda r: r.instructions),
    _counter("CPU cycles", lambda r: r.cpu_cycles),
    _counter("IPC", lambda r: r.ipc),
    Column("counters", lambda r: r.counters_source if _has_counters(r) else
           (f"not measured — {r.counters_reason}" if r.counters_reason else "")),
    Column("cycles", lambda r: fmt_num(r.cycles)),
    Column("clock MHz", lambda r: fmt_num(None if r.clock_hz is None else r.clock_hz / 1e6)),
    Column("temp °C", lambda r: fmt_num(r.temp_c)),
    Column("VDDA V", lambda r: fmt_num(r.vdda_v)),
    Column("energy J", _energy),
    Column("status", lambda r: r.status, applies=lambda r: r.status != "ok"),
    Column("message", lambda r: "" if r.status == "ok" else r.message),
)


def shared_counters_reason(rows: Sequence[Result]) -> str:
    """The reason counters are missing when every row of a group lacks them for the same reason, else ''."""
    reasons = {r.counters_reason for r in rows}
    if len(reasons) == 1 and not any(_has_counters(r) for r in rows):
        return reasons.pop()
    return ""


def _row_sort_key(r: Result) -> tuple:
    """SORT_FIELDS in order, an absent tile after any present one; then run and host, for a stable order."""
    values = (getattr(r, name) for name in SORT_FIELDS)
    return tuple((v is None, 0 if v is None else v) for v in values) + (r.run_id, r.host)


def _label_simulated(columns: list[Column], rows: Sequence[Result]) -> list[Column]:
    """Mark simulated counts: in the header when every counted row is simulated, else in each simulated cell."""
    counted = [r for r in rows if _has_counters(r)]
    if not any(_is_simulated(r) for r in counted):
        return columns
    every = all(_is_simulated(r) for r in counted)
    labelled = []
    for col in columns:
        if not col.counter:
            labelled.append(col)
        elif every:
            labelled.append(Column(f"{col.header} (simulated)", col.cell, col.applies, True))
        else:
            labelled.append(Column(col.header, _simulated_cell(col.cell), col.applies, True))
    return labelled


def _simulated_cell(cell: Callable[[Result], str]) -> Callable[[Result], str]:
    def labelled(r: Result) -> str:
        text = cell(r)
        return f"{text} (simulated)" if text and _is_simulated(r) else text
    return labelled


def group_table(rows: Sequence[Result]) -> list[str]:
    """Markdown lines for one (target, kernel) group: the table, then the counters reason when shared."""
    rows = sorted(rows, key=_row_sort_key)
    reason = shared_counters_reason(rows)
    columns = [c for c in COLUMNS if not (reason and c.header == "counters")]
    columns = [c for c in columns if any(c.applies_to(r) for r in rows)]
    if len({(r.run_id, r.host) for r in rows}) > 1:
        columns.insert(0, Column("run / host", lambda r: f"{r.run_id} / {r.host}"))
    columns = _label_simulated(columns, rows)
    lines = markdown_table([c.header for c in columns], [[c.cell(r) for c in columns] for r in rows])
    if reason:
        lines += ["", f"Counters: not measured — {reason}"]
    return lines


def markdown_table(headers: Sequence[str], cells: Sequence[Sequence[str]]) -> list[str]:
    """A GitHub-flavoured Markdown table; numeric-looking columns are right-aligned."""
    def numeric(i: int) -> bool:
        values = [row[i] for row in cells if row[i]]
        return bool(values) and all(v[0].isdigit() or v[0] in "-." for v in values)
    align = ["---:" if numeric(i) else "---" for i in range(len(headers))]
    lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in cells]
    return lines


# ---------------------------------------------------------------------------------------------------------- markdown

def _machine_text(machine: dict) -> str:
    """A machine details dict on one line: key=value pairs, nested values as compact JSON."""
    def value(v: object) -> str:
        return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"), sort_keys=True)
    return "; ".join(f"{k}={value(v)}" for k, v in sorted(machine.items()))


def runs_section(runs: Sequence[RunInfo], results: Sequence[Result]) -> list[str]:
    """Each run of runs.jsonl, plus any run_id found only in results.csv, with its row count."""
    counts = pd.Series([r.run_id for r in results], dtype=object).value_counts().to_dict()
    lines = ["## Runs", ""]
    for run in runs:
        lines.append(f"- **{run.run_id}** — {run.timestamp}, host {_code(run.host)}, git {_code(run.git_rev)}, "
                     f"{counts.get(run.run_id, 0)} rows")
        lines.append(f"  - command: {_code(run.command)}")
        if run.machine:
            lines.append(f"  - machine: {_code(_machine_text(run.machine))}")
    described = {run.run_id for run in runs}
    for run_id in sorted(set(counts) - described):
        first = next(r for r in results if r.run_id == run_id)
        lines.append(f"- **{run_id}** — {first.timestamp}, host {_code(first.host)}, git {_code(first.git_rev)}, "
                     f"{counts[run_id]} rows (no entry in {RUNS_JSONL}: command and machine unknown)")
    return lines + [""]


def _group_caption(rows: Sequence[Result]) -> str:
    """Where a group ran: host (device) pairs and their measured ceilings."""
    parts = []
    for (host, device), machine_rows in groupby(sorted(rows, key=lambda r: (r.host, r.device)),
                                                key=lambda r: (r.host, r.device)):
        machine_rows = list(machine_rows)
        text = f"{host} ({device})" if device else host
        peaks = _peaks(machine_rows)
        if peaks is not None:
            text += f", measured peak {fmt_num(peaks[0])} GFLOP/s, {fmt_num(peaks[1])} GB/s"
        parts.append(text)
    return "Ran on " + "; ".join(parts) + "."


def tables_section(results: Sequence[Result]) -> list[str]:
    lines = ["## Results", ""]
    key = lambda r: (r.target, r.kernel)  # noqa: E731
    for (target, kernel), rows in groupby(sorted(results, key=key), key=key):
        rows = list(rows)
        lines += [f"### {target} / {kernel}", "", _group_caption(rows), ""]
        lines += group_table(rows) + [""]
    return lines


def failures_section(results: Sequence[Result]) -> list[str]:
    lines = ["## Skipped and failed", ""]
    bad = sorted((r for r in results if r.status != "ok"), key=lambda r: (r.target, r.kernel) + _row_sort_key(r))
    if not bad:
        return lines + ["None: every row is ok.", ""]
    headers = ["target", "kernel", "host", "dtype", "B", "H", "N", "d", "causal", "Br×Bc", "status", "message"]
    cells = [[r.target, r.kernel, r.host, r.dtype, str(r.batch), str(r.heads), str(r.seq), str(r.dim),
              _yes_no(r.causal), _tile(r), r.status, r.message] for r in bad]
    return lines + markdown_table(headers, cells) + [""]


def plots_section(drawn: dict[str, str | None]) -> list[str]:
    """Embed each drawn plot with a relative link; for a plot not drawn, say why."""
    lines = ["## Plots", ""]
    titles = {LATENCY_PNG: "Latency against sequence length", ERROR_PNG: "Error against the float64 golden",
              ROOFLINE_PNG: "Roofline"}
    for name, why_not in drawn.items():
        if why_not is None:
            lines += [f"![{titles[name]}]({name})", ""]
        else:
            lines += [f"{name} not drawn: {why_not}.", ""]
    return lines


def markdown(results: Sequence[Result], runs: Sequence[RunInfo], drawn: dict[str, str | None]) -> str:
    n_ok = sum(r.status == "ok" for r in results)
    lines = ["# kbench results", "",
             f"{len(results)} rows ({n_ok} ok) from {len({r.run_id for r in results})} run(s) "
             f"on {len({r.host for r in results})} host(s).", ""]
    lines += runs_section(runs, results)
    lines += tables_section(results)
    lines += failures_section(results)
    lines += plots_section(drawn)
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------------------------------------------------- plots

def results_frame(results: Sequence[Result]) -> pd.DataFrame:
    """One row per Result, plus its tile as text; missing figures are NaN in the numeric columns plotted."""
    frame = pd.DataFrame([dataclasses.asdict(r) | {"tile": _tile(r)} for r in results])
    numeric = ["seq", "p50_ms", "p50_ci_low_ms", "p50_ci_high_ms", "gflops", "gbps", "peak_gflops", "peak_gbps",
               "max_abs", "rel_l2"]
    for name in numeric:
        frame[name] = pd.to_numeric(frame[name], errors="coerce")
    return frame


def _line_label(key: tuple, several_hosts: bool) -> str:
    values = dict(zip(LINE_FIELDS, key))
    label = (f"{values['target']}/{values['kernel']} {values['dtype']} d={values['dim']} H={values['heads']} "
             f"B={values['batch']}{' causal' if values['causal'] else ''}")
    if values["tile"]:
        label += f" {values['tile']}"
    return label + (f" @{values['host']}" if several_hosts else "")


def plot_latency(frame: pd.DataFrame, path: Path) -> str | None:
    """p50 against seq, log-log, one line per configuration, CI error bars; the reason when nothing to draw."""
    ok = frame[(frame.status == "ok") & (frame.p50_ms > 0) & (frame.seq > 0)]
    if ok.empty:
        return "no ok row has a positive p50 latency"
    fig = _figure(9, 5.5)
    ax = fig.add_subplot()
    several_hosts = ok.host.nunique() > 1
    for i, (key, line) in enumerate(ok.groupby(list(LINE_FIELDS), sort=True)):
        line = line.sort_values("seq")
        low = (line.p50_ms - line.p50_ci_low_ms).clip(lower=0).fillna(0)
        high = (line.p50_ci_high_ms - line.p50_ms).clip(lower=0).fillna(0)
        ax.errorbar(line.seq, line.p50_ms, yerr=[low, high], marker=MARKERS[i // 10 % len(MARKERS)], markersize=4,
                    capsize=3, color=f"C{i % 10}", label=_line_label(key, several_hosts))
    _log_log(ax)
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("median latency (ms), 95% CI")
    ax.set_title("Attention latency against sequence length")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _save(fig, path)
    return None


def _positive(series: pd.Series) -> pd.Series:
    return series[np.isfinite(series) & (series > 0)]


def plot_error(frame: pd.DataFrame, path: Path) -> str | None:
    """rel_l2 and max_abs per (target, kernel), log y, a point per row; zero errors annotated, not log-plotted."""
    ok = frame[frame.status == "ok"]
    measured = ok[ok.rel_l2.notna() | ok.max_abs.notna()]
    if measured.empty:
        return "no ok row has an error figure (rel_l2, max_abs)"
    groups = sorted(measured.groupby(["target", "kernel"]).groups)
    fig = _figure(max(6.0, 1.4 * len(groups) + 3), 6.5)
    axes = fig.subplots(2, 1, sharex=True)
    for ax, metric, label in ((axes[0], "rel_l2", "rel-L2 error"), (axes[1], "max_abs", "max |error|")):
        _error_panel(ax, measured, groups, metric, label)
    axes[1].set_xticks(range(len(groups)), [f"{t}\n{k}" for t, k in groups])
    axes[1].set_xlabel("target / kernel")
    axes[0].set_title("Error against the float64 golden (ok rows)")
    _save(fig, path)
    return None


def _error_panel(ax, measured: pd.DataFrame, groups: list[tuple], metric: str, label: str) -> None:
    """One metric, a column of points per group; a group (or the whole panel) whose errors are all zero is annotated."""
    per_group = [measured[(measured.target == t) & (measured.kernel == k)][metric] for t, k in groups]
    if not any(len(_positive(values)) for values in per_group):
        zero = any((values == 0).any() for values in per_group)
        ax.set_yticks([])
        ax.text(0.5, 0.5, "bit-exact / zero error" if zero else f"no {metric} figure in any ok row",
                transform=ax.transAxes, ha="center", va="center")
    else:
        ax.set_yscale("log")
        for i, values in enumerate(per_group):
            positive = _positive(values)
            if len(positive):
                jitter = np.linspace(-0.2, 0.2, len(positive)) if len(positive) > 1 else np.zeros(1)
                ax.plot(i + jitter, positive, "o", markersize=5, alpha=0.8, color=f"C{i % 10}")
            if (values == 0).any():
                ax.annotate("zero error", (i, 0.5), xycoords=("data", "axes fraction"), ha="center",
                            fontsize="small")
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_ylabel(label)
    ax.grid(True, which="both", axis="y", alpha=0.3)


def _peaks(rows: Sequence[Result]) -> tuple[float, float] | None:
    """A machine's ceilings: the highest peak GFLOP/s and GB/s measured on it, or None when none was."""
    flops = [r.peak_gflops for r in rows if r.peak_gflops]
    bw = [r.peak_gbps for r in rows if r.peak_gbps]
    return (max(flops), max(bw)) if flops and bw else None


def plot_roofline(frame: pd.DataFrame, path: Path) -> str | None:
    """Achieved GFLOP/s against FLOPs per modelled byte, under each machine's roof; the reason when nothing to draw."""
    ok = frame[(frame.status == "ok") & (frame.peak_gflops > 0) & (frame.peak_gbps > 0)
               & (frame.gflops > 0) & (frame.gbps > 0)]
    if ok.empty:
        return "no ok row carries the machine's measured peaks (peak_gflops and peak_gbps) with GFLOP/s and GB/s"
    ok = ok.assign(ai=ok.gflops / ok.gbps)
    fig = _figure(9, 5.5)
    ax = fig.add_subplot()
    ai_lo, ai_hi = ok.ai.min() / 4, ok.ai.max() * 4
    for i, ((host, device), machine) in enumerate(ok.groupby(["host", "device"], sort=True)):
        peak_flops, peak_bw = machine.peak_gflops.max(), machine.peak_gbps.max()
        ridge = peak_flops / peak_bw
        ai = np.geomspace(min(ai_lo, ridge / 4), max(ai_hi, ridge * 4), 200)
        ax.plot(ai, np.minimum(peak_flops, ai * peak_bw), color="0.3", lw=1.5, ls=["-", "--", ":", "-."][i % 4],
                label=f"roof {host}/{device}: {fmt_num(peak_flops)} GFLOP/s, {fmt_num(peak_bw)} GB/s")
        ax.annotate(f"ridge {ridge:.3g} FLOP/B", (ridge, peak_flops), textcoords="offset points", xytext=(4, -12),
                    fontsize="small", color="0.3")
    for (target, kernel), points in ok.groupby(["target", "kernel"], sort=True):
        ax.plot(points.ai, points.gflops, "o", markersize=5, label=f"{target}/{kernel}")
    _log_log(ax)
    ax.set_xlabel("arithmetic intensity (FLOP per modelled byte)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title("Roofline (measured ceilings of each machine)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _save(fig, path)
    return None


def _figure(width: float, height: float) -> Figure:
    """A figure drawn by Agg, off any display. matplotlib's object API is used, never pyplot (no global state); it is
    imported here, so an error path (a missing folder) does not pay for it."""
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height))


def _log_log(ax) -> None:
    """Log scales on both axes with plain-number ticks; 2 and 5 within each decade are labelled on short ranges."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis, (low, high) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        short = math.log10(high / low) < 2
        axis.set_major_locator(LogLocator(base=10))
        axis.set_minor_locator(LogLocator(base=10, subs=(2, 5) if short else (2, 3, 4, 5, 6, 7, 8, 9)))
        axis.set_major_formatter(FuncFormatter(_tick))
        axis.set_minor_formatter(FuncFormatter(_tick) if short else NullFormatter())


def _tick(value: float, _position: int) -> str:
    return f"{value:g}"


def _save(fig: Figure, path: Path) -> None:
    fig.savefig(path, dpi=DPI, bbox_inches="tight")


# ---------------------------------------------------------------------------------------------------------- render

#: Each plot file and the function drawing it; a function returns None when drawn, else why it was not.
PLOTS: dict[str, Callable[[pd.DataFrame, Path], str | None]] = {
    LATENCY_PNG: plot_latency, ERROR_PNG: plot_error, ROOFLINE_PNG: plot_roofline}


def read_results(out_dir: Path) -> list[Result]:
    """Every row of out_dir/results.csv; ResultsError when the folder or its rows are missing."""
    if not out_dir.is_dir():
        raise ResultsError(f"results folder {out_dir} does not exist")
    csv_path = out_dir / RESULTS_CSV
    if not csv_path.exists():
        raise ResultsError(f"{csv_path} does not exist: run `python -m host.compare --out {out_dir}` first")
    results = ResultsFile(csv_path).read()
    if not results:
        raise ResultsError(f"{csv_path} has no result rows")
    return results


def render(out_dir: Path) -> list[Path]:
    """Write results.md and the plots into out_dir from its results.csv and runs.jsonl; return the written paths."""
    out_dir = Path(out_dir)
    results = read_results(out_dir)
    runs = read_runs(out_dir / RUNS_JSONL)
    frame = results_frame(results)
    drawn: dict[str, str | None] = {}
    for name, plot in PLOTS.items():
        drawn[name] = plot(frame, out_dir / name)
        if drawn[name] is not None:
            (out_dir / name).unlink(missing_ok=True)  # a stale plot from an earlier render would mislead
    md_path = out_dir / RESULTS_MD
    md_path.write_text(markdown(results, runs, drawn), encoding="utf-8")
    return [md_path] + [out_dir / name for name, why_not in drawn.items() if why_not is None]


# ---------------------------------------------------------------------------------------------------------- CLI

def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m host.report", description="Render results.md and plots from an output folder.")
    parser.add_argument("out_dir", type=Path, help="folder holding results.csv (and runs.jsonl)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """A missing or unreadable results folder counts as a bad argument (exit 2); a failed write exits 1."""
    def body() -> int:
        args = _parser().parse_args(argv)
        try:
            paths = render(args.out_dir)
        except OSError as exc:
            print(f"kbench: cannot write the report: {exc}", file=sys.stderr)
            return 1
        for path in paths:
            print(path)
        return 0

    return guard(body, usage_errors=(KbenchError,))


if __name__ == "__main__":
    sys.exit(main())
