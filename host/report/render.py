"""Turn an output folder's result files into results.md and PNG plots, reading nothing but those files.

`render(out_dir)` reads results.csv (every target's rows, possibly merged from several runs on several machines:
a GPU box, a lab bench) and runs.jsonl (one line per run: command, machine, the targets it could not use), draws
the plots (host/report/plots.py: latency, error, roofline) and writes results.md beside them
(host/report/markdown.py). A plot without data is not drawn; results.md says why. A runs.jsonl line that is not a
run of the right field types is skipped, and results.md says which and why (host/run_log.py read_run_log).
``python -m host.report OUT_DIR`` does the same from a shell.
Exit status: 0 rendered; 1 a results file that cannot be read as results, or a report that cannot be written;
2 bad arguments only (OUT_DIR empty, missing, not a folder, or without results.csv); 130 interrupted (Ctrl-C).

This is layer L3: it imports only host.results, host.errors, host.cli_common and its own modules, never a target.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

from host.cli_common import Parser, folder, guard
from host.errors import ResultsError, SpecError
from host.report.common import RESULTS_CSV, RESULTS_MD, RUNS_JSONL
from host.report.markdown import Drawn, markdown
from host.report.plots import PLOTS, results_frame
from host.results import Result, ResultsFile
from host.run_log import read_run_log


def read_results(out_dir: Path) -> list[Result]:
    """Every row of out_dir/results.csv (any schema version host.results reads); ResultsError when the folder or its
    rows are missing."""
    if not out_dir.is_dir():
        raise ResultsError(f"results folder {out_dir} does not exist")
    csv_path = out_dir / RESULTS_CSV
    if not csv_path.exists():
        raise ResultsError(f"{csv_path} does not exist: run `python -m host.compare --out {out_dir}` first")
    try:
        results = ResultsFile(csv_path).read()
    except ResultsError as exc:  # results.csv is there but is not results: what to do about it, for this tool
        raise ResultsError(f"{exc}; move it aside, or render a folder holding kbench results") from None
    if not results:
        raise ResultsError(f"{csv_path} has no result rows")
    return results


def render(out_dir: Path) -> list[Path]:
    """Write results.md and the plots into out_dir from its results.csv and runs.jsonl; return the written paths."""
    out_dir = Path(out_dir)
    results = read_results(out_dir)
    log = read_run_log(out_dir / RUNS_JSONL)
    frame = results_frame(results)
    drawn = []
    for name, (title, plot) in PLOTS.items():
        drawn.append(Drawn(name, title, plot(frame, out_dir / name)))
        if drawn[-1].why_not is not None:
            (out_dir / name).unlink(missing_ok=True)  # a stale plot from an earlier render would mislead
    md_path = out_dir / RESULTS_MD
    md_path.write_text(markdown(results, log.runs, drawn, log.skipped), encoding="utf-8")
    return [md_path] + [out_dir / plot.name for plot in drawn if plot.why_not is None]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m host.report", doc=__doc__)
    parser.add_argument("out_dir", type=folder, metavar="OUT_DIR",
                        help="folder holding results.csv (and runs.jsonl); results.md and the plots are written there")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The folder named on the command line is an argument: missing, or without results.csv, it exits 2; a results
    file that turns out unreadable, or a report that cannot be written, exits 1."""
    def body() -> int:
        out_dir = build_parser().parse_args(argv).out_dir
        if not out_dir.is_dir():
            raise SpecError(f"OUT_DIR {out_dir} is not a folder; allowed: a folder holding results.csv")
        if not (out_dir / RESULTS_CSV).is_file():
            raise SpecError(f"OUT_DIR {out_dir} holds no {RESULTS_CSV}: run `python -m host.compare --out "
                            f"{out_dir}` first")
        try:
            paths = render(out_dir)
        except OSError as exc:
            raise ResultsError(f"cannot write the report: {exc}") from None
        for path in paths:
            print(path)
        return 0

    return guard(body)

