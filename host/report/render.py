"""Turn an output folder's result files into results.md and PNG plots, reading nothing but those files.

`render(out_dir)` reads results.csv (every target's rows, possibly merged from several runs on several machines:
a GPU box, a lab bench) and runs.jsonl (one line per run: command, machine, the targets it could not use), draws
the plots (host/report/plots.py: latency, error, roofline) and writes results.md beside them
(host/report/markdown.py). A plot without data is not drawn; results.md says why. A runs.jsonl line that is not a
run of the right field types is skipped, and results.md says which and why (host/run_log.py read_run_log).
``python -m host.report OUT_DIR`` does the same from a shell.
Every output is written to a temporary file beside it and renamed over the old one, each tried on its own: one that
cannot be written (a full disk) leaves its previous copy, is named on stderr in one line (`kbench: report: could not
write OUT/latency_vs_seq.png: No space left on device`) and the others are still written.
Exit status: 0 rendered; 1 an output that could not be written; 2 bad arguments only (OUT_DIR empty, missing, not a
folder, without results.csv, or holding a results.csv that is not results or a runs.jsonl that is not a file); 130
interrupted (Ctrl-C).

This is layer L3: it imports only host.results, host.run_log, host.errors, host.cli_common and its own modules, never
a target.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from host.cli_common import Parser, folder, guard
from host.errors import ResultsError, SpecError
from host.report.common import RESULTS_CSV, RESULTS_MD, RUNS_JSONL
from host.report.digest import Digest
from host.report.markdown import Drawn, markdown
from host.report.outputs import os_reason, replace_file
from host.report.plot_axes import png_bytes
from host.report.plots import PLOTS, results_frame
from host.results_file import ResultsFile
from host.run_log import read_run_log

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure


def read_results(out_dir: Path) -> Digest:
    """The rows of out_dir/results.csv (any schema version host.results reads), streamed into one Digest (the rows
    kept only up to SUMMARY_ROWS); ResultsError when the folder or its rows are missing."""
    if not out_dir.is_dir():
        raise ResultsError(f"results folder {out_dir} does not exist")
    csv_path = out_dir / RESULTS_CSV
    if not csv_path.exists():
        raise ResultsError(f"{csv_path} does not exist: run `python -m host.compare --out {out_dir}` first")
    results = ResultsFile(csv_path)
    try:
        digest = Digest.of(results.rows)  # read again only where a later run replaced a row
        digest.torn_line = results.torn_line  # a writer killed mid-row: said in the headline, not dropped unseen
    except ResultsError as exc:  # results.csv is there but is not results: what to do about it, for this tool
        raise ResultsError(f"{exc}; move it aside, or render a folder holding kbench results") from None
    if not digest.count:
        raise ResultsError(f"{csv_path} has no result rows")
    return digest


class ReportIncomplete(ResultsError):
    """Some outputs of the report could not be written (a full disk, a read-only file, a folder in the way); the
    others were. `written` are the paths written, `failed` (path, the OS's reason) the others; `lines` says each
    failure in one line."""

    def __init__(self, written: list[Path], failed: list[tuple[Path, str]]):
        self.written = written
        self.failed = failed
        super().__init__("; ".join(self.lines))

    @property
    def lines(self) -> list[str]:
        return [f"report: could not write {path}: {why}" for path, why in self.failed]


def render(out_dir: Path, digest: Digest | None = None) -> list[Path]:
    """Write results.md and the plots into out_dir from its results.csv and runs.jsonl; return the written paths.

    Each output is written whole or not at all (host/report/outputs.py), and each is tried whatever became of the
    others: when any could not be written, ReportIncomplete names them after the others are written (results.md
    says which plots are missing and why). results.csv and runs.jsonl are only read."""
    out_dir = Path(out_dir)
    digest = read_results(out_dir) if digest is None else digest  # main() has read it already
    log = read_run_log(out_dir / RUNS_JSONL)
    frame = results_frame(digest)
    written: list[Path] = []
    failed: list[tuple[Path, str]] = []
    drawn = []
    for name, (title, plot) in PLOTS.items():
        path = out_dir / name
        why_not, png = _draw(plot, frame)
        if png is None:
            try:
                path.unlink(missing_ok=True)  # a stale plot from an earlier render would mislead
            except OSError as exc:
                failed.append((path, f"a stale copy could not be removed: {os_reason(exc)}"))
        else:
            why_not = _attempt(path, png, written, failed)
        drawn.append(Drawn(name, title, why_not))
    text = markdown(digest, log.runs, drawn, log.skipped)
    md_path = out_dir / RESULTS_MD
    _attempt(md_path, text.encode("utf-8"), written, failed)
    written.sort(key=lambda path: path != md_path)  # results.md first, then the plots in PLOTS order
    if failed:
        raise ReportIncomplete(written, failed)
    return written


def _draw(plot: Callable[[pd.DataFrame], "Figure | str"], frame: pd.DataFrame) -> tuple[str | None, bytes | None]:
    """(None, the PNG) when the plot drew, else (why not, None). Figures at the ends of the float range (1e308, a
    ratio of them that overflows) draw without numpy's overflow warnings; should matplotlib still refuse them (a
    ValueError or OverflowError from its scales), the plot is not drawn and results.md says why."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            figure = plot(frame)
            if isinstance(figure, str):
                return figure, None
            return None, png_bytes(figure)
        except (ValueError, OverflowError) as exc:
            return f"matplotlib could not draw these figures ({type(exc).__name__}: {str(exc)[:120]})", None


def _attempt(path: Path, data: bytes, written: list[Path], failed: list[tuple[Path, str]]) -> str | None:
    """Write one output (outputs.replace_file); None when it was written, else why not (also added to `failed`)."""
    try:
        replace_file(path, data)
    except OSError as exc:
        failed.append((path, os_reason(exc)))
        return f"could not be written ({os_reason(exc)})"
    written.append(path)
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m host.report", doc=__doc__)
    parser.add_argument("out_dir", type=folder, metavar="OUT_DIR",
                        help="folder holding results.csv (and runs.jsonl); results.md and the plots are written there")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The folder named on the command line is an argument: missing, without results.csv, or holding a results.csv
    that is not results (or a runs.jsonl that is not a file) it exits 2; an output that could not be written exits
    1, after the others are written: one line on stderr each."""
    def body() -> int:
        out_dir = build_parser().parse_args(argv).out_dir
        if not out_dir.is_dir():
            raise SpecError(f"OUT_DIR {out_dir} is not a folder; allowed: a folder holding results.csv")
        if (out_dir / RESULTS_CSV).exists() and not (out_dir / RESULTS_CSV).is_file():
            raise SpecError(f"OUT_DIR {out_dir}: its {RESULTS_CSV} is not a file (a folder, a FIFO?); allowed: the "
                            "results.csv host.compare writes")
        if not (out_dir / RESULTS_CSV).is_file():
            raise SpecError(f"OUT_DIR {out_dir} holds no {RESULTS_CSV}: run `python -m host.compare --out "
                            f"{out_dir}` first")
        try:  # the folder named on the command line holds no results this kbench reads: a bad argument
            digest = read_results(out_dir)
            read_run_log(out_dir / RUNS_JSONL)
        except ResultsError as exc:
            raise SpecError(f"OUT_DIR {out_dir}: {exc}") from None
        try:
            paths = render(out_dir, digest)
        except ReportIncomplete as exc:
            for path in exc.written:
                print(path)
            for line in exc.lines:
                print(f"kbench: {line}", file=sys.stderr)
            return 1
        for path in paths:
            print(path)
        return 0

    return guard(body)

