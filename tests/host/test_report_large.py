"""results.md of a large results.csv (issue 28: a million rows made a 179 MB results.md): above SUMMARY_ROWS rows
it summarises each target/kernel/dtype (rows by status, ranges of N, d and H, best and median GFLOP/s, worst errors),
lists the first NOT_OK_LISTED rows that are not ok with a count of the rest, and says the full rows are in
results.csv; the plots draw one point per configuration and N (seq binned when there are many) and say so. At or
below the threshold results.md lists every row as before."""

from __future__ import annotations

import csv
from pathlib import Path

from host.report.common import SUMMARY_ROWS
from host.report.digest import NOT_OK_LISTED
from host.report.markdown import RUNS_LISTED, markdown
from host.report.plots import SEQ_BINS, results_frame
from host.report.render import render
from host.results import FIELD_NAMES
from test_report import GPU_RUN, cpu_rows, gpu_rows, mcu_rows, sections, table, wrong_row

BASES = [cpu_rows()[0], gpu_rows()[0], wrong_row(), mcu_rows()[0], gpu_rows()[-1]]  # ok, ok, wrong, ok, oom


def many(count: int, seqs: int = 97) -> list:
    """`count` rows cycling through five kinds (3 ok, 1 wrong, 1 oom), over `seqs` sequence lengths, 10 runs, each
    row its own configuration (its own seed: a failed row a later row of its configuration measured again would be
    left out of the report)."""
    return [BASES[i % 5].replace(seq=1 + i % seqs, run_id=f"run-{i % 10}", seed=i // 5) for i in range(count)]


def write_csv(out: Path, rows: list) -> Path:
    """results.csv written in one go (an append per row would fsync thousands of times)."""
    with (out / "results.csv").open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELD_NAMES, lineterminator="\n")
        writer.writeheader()
        writer.writerows(r.to_row() for r in rows)
    GPU_RUN.append_to(out / "runs.jsonl")
    return out


def test_above_the_threshold_results_md_summarises(tmp_path: Path):
    rows = many(SUMMARY_ROWS + 5)
    render(write_csv(tmp_path, rows))
    md = (tmp_path / "results.md").read_text()
    assert "### " not in md, "no table of every row"
    summary = sections(md, "## ")["Results (summary)"]
    assert f"{SUMMARY_ROWS + 5} rows, more than {SUMMARY_ROWS}" in summary and "full rows are in results.csv" in summary
    headers, cells = table(summary)
    assert headers == ["target", "kernel", "dtype", "rows", "ok", "wrong", "oom", "hosts", "N", "d", "H",
                       "best GFLOP/s", "median GFLOP/s", "worst rel_l2", "worst max_abs"]
    by_kernel = {(row[0], row[1]): dict(zip(headers, row)) for row in cells}
    flash = by_kernel[("gpu", "flash")]  # the ok flash rows (gflops 2560) and the oom ones
    assert flash["rows"] == str(2 * 401) and flash["ok"] == "401" and flash["oom"] == "401"
    assert flash["N"] == "1–97" and flash["d"] == "59" and flash["best GFLOP/s"] == "2560"
    fused = by_kernel[("gpu", "fused")]
    assert fused["wrong"] == "401" and fused["best GFLOP/s"] == "" and fused["worst rel_l2"] == "3.10e-2"
    failed = sections(md, "## ")["Wrong, skipped and failed"]
    assert len(table(failed)[1]) == NOT_OK_LISTED
    assert f"The first {NOT_OK_LISTED} of {2 * 401} such rows; every row is in results.csv." in failed
    assert "each point is the median of a configuration's rows at one N" in md
    assert len(md) < 20_000


def test_at_the_threshold_results_md_lists_every_row():
    md = markdown(many(SUMMARY_ROWS), [GPU_RUN], [])
    assert "Results (summary)" not in md and "such rows" not in md
    assert len(table(sections(md, "### ")["gpu / fused"])[1]) == SUMMARY_ROWS // 5


def test_large_plots_draw_one_point_per_configuration_and_n_and_say_so():
    frame = results_frame(many(SUMMARY_ROWS + 5))
    assert frame.attrs["note"].startswith(f"{SUMMARY_ROWS + 5:,} rows: each point the median")
    assert len(frame) == 4 * 97, "ok and wrong rows of 4 configurations at 97 lengths; oom rows are not plotted"
    binned = results_frame(many(SUMMARY_ROWS * 3, seqs=SUMMARY_ROWS * 3))
    assert "1/8-octave bins" in binned.attrs["note"] and binned.seq.nunique() < SEQ_BINS
    assert "note" not in results_frame(many(SUMMARY_ROWS)).attrs


def test_the_runs_section_lists_the_first_runs_and_counts_the_rest():
    rows = [BASES[0].replace(run_id=f"run-{i:04d}") for i in range(RUNS_LISTED + 30)]
    runs = sections(markdown(rows, [GPU_RUN], []), "## ")["Runs"]
    assert runs.count("- **") == RUNS_LISTED
    assert f"- and {30 + 1} more run(s): each in runs.jsonl, and by its run_id in results.csv" in runs
