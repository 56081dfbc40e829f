"""results.md from result rows and run records: the runs, the targets a run could not use, one table per (target,
kernel) with only the columns that apply to that group (grouped under each workload's name where rows name one), the
rows that were wrong, skipped or failed with their message, and the plots (or why each was not drawn). A note that
every row of a table carries in its message (the CPU's missing RAPL, the MCU's datasheet energy) is said once under
the table; a message does not repeat its row's status word; each column writes its figures in one number format.
Above SUMMARY_ROWS (2,000) rows results.md summarises instead (one line per target/kernel/dtype: rows by status,
ranges of N, d, H, best and median GFLOP/s, worst errors; the first NOT_OK_LISTED rows that are not ok, and how many
more): the full rows stay in results.csv. The headline says the seed(s) the inputs were drawn from; a table whose rows
differ in seed has a seed column. Lines of runs.jsonl that are not runs are named under the runs.

Figures that were not measured on hardware say so: cachegrind's counters are labelled "simulated"; the twin's
temperature and VDDA, and timing from a cycle model (latency, cycles and the GFLOP/s they give: the twin's, the asic
target's) "modelled"; in the header when every row of the table is, else in each such cell. Each table's caption
says where its timing comes from.
Layer L3: it imports only host.results and host.report.common, and reads nothing itself.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, replace
from itertools import groupby
from typing import Callable, Iterable, NamedTuple, Sequence

from host.report.common import (NOTE_SEPARATOR, RESULTS_CSV, RUNS_JSONL, SUMMARY_ROWS, column_format, fmt_num,
                                fmt_sci, is_measured_roof, own_message, roof_text, shared_notes, tile)
from host.report.digest import Digest, not_ok_key, row_sort_key
from host.results import STATUSES, Result, timing_kind
from host.run_log import RunInfo

COUNTER_FIELDS = ("llc_loads", "llc_misses", "instructions", "cpu_cycles", "ipc")
#: How many runs the Runs section lists, and how many runs a 'targets not run' reason names; the rest are counted.
RUNS_LISTED = 100
RUNS_PER_REASON = 5
#: How many distinct seeds the headline lists.
SEEDS_LISTED = 8
#: How many of the runs.jsonl lines that are not runs the Runs section names, with why.
SKIPPED_LISTED = 10

#: How a cell writes a figure: one such function per column (host/report/common.py column_format).
Num = Callable[[float | int | None], str]


class Drawn(NamedTuple):
    """A plot file, its title, and why it was not drawn (None when it was)."""

    name: str
    title: str
    why_not: str | None


# ---------------------------------------------------------------------------------------------------------- cells

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
    Column("causal", lambda r, num: _yes_no(r.causal)),
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
    Column("bit_exact", lambda r, num: _yes_no(r.bit_exact)),
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
    lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in cells]
    return lines


# ---------------------------------------------------------------------------------------------------------- sections

def _machine_text(machine: dict) -> str:
    """A machine details dict on one line: key=value pairs, nested values as compact JSON."""
    def value(v: object) -> str:
        return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"), sort_keys=True)
    return "; ".join(f"{k}={value(v)}" for k, v in sorted(machine.items()))


def distinct_runs(runs: Sequence[RunInfo]) -> list[RunInfo]:
    """runs.jsonl's runs, each run_id once (its first line), in file order."""
    return list({run.run_id: run for run in reversed(runs)}.values())[::-1]


def run_counts(runs: Sequence[RunInfo], digest: Digest) -> tuple[int, int]:
    """(runs that gave rows, runs that gave none): the rows' run_ids, and runs.jsonl's runs without a row."""
    return len(digest.run_rows), sum(run.run_id not in digest.run_rows for run in distinct_runs(runs))


def seeds_text(seeds: set[int]) -> str:
    """'Inputs drawn from seed 0.', or 'Inputs drawn from seeds 0, 7 (a seed column where a table's rows differ).'
    (the first SEEDS_LISTED of them, then how many in all)."""
    seeds = sorted(seeds)
    if len(seeds) == 1:
        return f"Inputs drawn from seed {seeds[0]}."
    listed = ", ".join(map(str, seeds[:SEEDS_LISTED])) + (f", … ({len(seeds)} seeds)" if len(seeds) > SEEDS_LISTED
                                                          else "")
    return f"Inputs drawn from seeds {listed} (a seed column where a table's rows differ)."


