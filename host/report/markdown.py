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
Layer L3: it imports only host.results, host.run_log and host.report's own modules (the tables' columns in
host/report/columns.py), and reads nothing itself.
"""

from __future__ import annotations

import json
import statistics
from itertools import groupby
from typing import Iterable, NamedTuple, Sequence

from host.report.common import (RESULTS_CSV, RUNS_JSONL, SUMMARY_ROWS, fmt_num,
                                fmt_sci, is_measured_roof, own_message, roof_text, tile)
from host.report.columns import code_span, group_table, markdown_table, md_cell, yes_no
from host.report.digest import Digest, not_ok_key, row_sort_key
from host.results import STATUSES, Result
from host.run_log import RunInfo

#: How many runs the Runs section lists, and how many runs a 'targets not run' reason names; the rest are counted.
RUNS_LISTED = 100
RUNS_PER_REASON = 5
#: How many distinct seeds the headline lists.
SEEDS_LISTED = 8
#: How many of the runs.jsonl lines that are not runs the Runs section names, with why.
SKIPPED_LISTED = 10


class Drawn(NamedTuple):
    """A plot file, its title, and why it was not drawn (None when it was)."""

    name: str
    title: str
    why_not: str | None


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
    if digest.torn_line:
        text += (f" results.csv's last line ({digest.torn_line}) is a torn row (a writer killed mid-row) and is not "
                 "counted; `host.compare --resume` measures it again.")
    if digest.replaced:
        text += (f" {digest.replaced} earlier failed or skipped row(s) that a later run measured again on the same "
                 "host and device are left out (results.csv still holds them).")
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
        lines.append(f"- **{run.run_id}** — {run.timestamp}, host {code_span(run.host)}, git {code_span(run.git_rev)}, "
                     f"{counts[run.run_id]} rows" + (" (measured nothing)" if not counts[run.run_id] else ""))
        lines.append(f"  - command: {code_span(run.command)}")
        if run.machine:
            lines.append(f"  - machine: {code_span(_machine_text(run.machine))}")
        if run.unavailable:
            lines.append(f"  - targets not run: {', '.join(map(code_span, sorted(run.unavailable)))}")
    shown = set(unknown[:max(RUNS_LISTED - listed, 0)])
    for run_id in sorted(shown):  # runs that runs.jsonl does not describe, known by their first row
        timestamp, host, git_rev = digest.run_first[run_id]
        lines.append(f"- **{run_id}** — {timestamp}, host {code_span(host)}, git {code_span(git_rev)}, "
                     f"{counts[run_id]} rows (no entry in {RUNS_JSONL}: command and machine unknown)")
    more = len(runs) + len(unknown) - listed - len(shown)
    if more:
        lines.append(f"- and {more} more run(s): each in {RUNS_JSONL}, and by its run_id in {RESULTS_CSV}")
    if skipped:
        lines += ["", f"{len(skipped)} line(s) of {RUNS_JSONL} are not runs and were skipped:"]
        lines += [f"- {md_cell(why)}" for why in skipped[:SKIPPED_LISTED]]
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
        lines += [f"### Workload {code_span(name)}: {shapes}" if name else "### Rows without a workload", ""]
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
              yes_no(r.causal), tile(r), r.status, own_message(r)] for r in shown]
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
