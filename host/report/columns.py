"""The columns of results.md's tables: how each cell writes a figure (one number format a column, "simulated" and
"modelled" labels for figures not measured on hardware, in the header when every row is, else in each cell), which
columns a (target, kernel) group's table keeps (only those that apply to its rows), and the Markdown table itself.
host/report/markdown.py lays out the sections around them. Layer L3, as markdown.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from host.report.common import (NOTE_SEPARATOR, column_format, fmt_num,
                                fmt_sci, own_message, shared_notes, tile)
from host.report.digest import row_sort_key
from host.results import Result, timing_kind

COUNTER_FIELDS = ("llc_loads", "llc_misses", "instructions", "cpu_cycles", "ipc")

#: How a cell writes a figure: one such function per column (host/report/common.py column_format).
Num = Callable[[float | int | None], str]

# ---------------------------------------------------------------------------------------------------------- cells

def yes_no(flag: bool | None) -> str:
    return "" if flag is None else ("yes" if flag else "no")


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or not den:
        return None
    return num / den


def _percent(fraction: float | None) -> str:
    return "" if fraction is None else f"{100 * fraction:.3g} %"


def md_cell(text: str) -> str:
    """Text safe inside one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def code_span(text: str) -> str:
    """An inline code span, fenced with more backticks than the text holds in a row."""
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _has_counters(r: Result) -> bool:
    return any(getattr(r, name) is not None for name in COUNTER_FIELDS)


def _p50_with_ci(r: Result, num: Num) -> str:
    if r.p50_ms is None:
        return ""
    if r.p50_ci_low_ms is None or r.p50_ci_high_ms is None or r.p50_ci_low_ms == r.p50_ci_high_ms:
        return num(r.p50_ms)  # no interval, or one of a single (or unvarying) sample: it says nothing
    return f"{num(r.p50_ms)} [{num(r.p50_ci_low_ms)}, {num(r.p50_ci_high_ms)}]"


def _energy(r: Result, num: Num) -> str:
    if r.energy_j is None:
        return ""
    return f"{num(r.energy_j)} ({r.energy_source})" if r.energy_source else num(r.energy_j)


# ---------------------------------------------------------------------------------------------------------- columns

@dataclass(frozen=True)
class Origin:
    """A figure that was not measured on hardware: the word that labels it, and which rows it applies to."""

    word: str
    of: Callable[[Result], bool]


SIMULATED = Origin("simulated", lambda r: "simulated" in r.counters_source.lower())
MODELLED = Origin("modelled", lambda r: r.sensors_source == "modelled")
MODELLED_TIMING = Origin("modelled", lambda r: timing_kind(r.timing_source) == "modelled")


@dataclass(frozen=True)
class Column:
    """One table column: its header, its cell text (a row's, writing figures with the column's number format), which
    rows make it apply (default: a non-empty cell), and the origin that labels its figures when they were not
    measured."""

    header: str
    cell: Callable[[Result, Num], str]
    applies: Callable[[Result], bool] | None = None
    origin: Origin | None = None

    def applies_to(self, r: Result) -> bool:
        return self.applies(r) if self.applies is not None else self.cell(r, fmt_num) != ""

    def number_format(self, rows: Sequence[Result]) -> Num:
        """One format for every figure this column shows of `rows` (common.column_format)."""
        figures: list[float | int | None] = []

        def seen(x: float | int | None) -> str:
            figures.append(x)
            return fmt_num(x)
        for r in rows:
            self.cell(r, seen)
        return column_format(figures)


def _counter(header: str, value: Callable[[Result], float | int | None], fmt: Callable | None = None) -> Column:
    return Column(header, lambda r, num: (fmt or num)(value(r)), origin=SIMULATED)


def _timed(header: str, cell: Callable[[Result, Num], str]) -> Column:
    """A timing figure, or one computed from the timing: labelled where a cycle model gave it."""
    return Column(header, cell, origin=MODELLED_TIMING)


#: K/V heads and queries per head, shown only for a group holding grouped or non-square rows.
KV_HEADS_COLUMN = Column("K/V heads", lambda r, num: str(r.kv_heads or r.heads))
Q_LEN_COLUMN = Column("q_len", lambda r, num: str(r.q_len or r.seq))