def headline(digest: Digest, runs: Sequence[RunInfo]) -> str:
    """'13 rows (10 ok, 1 wrong, 2 oom) from 2 run(s) on 2 host(s).', plus the runs that gave no row, and the seeds
    the inputs were drawn from."""
    by_status = ", ".join(f"{digest.statuses[s]} {s}" for s in STATUSES if digest.statuses[s])
    with_rows, empty = run_counts(runs, digest)
    text = f"{digest.count} rows ({by_status}) from {with_rows} run(s) on {len(digest.hosts)} host(s)."
    if empty:
        text += f" {empty} more run(s) in {RUNS_JSONL} gave no row (listed below with 0 rows)."
    return f"{text} {seeds_text(digest.seeds)}"


def runs_section(runs: Sequence[RunInfo], digest: Digest, skipped: Sequence[str] = ()) -> list[str]:
    """Each run that gave rows (from runs.jsonl, or known only by its rows), then each run that gave none, marked
    '0 rows', so the list agrees with the headline's count (the first RUNS_LISTED runs, then how many more); then the
    lines of runs.jsonl that are not runs (host/run_log.py read_run_log), the first SKIPPED_LISTED with their
    reason."""
    counts = digest.run_rows
    runs = distinct_runs(runs)
    described = {run.run_id for run in runs}
    unknown = sorted(set(counts) - described)
    lines = ["## Runs", ""]
    listed = 0
    for run in sorted(runs, key=lambda run: counts[run.run_id] == 0):  # stable: file order within each part
        if listed == RUNS_LISTED:
            break
        listed += 1
        lines.append(f"- **{run.run_id}** — {run.timestamp}, host {_code(run.host)}, git {_code(run.git_rev)}, "
                     f"{counts[run.run_id]} rows" + (" (measured nothing)" if not counts[run.run_id] else ""))
        lines.append(f"  - command: {_code(run.command)}")
        if run.machine:
            lines.append(f"  - machine: {_code(_machine_text(run.machine))}")
        if run.unavailable:
            lines.append(f"  - targets not run: {', '.join(map(_code, sorted(run.unavailable)))}")
    shown = set(unknown[:max(RUNS_LISTED - listed, 0)])
    for run_id in sorted(shown):  # runs that runs.jsonl does not describe, known by their first row
        timestamp, host, git_rev = digest.run_first[run_id]
        lines.append(f"- **{run_id}** — {timestamp}, host {_code(host)}, git {_code(git_rev)}, "
                     f"{counts[run_id]} rows (no entry in {RUNS_JSONL}: command and machine unknown)")
    more = len(runs) + len(unknown) - listed - len(shown)
    if more:
        lines.append(f"- and {more} more run(s): each in {RUNS_JSONL}, and by its run_id in {RESULTS_CSV}")
    if skipped:
        lines += ["", f"{len(skipped)} line(s) of {RUNS_JSONL} are not runs and were skipped:"]
        lines += [f"- {_md_cell(why)}" for why in skipped[:SKIPPED_LISTED]]
        if len(skipped) > SKIPPED_LISTED:
            lines.append(f"- and {len(skipped) - SKIPPED_LISTED} more")
    return lines + [""]


def unavailable_section(runs: Sequence[RunInfo]) -> list[str]:
    """Each target a run could not use, with its reason and the runs that gave it."""
    lines = ["## Targets not run", ""]
    reasons: dict[tuple[str, str], list[str]] = {}
    for run in distinct_runs(runs):
        for target, reason in run.unavailable.items():
            reasons.setdefault((target, str(reason)), []).append(f"{run.run_id} ({run.host})")
    if not reasons:
        return lines + [f"None: no run in {RUNS_JSONL} recorded an unavailable target.", ""]
    cells = [[target, reason, ", ".join(where[:RUNS_PER_REASON])
              + (f" and {len(where) - RUNS_PER_REASON} more" if len(where) > RUNS_PER_REASON else "")]
             for (target, reason), where in sorted(reasons.items())]
    return lines + markdown_table(["target", "reason", "run (host)"], cells) + [""]


