"""The console's account of a sweep (host.compare): this run's rows as a short table, each named workload's rows
under a line naming it, the notes every row of a target/kernel shares said once, the unavailable targets, and the
report rendered from the files (host/report), whose outputs it names.
"""

from __future__ import annotations

import argparse
import sys

from host.errors import KbenchError
from host.results import STATUSES, Result


def summarize_run(args: argparse.Namespace, written: list[Result], unavailable: dict[str, str], kept: int) -> bool:
    """Print this run's rows as a short table (none when it wrote no row), the rows of each named workload under a
    line naming it (as results.md groups them), each target/kernel's notes that every one of its rows carries once
    below it, the unavailable targets, and where the report is; False when the report could not be written whole (the
    rows are in results.csv all the same)."""
    from host.report.common import NOTE_SEPARATOR, own_message, shared_notes
    from host.report.render import ReportIncomplete, render

    groups: dict[str, list[Result]] = {}
    for row in written:
        groups.setdefault(f"{row.target}/{row.kernel}", []).append(row)
    shared = {name: shared_notes(rows) for name, rows in groups.items()}
    width = max([16] + [len(name) for name in groups])
    workers = max([0] + [len(row.worker) for row in written])  # a cluster sweep's rows say where they ran
    where = lambda text: f" {text:<{workers}}" if workers else ""  # noqa: E731
    grouped = any(row.kv_heads is not None for row in written)  # a K/V heads column only where a row has fewer
    queries = any(row.q_len is not None for row in written)  # a q_len column only where a row is not square
    if written:
        print(f"{'target/kernel':<{width}} {'dtype':<8} {'B':>3} {'H':>4}{' Hkv' if grouped else ''} {'N':>6}"
              f"{'  q_len' if queries else ''} {'d':>4} {'causal':>6} "
              f"{'p50 ms':>10} {'GFLOP/s':>9} {'rel_l2':>9}{where('worker')}  status")
    order: dict[str, int] = {}  # each workload where its first row was written ("": the shape options)
    for row in written:
        order.setdefault(row.workload, len(order))
    heading = None
    for row in sorted(written, key=lambda r: order[r.workload]):  # stable: each workload's rows in written order
        if row.workload != heading and (row.workload or heading is not None):
            print(f"workload {row.workload}:" if row.workload else "without a workload:")
        heading = row.workload
        name = f"{row.target}/{row.kernel}"
        fmt = lambda x, f, w: f"{'-':>{w}}" if x is None else format(x, f"{w}{f}")  # noqa: E731
        message = own_message(row, shared[name])
        kv = f" {row.kv_heads or row.heads:>3}" if grouped else ""
        q_len = f" {row.q_len or row.seq:>6}" if queries else ""
        print(f"{name:<{width}} {row.dtype:<8} {row.batch:>3} {row.heads:>4}{kv} {row.seq:>6}{q_len} {row.dim:>4} "
              f"{int(row.causal):>6} {fmt(row.p50_ms, '.4g', 10)} {fmt(row.gflops, '.4g', 9)} "
              f"{fmt(row.rel_l2, '.2e', 9)}{where(row.worker)}  {row.status}{': ' + message if message else ''}")
    for name, notes in shared.items():
        if notes:
            print(f"{name}, every row: {NOTE_SEPARATOR.join(notes)}")
    for name, reason in unavailable.items():
        print(f"unavailable: {name}: {reason}")
    counts = ", ".join(f"{sum(r.status == status for r in written)} {status}" for status in STATUSES
                       if any(r.status == status for r in written))
    print(f"{len(written)} rows written ({counts or 'none'}), {kept} of this sweep's rows already done before")
    try:
        paths = render(args.out)
    except ReportIncomplete as exc:  # a full disk: the rows are in results.csv; some outputs are missing
        for line in exc.lines:
            print(f"kbench: {line}", file=sys.stderr)
        print("report incomplete; written: " + ", ".join(str(path) for path in exc.written or ["nothing"]))
        return False
    except KbenchError as exc:
        print(f"kbench: report not rendered: {exc}", file=sys.stderr)
        return False
    print("report: " + ", ".join(str(path) for path in paths))
    return True