COLUMNS: tuple[Column, ...] = (
    Column("dtype", lambda r, num: r.dtype),
    Column("B", lambda r, num: str(r.batch)),
    Column("H", lambda r, num: str(r.heads)),
    Column("N", lambda r, num: str(r.seq)),
    Column("d", lambda r, num: str(r.dim)),
    Column("causal", lambda r, num: yes_no(r.causal)),
    Column("Br×Bc", lambda r, num: tile(r)),
    _timed("p50 ms [95% CI]", _p50_with_ci),
    _timed("mean ms", lambda r, num: num(r.mean_ms)),
    _timed("p99 ms", lambda r, num: num(r.p99_ms)),
    _timed("min ms", lambda r, num: num(r.min_ms)),
    Column("iters", lambda r, num: num(r.iters)),
    _timed("GFLOP/s", lambda r, num: num(r.gflops)),
    Column("GB/s (modelled)", lambda r, num: num(r.gbps)),
    Column("% of peak GFLOP/s", lambda r, num: _percent(_ratio(r.gflops, r.peak_gflops))),
    Column("% of peak GB/s", lambda r, num: _percent(_ratio(r.gbps, r.peak_gbps))),
    Column("measured bytes", lambda r, num: num(r.measured_bytes)),
    Column("max_abs", lambda r, num: fmt_sci(r.max_abs)),
    Column("rel_l2", lambda r, num: fmt_sci(r.rel_l2)),
    Column("bit_exact", lambda r, num: yes_no(r.bit_exact)),
    _counter("LLC loads", lambda r: r.llc_loads),
    _counter("LLC misses", lambda r: r.llc_misses),
    _counter("miss ratio", lambda r: _ratio(r.llc_misses, r.llc_loads), _percent),
    _counter("instructions", lambda r: r.instructions),
    _counter("CPU cycles", lambda r: r.cpu_cycles),
    _counter("IPC", lambda r: r.ipc),
    Column("counters", lambda r, num: r.counters_source if _has_counters(r) else
           (f"not measured — {r.counters_reason}" if r.counters_reason else "")),
    _timed("cycles", lambda r, num: num(r.cycles)),
    Column("clock MHz", lambda r, num: num(None if r.clock_hz is None else r.clock_hz / 1e6)),
    Column("temp °C", lambda r, num: num(r.temp_c), origin=MODELLED),
    Column("VDDA V", lambda r, num: num(r.vdda_v), origin=MODELLED),
    Column("energy J", _energy),
    Column("status", lambda r, num: r.status, applies=lambda r: r.status != "ok"),
    Column("message", lambda r, num: own_message(r)),  # group_table leaves out the notes every row shares
)


#: Shown only in a table whose rows were drawn from different seeds (one seed is said in the headline).
SEED_COLUMN = Column("seed", lambda r, num: str(r.seed))


def shared_counters_reason(rows: Sequence[Result]) -> str:
    """The reason counters are missing when every row of a group lacks them for the same reason, else ''."""
    reasons = {r.counters_reason for r in rows}
    if len(reasons) == 1 and not any(_has_counters(r) for r in rows):
        return reasons.pop()
    return ""


def label_origins(columns: Sequence[Column], rows: Sequence[Result]) -> list[Column]:
    """Label figures that were not measured: in the header when every filled cell of the column is of that origin,
    else in each such cell."""
    labelled = []
    for col in columns:
        filled = [r for r in rows if col.cell(r, fmt_num)]
        marked = [r for r in filled if col.origin is not None and col.origin.of(r)]
        if not marked:
            labelled.append(col)
        elif len(marked) == len(filled):
            labelled.append(replace(col, header=f"{col.header} ({col.origin.word})"))
        else:
            labelled.append(replace(col, cell=_labelled_cell(col.cell, col.origin)))
    return labelled


def _labelled_cell(cell: Callable[[Result, Num], str], origin: Origin) -> Callable[[Result, Num], str]:
    def labelled(r: Result, num: Num) -> str:
        text = cell(r, num)
        return f"{text} ({origin.word})" if text and origin.of(r) else text
    return labelled


def group_table(rows: Sequence[Result]) -> list[str]:
    """Markdown lines for one (target, kernel) group: the table, then the counters reason and the message notes
    that every row shares, each said once (results.csv keeps them in every row). Each column writes its figures in
    one format."""
    rows = sorted(rows, key=row_sort_key)
    reason = shared_counters_reason(rows)
    shared = shared_notes(rows)
    columns = [c for c in COLUMNS if not (reason and c.header == "counters")]
    columns = [replace(c, cell=lambda r, num: own_message(r, shared)) if c.header == "message" else c
               for c in columns]
    columns = [c for c in columns if any(c.applies_to(r) for r in rows)]
    if any(r.kv_heads is not None for r in rows):  # grouped-query rows: their K/V heads beside H
        columns.insert(next(i for i, c in enumerate(columns) if c.header == "H") + 1, KV_HEADS_COLUMN)
    if any(r.q_len is not None for r in rows):  # decode or prefill-chunk rows: their queries beside N
        columns.insert(next(i for i, c in enumerate(columns) if c.header == "N") + 1, Q_LEN_COLUMN)
    if len({r.seed for r in rows}) > 1:  # one seed is said once, in the headline
        columns.insert(next(i for i, c in enumerate(columns) if c.header == "causal") + 1, SEED_COLUMN)
    if len({(r.run_id, r.host) for r in rows}) > 1:
        columns.insert(0, Column("run / host", lambda r, num: f"{r.run_id} / {r.host}"))
    columns = label_origins(columns, rows)
    formats = [c.number_format(rows) for c in columns]
    lines = markdown_table([c.header for c in columns],
                           [[c.cell(r, num) for c, num in zip(columns, formats)] for r in rows])
    if reason:
        lines += ["", f"Counters: not measured — {reason}"]
    if shared:
        lines += ["", f"Every row: {NOTE_SEPARATOR.join(shared)}"]
    return lines


def markdown_table(headers: Sequence[str], cells: Sequence[Sequence[str]]) -> list[str]:
    """A GitHub-flavoured Markdown table; numeric-looking columns are right-aligned."""
    def numeric(i: int) -> bool:
        values = [row[i] for row in cells if row[i]]
        return bool(values) and all(v[0].isdigit() or v[0] in "-." for v in values)
    align = ["---:" if numeric(i) else "---" for i in range(len(headers))]
    lines = ["| " + " | ".join(md_cell(h) for h in headers) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in cells]
    return lines