def _timing_text(rows: Sequence[Result]) -> str:
    """' Timing measured (CUDA events).': where the rows' timing comes from, each source once; '' for rows that
    never recorded it (schema version 1 and 2)."""
    sources = dict.fromkeys(r.timing_source for r in rows if r.timing_source)
    texts = [f"{kind} ({how})" for kind, _, how in (source.partition(": ") for source in sources)]
    return f" Timing {'; '.join(texts)}." if texts else ""


def _group_caption(rows: Sequence[Result]) -> str:
    """Where a group ran: host (device) pairs and their roofs, measured or from a datasheet; then where its timing
    comes from."""
    parts = []
    machine = lambda r: (r.host, r.device)  # noqa: E731
    for (host, device), machine_rows in groupby(sorted(rows, key=machine), key=machine):
        text = f"{host} ({device})" if device else host
        roofs: dict[str, tuple[float, float]] = {}
        for r in machine_rows:
            if r.peak_gflops and r.peak_gbps:
                source = "measured" if is_measured_roof(r.peak_source) else r.peak_source
                flops, bw = roofs.get(source, (0.0, 0.0))
                roofs[source] = (max(flops, r.peak_gflops), max(bw, r.peak_gbps))
        parts.append(text + "".join(f", {roof_text(flops, bw, source)}" for source, (flops, bw) in roofs.items()))
    return "Ran on " + "; ".join(parts) + "." + _timing_text(rows)


def shape_text(r: Result) -> str:
    """A row's problem in one phrase: 'B16 H32/8 N8192 q_len 1 d128 causal' (H/K-V heads where grouped, q_len where
    it is not N)."""
    kv = "" if r.kv_heads is None else f"/{r.kv_heads}"
    queries = "" if r.q_len is None else f" q_len {r.q_len}"
    return f"B{r.batch} H{r.heads}{kv} N{r.seq}{queries} d{r.dim} {'causal' if r.causal else 'non-causal'}"


def _target_tables(results: Iterable[Result], level: str) -> list[str]:
    """One table per (target, kernel) of `results`, each under a heading of `level` ('###') with its caption."""
    lines = []
    key = lambda r: (r.target, r.kernel)  # noqa: E731
    for (target, kernel), rows in groupby(sorted(results, key=key), key=key):
        rows = list(rows)
        lines += [f"{level} {target} / {kernel}", "", _group_caption(rows), ""]
        lines += group_table(rows) + [""]
    return lines


def tables_section(results: Sequence[Result]) -> list[str]:
    """One table per target/kernel; where rows name a workload (host.compare --workload), the tables of each
    workload under a heading naming it and its shape, in the order their rows first come (a sweep's: the order
    --workload named them, as the console prints them), then the rows without one."""
    lines = ["## Results", ""]
    by_workload: dict[str, list[Result]] = {}
    for r in results:
        by_workload.setdefault(r.workload, []).append(r)
    if not any(by_workload):
        return lines + _target_tables(results, "###")
    for name in sorted(by_workload, key=lambda name: name == ""):  # stable: first-come order, the unnamed last
        rows = by_workload[name]
        shapes = ", ".join(dict.fromkeys(shape_text(r) for r in sorted(rows, key=row_sort_key)))
        lines += [f"### Workload {_code(name)}: {shapes}" if name else "### Rows without a workload", ""]
        lines += _target_tables(rows, "####")
    return lines


def not_ok_section(results: Sequence[Result] | Digest) -> list[str]:
    """Every row that is not ok (wrong, skipped, oom, error) with its message; of a Digest past SUMMARY_ROWS, the
    first NOT_OK_LISTED of them and how many more. A wrong row keeps its figures in its group's table too."""
    lines = ["## Wrong, skipped and failed", ""]
    if isinstance(results, Digest):
        shown, total = results.first_not_ok(), results.not_ok
    else:
        shown = sorted((r for r in results if r.status != "ok"), key=not_ok_key)
        total = len(shown)
    if not shown:
        return lines + ["None: every row is ok.", ""]
    headers = ["target", "kernel", "host", "dtype", "B", "H", "N", "d", "causal", "Br×Bc", "status", "message"]
    cells = [[r.target, r.kernel, r.host, r.dtype, str(r.batch), str(r.heads), str(r.seq), str(r.dim),
              _yes_no(r.causal), tile(r), r.status, own_message(r)] for r in shown]
    extra = [("seed", 9, lambda r: str(r.seed), len({r.seed for r in shown}) > 1),
             ("q_len", 7, lambda r: str(r.q_len or r.seq), any(r.q_len is not None for r in shown)),
             ("K/V heads", 6, lambda r: str(r.kv_heads or r.heads), any(r.kv_heads is not None for r in shown)),
             ("workload", 0, lambda r: r.workload, any(r.workload for r in shown))]
    for header, at, cell, applies in extra:  # from the right, so each position is the plain table's
        if applies:
            headers.insert(at, header)
            for r, row in zip(shown, cells):
                row.insert(at, cell(r))
    lines += markdown_table(headers, cells) + [""]
    if total > len(shown):
        lines += [f"The first {len(shown)} of {total} such rows; every row is in {RESULTS_CSV}.", ""]
    return lines


