"""Open a sweep's output folder: afresh (earlier files kept aside, never overwritten) or, with ``--resume``, by one
streamed pass over results.csv that finds which planned configurations are done, and which failed, wrong or skipped
rows a newer measurement replaces (host/results.py REMEASURED_STATUSES: a skipped row's reason may no longer hold, a
target having gained the shape or a device the dtype, so it is measured again too).

A failed, wrong or skipped row is dropped only once its new row is on disk: rows already superseded in the file when
the sweep starts, and those this sweep measures again, go in one crash-safe rewrite when the sweep ends (or stops:
Ctrl-C, SIGTERM); a sweep killed outright leaves both rows, and the next resume drops the old one. The pass keeps only
what it needs (the planned keys, the positions of the rows to measure again), so a resume of a million-row file holds
kilobytes, not the rows.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from host.q15 import NUMERICS
from host.results import REMEASURED_STATUSES, Result, untiled_key
from host.results_file import ResultsFile
from host.safe_files import keep_aside, remove_leftovers

#: What host.compare renders from results.csv as a sweep ends (host/report/render.py: results.md, then PLOTS): a
#: fresh sweep keeps the previous one aside with its rows, so a sweep stopped before it renders leaves no report of
#: rows that are no longer in results.csv.
REPORT_FILES = ("results.md", "latency_vs_seq.png", "error.png", "roofline.png")
#: The files whose killed rewrites leave a '.NAME.<random>.tmp' beside them: results.csv and the report's outputs.
LEFTOVERS = ("results.csv", *REPORT_FILES)


@dataclass
class OpenOut:
    """results.csv opened for a sweep: what is done, and which failed, wrong or skipped rows wait for their
    replacement."""

    results: ResultsFile
    done: set[tuple] = field(default_factory=set)  # untiled keys of planned configurations finished here before
    rows_before: int = 0
    _stale: set[int] = field(default_factory=set)  # ordinals of rows to measure again a later row replaces
    _failed: dict[tuple, list[int]] = field(default_factory=dict)  # the other such rows' ordinals, by key

    def drop_superseded(self, written: Iterable[Result]) -> int:
        """Drop, in one crash-safe rewrite, the failed, wrong or skipped rows that a later row replaces: those the file
        held already, and those of the configurations measured now (`written`, on disk). The number dropped."""
        ordinals = set(self._stale)
        for row in written:
            ordinals.update(self._failed.pop(untiled_key(row), ()))
        self._stale.clear()
        if ordinals:
            self.results.drop(ordinals)
        return len(ordinals)


def open_out(out: Path, resume: bool, planned: set[tuple] = frozenset(),
             devices: dict[str, str] | None = None) -> OpenOut:
    """Open OUT/results.csv for a sweep of the `planned` (untiled) keys. Without resume, start afresh, keeping the
    previous results.csv, runs.jsonl and report (REPORT_FILES) aside (results.csv.prev, then .prev.1, .prev.2, ...:
    never over an earlier copy). With resume, read the file once: a finished row counts as done only where its
    target's device is the one `devices` names for it now (a sweep resumed on a real GPU measures again what a fake
    GPU or another machine measured; those rows stay beside the new ones) and, for a Q15 row, where it was computed
    under this kbench's numeric contract (host/q15.py NUMERICS; kept likewise); failed, wrong and skipped rows are
    measured again. A torn last row is cut; a file that is not results is a ResultsError before anything in it
    changes."""
    out.mkdir(parents=True, exist_ok=True)
    remove_leftovers(out, LEFTOVERS)  # of a sweep or report killed mid-rewrite: the caller holds OUT's lock
    results = ResultsFile(out / "results.csv")
    opened = OpenOut(results)
    if not resume:
        keep_aside(*(out / name for name in ("results.csv", "runs.jsonl", *REPORT_FILES)))  # one number for all
        return opened
    devices = devices or {}
    elsewhere: dict[str, int] = {}  # "target on device" → finished planned rows measured there, not here
    other_numerics: dict[str, int] = {}  # a Q15 row's numerics (empty: contract v1) → finished planned rows
    for ordinal, row in enumerate(results.rows()):
        key = untiled_key(row)
        opened._stale.update(opened._failed.pop(key, ()))  # a row to measure again that this later row replaces
        if row.status in REMEASURED_STATUSES:
            opened._failed[key] = [ordinal]
        elif key in planned:
            if row.dtype == "q15" and row.numerics != NUMERICS:
                contract = row.numerics or "q15 v1"  # schema 4 and older: contract v1's rows
                other_numerics[contract] = other_numerics.get(contract, 0) + 1
            elif row.target in devices and row.device != devices[row.target]:
                where = f"{row.target} on {row.device or '?'}"
                elsewhere[where] = elsewhere.get(where, 0) + 1
            else:
                opened.done.add(key)
        opened.rows_before = ordinal + 1
    if results.torn_line:
        print(f"kbench: {results.path}:{results.torn_line}: a torn last row (a writer killed mid-row) is dropped and "
              "measured again", file=sys.stderr)
    results.repair()
    if elsewhere:
        print(f"kbench: {sum(elsewhere.values())} finished rows in {results.path} were measured on another device "
              f"({'; '.join(sorted(elsewhere))}): kept, and measured again here", file=sys.stderr)
    if other_numerics:
        print(f"kbench: {sum(other_numerics.values())} finished Q15 rows in {results.path} were computed under "
              f"another numeric contract ({'; '.join(sorted(other_numerics))}; this kbench computes {NUMERICS}): "
              "kept, and measured again", file=sys.stderr)
    return opened