def _span(span: list[int]) -> str:
    return fmt_num(span[0]) if span[0] == span[1] else f"{fmt_num(span[0])}–{fmt_num(span[1])}"


def summary_section(digest: Digest) -> list[str]:
    """Above SUMMARY_ROWS rows, instead of one table per target/kernel with every row: one table with a line per
    target/kernel/dtype (of each workload, in a first column where rows name one): its rows by status, its hosts, the
    ranges of N, d and H, the best and median GFLOP/s of its ok rows and its worst errors (digest.Group). Nothing is
    written per row."""
    groups = digest.groups
    statuses = [s for s in STATUSES if any(g.statuses[s] for g in groups.values())]
    named = any(workload for workload, *_ in groups)
    headers = ((["workload"] if named else []) + ["target", "kernel", "dtype", "rows"] + statuses
               + ["hosts", "N", "d", "H", "best GFLOP/s", "median GFLOP/s", "worst rel_l2", "worst max_abs"])
    cells = []
    for (workload, target, kernel, dtype), g in sorted(groups.items(), key=lambda item: (item[0][0] == "", item[0])):
        cells.append(([workload] if named else []) + [target, kernel, dtype, str(sum(g.statuses.values()))]
                     + [str(g.statuses[s]) for s in statuses]
                     + [str(len(g.hosts)), _span(g.seq), _span(g.dim), _span(g.heads),
                        fmt_num(max(g.gflops)) if g.gflops else "",
                        fmt_num(statistics.median(g.gflops)) if g.gflops else "",
                        fmt_sci(g.rel_l2), fmt_sci(g.max_abs)])
    return (["## Results (summary)", "",
             f"{digest.count} rows, more than {SUMMARY_ROWS}: each target/kernel/dtype is summarised in one line "
             f"instead of a table of every row. The full rows are in {RESULTS_CSV}.", ""]
            + markdown_table(headers, cells) + [""])


def plots_section(drawn: Sequence[Drawn], summarised: bool = False) -> list[str]:
    """Embed each drawn plot with a relative link; for a plot not drawn, say why. Above SUMMARY_ROWS rows, say what a
    point stands for."""
    lines = ["## Plots", ""]
    if summarised:
        lines += [f"With more than {SUMMARY_ROWS} rows, each point is the median of a configuration's rows at one N "
                  "(the worst of their errors); each plot's title says so.", ""]
    for plot in drawn:
        if plot.why_not is None:
            lines += [f"![{plot.title}]({plot.name})", ""]
        else:
            lines += [f"{plot.name} not drawn: {plot.why_not}.", ""]
    return lines


def markdown(results: Iterable[Result] | Digest, runs: Sequence[RunInfo], drawn: Sequence[Drawn],
             skipped_runs: Sequence[str] = ()) -> str:
    """The whole of results.md, from the rows or their Digest (one pass either way); `skipped_runs` says which lines
    of runs.jsonl are not runs, and why. Above SUMMARY_ROWS rows it summarises (summary_section, the first
    NOT_OK_LISTED rows that are not ok) instead of listing every row."""
    digest = results if isinstance(results, Digest) else Digest.of(results)
    lines = ["# kbench results", "", headline(digest, runs), ""]
    lines += runs_section(runs, digest, skipped_runs)
    lines += unavailable_section(runs)
    if digest.summarised:
        lines += summary_section(digest)
        lines += not_ok_section(digest)
    else:
        lines += tables_section(digest.rows)
        lines += not_ok_section(digest.rows)
    lines += plots_section(drawn, digest.summarised)
    return "\n".join(lines).rstrip() + "\n"
