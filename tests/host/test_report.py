"""host.report: results.md tables per (target, kernel), the runs and the targets not run, the wrong/skipped/failed
list, the labels of simulated and modelled figures (counters, sensors, timing), the plots' series and roofs, old
schema files, and the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import csv
import dataclasses
import json
import os
import re

import matplotlib.image
import pytest

from host.errors import ResultsError
from host.report.render import render
from host.report.plot_axes import DPI, seq_ticks
from host.report.plots import results_frame, roof_styles, roofline_data, same_errors_merged, series, shared_text
from host.results import ADDED_COLUMNS, Result
from host.results_file import ResultsFile
from host.run_log import RunInfo

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PERF_REASON = "perf_event_open: not supported on this machine"

GPU_RUN = RunInfo(run_id="gpu-1", timestamp="2026-12-01T10:00:00Z", command="python -m host.compare --seq 128 256",
                  git_rev="abc1234", host="gpubox",
                  machine={"gpu": "NVIDIA H200", "sms": 132, "driver": {"cuda": "12.4"}})
NO_CUPY = "CuPy is not installed (pip install cupy-cuda12x)"
BENCH_RUN = RunInfo(run_id="bench-1", timestamp="2026-12-02T09:30:00Z",
                    command="python -m host.compare --sim", git_rev="abc1234", host="labpc",
                    machine={"board": "STM32F407", "clock_hz": 168000000}, unavailable={"gpu": NO_CUPY})
#: A --resume that found nothing left to measure (written by kbench before it stopped recording such runs).
EMPTY_RUN = RunInfo(run_id="bench-2", timestamp="2026-12-02T10:00:00Z", command="python -m host.compare --sim --resume",
                    git_rev="abc1234", host="labpc", unavailable={"gpu": NO_CUPY})
M4_ROOF = "datasheet: Cortex-M4 SMLALD 2 MAC/cycle, SRAM 4 B/cycle"
WRONG = "rel_l2 3.10e-02 exceeds the tolerance 2.40e-06 (fp32, d=59, N=256)"
WALL = "measured: wall clock, perf_counter_ns"
EVENTS = "measured: CUDA events, L2 flushed before each call"
TWIN = "modelled: board twin's cycle model"


def _row(run: RunInfo, device: str, target: str, kernel: str, seq: int, **extra) -> Result:
    base = dict(run_id=run.run_id, timestamp=run.timestamp, git_rev=run.git_rev, host=run.host, device=device,
                target=target, kernel=kernel, dtype="float32", batch=1, heads=2, seq=seq, dim=59, causal=False, seed=0)
    return Result(**(base | extra))


def _timed(p50: float, source: str) -> dict:
    return dict(mean_ms=p50 * 1.05, p50_ms=p50, p99_ms=p50 * 1.4, min_ms=p50 * 0.9, p50_ci_low_ms=p50 * 0.97,
                p50_ci_high_ms=p50 * 1.04, iters=50, warmup=5, timing_source=source)


def cpu_rows() -> list[Result]:
    """Two groups: counters missing for one shared reason, and cachegrind-simulated counters."""
    rows = [_row(GPU_RUN, "Xeon", "cpu", "reference", seq, **_timed(0.01 * seq, WALL), gflops=3.0 + seq / 100,
                 gbps=1.5, max_abs=2e-7, rel_l2=1.1e-7, counters_reason=PERF_REASON) for seq in (97, 17, 1025)]
    rows.append(_row(GPU_RUN, "Xeon", "cpu", "naive", 64, **_timed(0.5, WALL), gflops=2.0, max_abs=3e-7, rel_l2=2e-7,
                     llc_loads=120_000, llc_misses=30_000, instructions=9_876_543, cpu_cycles=4_000_000, ipc=2.47,
                     counters_source="simulated (cachegrind)"))
    return rows


def gpu_rows(peaks: bool = True) -> list[Result]:
    ceilings = dict(peak_gflops=60_000.0, peak_gbps=4_200.0) if peaks else {}
    rows = [_row(GPU_RUN, "NVIDIA H200", "gpu", "flash", seq, br=br, bc=64, **_timed(1e-5 * seq, EVENTS),
                 gflops=seq * 10.0, gbps=seq * 2.0, model_bytes=seq * 4096, max_abs=4e-6, rel_l2=3e-6, **ceilings)
            for seq in (256, 1024) for br in (32, 64)]
    rows.append(_row(GPU_RUN, "NVIDIA H200", "gpu", "flash", 1 << 20, br=64, bc=64, status="oom",
                     message="out of memory: 96 GiB requested"))
    return rows


def wrong_row() -> Result:
    """A kernel outside its tolerance: status wrong, its figures kept."""
    return _row(GPU_RUN, "NVIDIA H200", "gpu", "fused", 256, **_timed(3e-3, EVENTS), gflops=2000.0, gbps=500.0,
                max_abs=0.2, rel_l2=3.1e-2, peak_gflops=60_000.0, peak_gbps=4_200.0, peak_source="measured",
                status="wrong", message=WRONG)


def mcu_rows() -> list[Result]:
    """The twin: the planner's Br follows seq, sensors and timing modelled, ceilings from the Cortex-M4's
    datasheet."""
    return [_row(BENCH_RUN, "STM32F407 (twin)", "mcu", "q15", seq, dtype="q15", br=seq, bc=32,
                 **_timed(0.2 * seq, TWIN), cycles=seq * 33_600, clock_hz=168_000_000, temp_c=26.18, vdda_v=3.311,
                 sensors_source="modelled",
                 bit_exact=True, max_abs=6e-4 * seq / 16, rel_l2=2.5e-3 * seq / 16, gflops=0.05 + seq / 1e4,
                 gbps=0.2 / seq, peak_gflops=0.672, peak_gbps=0.672, peak_source=M4_ROOF)
            for seq in (16, 32, 64)]


def write(out: Path, rows: list[Result], runs: list[RunInfo]) -> Path:
    results = ResultsFile(out / "results.csv")
    for row in rows:
        results.append(row)
    for run in runs:
        run.append_to(out / "runs.jsonl")
    return out


def sections(md: str, level: str) -> dict[str, str]:
    """Heading text → the body under it, for headings of one level ('## ' or '### ')."""
    depth = len(level) - 1
    out, name = {}, None
    for line in md.splitlines():
        hashes = len(line) - len(line.lstrip("#")) if line.startswith("#") else 0
        if hashes == depth:
            name = line[len(level):].strip()
            out[name] = ""
        elif 0 < hashes < depth:
            name = None
        elif name is not None:
            out[name] += line + "\n"
    return out


def table(body: str) -> tuple[list[str], list[list[str]]]:
    """The first Markdown table in body: its headers and its data rows."""
    lines = [line for line in body.splitlines() if line.startswith("|")]
    split = lambda line: [cell.strip() for cell in line.strip("|").split(" | ")]  # noqa: E731
    return split(lines[0]), [split(line) for line in lines[2:]]


@pytest.fixture(scope="module")
def merged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GPU box's run and a lab bench's run (the twin; no CuPy there) merged into one folder, with a wrong row and
    a later run that gave no row."""
    out = tmp_path_factory.mktemp("merged")
    return write(out, cpu_rows() + gpu_rows() + [wrong_row()] + mcu_rows(), [GPU_RUN, BENCH_RUN, EMPTY_RUN])


@pytest.fixture(scope="module")
def md(merged: Path) -> str:
    """results.md of the merged folder, rendered once."""
    render(merged)
    return (merged / "results.md").read_text()


def assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == PNG_MAGIC
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100 and image.shape[2] in (3, 4)


def test_render_writes_markdown_and_every_plot(merged: Path):
    written = render(merged)
    names = [p.name for p in written]
    assert names == ["results.md", "latency_vs_seq.png", "error.png", "roofline.png"]
    for path in written[1:]:
        assert_png(path)
    md = (merged / "results.md").read_text()
    assert md.startswith("# kbench results\n")
    for name in names[1:]:
        assert f"]({name})" in md  # relative links


def test_one_table_per_target_and_kernel_with_its_rows(md: str):
    groups = sections(md, "### ")
    assert sorted(groups) == ["cpu / naive", "cpu / reference", "gpu / flash", "gpu / fused", "mcu / q15"]
    counts = {name: len(table(body)[1]) for name, body in groups.items()}
    assert counts == {"cpu / naive": 1, "cpu / reference": 3, "gpu / flash": 5, "gpu / fused": 1, "mcu / q15": 3}


def test_rows_are_sorted_by_shape_then_tile(md: str):
    headers, rows = table(sections(md, "### ")["gpu / flash"])
    n, tile = headers.index("N"), headers.index("Br×Bc")
    assert [(r[n], r[tile]) for r in rows] == [("256", "32×64"), ("256", "64×64"), ("1024", "32×64"),
                                               ("1024", "64×64"), ("1048576", "64×64")]
    ref_headers, ref_rows = table(sections(md, "### ")["cpu / reference"])
    assert [r[ref_headers.index("N")] for r in ref_rows] == ["17", "97", "1025"]


def test_columns_that_apply_to_no_row_are_dropped(md: str):
    groups = sections(md, "### ")
    cpu_headers = table(groups["cpu / reference"])[0]
    for absent in ("cycles", "clock MHz", "VDDA V", "Br×Bc", "bit_exact", "status", "message", "LLC loads",
                   "% of peak GFLOP/s", "counters"):
        assert absent not in cpu_headers
    assert {"p50 ms [95% CI]", "GFLOP/s", "max_abs", "rel_l2"} <= set(cpu_headers)
    mcu_headers = table(groups["mcu / q15"])[0]
    assert {"cycles (modelled)", "clock MHz", "temp °C (modelled)", "VDDA V (modelled)",
            "bit_exact"} <= set(mcu_headers)
    gpu_headers = table(groups["gpu / flash"])[0]
    assert {"Br×Bc", "% of peak GFLOP/s", "status", "message"} <= set(gpu_headers)
    assert not any(header.startswith("cycles") for header in gpu_headers)


def test_cells_are_formatted(md: str):
    groups = sections(md, "### ")
    headers, rows = table(groups["mcu / q15"])
    first = dict(zip(headers, rows[0]))
    assert first["p50 ms [95% CI] (modelled)"] == "3.2 [3.104, 3.328]"
    assert first["rel_l2"] == "2.50e-3" and first["max_abs"] == "6.00e-4"  # the short exponent every column uses
    assert first["clock MHz"] == "168" and first["bit_exact"] == "yes"
    assert [dict(zip(headers, row))["cycles (modelled)"] for row in rows] == ["537.6k", "1.075M", "2.15M"]
    gpu_headers, gpu_rows_ = table(groups["gpu / flash"])
    assert dict(zip(gpu_headers, gpu_rows_[0]))["% of peak GFLOP/s"] == "4.27 %"  # 2560 / 60000


def test_shared_counters_reason_is_printed_once(md: str):
    assert md.count(PERF_REASON) == 1
    assert f"Counters: not measured — {PERF_REASON}" in sections(md, "### ")["cpu / reference"]


def test_simulated_counters_are_labelled(md: str):
    headers, rows = table(sections(md, "### ")["cpu / naive"])
    assert "LLC misses (simulated)" in headers and "IPC (simulated)" in headers
    cells = dict(zip(headers, rows[0]))
    assert cells["miss ratio (simulated)"] == "25 %"
    assert cells["counters"] == "simulated (cachegrind)"


def test_mixed_counter_sources_label_each_simulated_cell(tmp_path: Path):
    simulated = cpu_rows()[-1]
    hardware = simulated.replace(seq=128, counters_source="perf_event_open")
    render(write(tmp_path, [simulated, hardware], [GPU_RUN]))
    headers, rows = table(sections((tmp_path / "results.md").read_text(), "### ")["cpu / naive"])
    loads = headers.index("LLC loads")
    assert [row[loads] for row in rows] == ["120k (simulated)", "120k"]


def test_a_group_from_several_hosts_names_them(tmp_path: Path):
    here = cpu_rows()[0]
    there = here.replace(run_id=BENCH_RUN.run_id, host=BENCH_RUN.host, timestamp=BENCH_RUN.timestamp)
    render(write(tmp_path, [here, there], [GPU_RUN, BENCH_RUN]))
    headers, rows = table(sections((tmp_path / "results.md").read_text(), "### ")["cpu / reference"])
    assert headers[0] == "run / host"
    assert sorted(row[0] for row in rows) == ["bench-1 / labpc", "gpu-1 / gpubox"]


def test_wrong_and_failed_rows_are_listed_with_their_message(md: str):
    headers, rows = table(sections(md, "## ")["Wrong, skipped and failed"])
    listed = [dict(zip(headers, row)) for row in rows]
    assert [(r["target"], r["kernel"], r["status"], r["message"]) for r in listed] == [
        ("gpu", "flash", "oom", "out of memory: 96 GiB requested"), ("gpu", "fused", "wrong", WRONG)]


def test_an_interval_of_one_sample_is_not_shown():
    """A modelled row of one call has a 'confidence interval' equal to its median: the cell shows the median alone."""
    from types import SimpleNamespace

    from host.report.common import fmt_num
    from host.report.columns import _p50_with_ci

    one = SimpleNamespace(p50_ms=0.8168, p50_ci_low_ms=0.8168, p50_ci_high_ms=0.8168)
    many = SimpleNamespace(p50_ms=3.2, p50_ci_low_ms=3.104, p50_ci_high_ms=3.328)
    assert _p50_with_ci(one, fmt_num) == "0.8168"
    assert _p50_with_ci(many, fmt_num) == "3.2 [3.104, 3.328]"


def test_a_wrong_row_keeps_its_figures_in_its_table(md: str):
    headers, rows = table(sections(md, "### ")["gpu / fused"])
    cells = dict(zip(headers, rows[0]))
    assert (cells["status"], cells["message"]) == ("wrong", WRONG)
    assert cells["p50 ms [95% CI]"].startswith("0.003 [") and cells["rel_l2"] == "3.10e-2"
    assert cells["GFLOP/s"] == "2000"


NO_RAPL = "energy: none (no RAPL: /sys/class/powercap does not exist, as off Linux or in a VM without powercap)"


def test_a_note_every_row_carries_is_said_once_under_its_table(tmp_path: Path):
    """The CPU's RAPL reason in every row's message: once under the table, not in a cell; a row's own note (here a
    noise flag) stays in its row, ok rows included; results.csv keeps every row's whole message."""
    rows = [r.replace(message=NO_RAPL) for r in cpu_rows()[:3]]
    rows[1] = rows[1].replace(message=f"noisy: p50 3.1x min (flagged from 2x); {NO_RAPL}")
    md = _rendered(tmp_path, rows, [GPU_RUN])
    body = sections(md, "### ")["cpu / reference"]
    assert md.count("no RAPL") == 1 and f"Every row: {NO_RAPL}" in body
    headers, cells = table(body)
    assert [row[headers.index("message")] for row in cells] == ["noisy: p50 3.1x min (flagged from 2x)", "", ""]
    assert [r.message for r in ResultsFile(tmp_path / "results.csv").read()].count(NO_RAPL) == 2


def test_a_status_word_is_not_repeated_in_its_message(tmp_path: Path):
    """'skipped: skipped: …' and 'wrong | wrong (Q15 contract): …' read once."""
    skipped = mcu_rows()[0].replace(target="asic", kernel="sa32", status="skipped", message="skipped: no room",
                                    **dict.fromkeys(("p50_ms", "mean_ms", "min_ms", "p99_ms", "max_abs", "rel_l2")))
    wrong = mcu_rows()[1].replace(target="asic", kernel="sa32", status="wrong", bit_exact=False,
                                  message="wrong (Q15 contract): not bit-exact (1 of 2 differ: O(0): got 1); K/V")
    md = _rendered(tmp_path, [skipped, wrong], [BENCH_RUN])
    for body in (sections(md, "### ")["asic / sa32"], sections(md, "## ")["Wrong, skipped and failed"]):
        headers, rows = table(body)
        assert [(row[headers.index("status")], row[headers.index("message")]) for row in rows] == [
            ("skipped", "no room"), ("wrong", "Q15 contract: not bit-exact (1 of 2 differ: O(0): got 1); K/V")]


def test_one_number_format_per_column(tmp_path: Path):
    """0.001423 beside 7.228e-4 in one column was two formats: a column with a figure below 1e-3 writes all its
    figures in the short scientific form; other columns stay in fixed point."""
    rows = [r.replace(energy_j=joules, energy_source="datasheet")
            for r, joules in zip(mcu_rows(), (7.228e-4, 1.423e-3, 0.02))]
    headers, cells = table(sections(_rendered(tmp_path, rows, [BENCH_RUN]), "### ")["mcu / q15"])
    assert [row[headers.index("energy J")] for row in cells] == [
        "7.228e-4 (datasheet)", "1.423e-3 (datasheet)", "2.000e-2 (datasheet)"]
    assert [row[headers.index("min ms (modelled)")] for row in cells] == ["2.88", "5.76", "11.52"]


def test_headline_counts_every_status(md: str):
    assert "13 rows (11 ok, 1 wrong, 1 oom) from" in md.splitlines()[2]


def test_a_failed_row_measured_again_later_is_left_out_and_counted(tmp_path: Path):
    """A --resume killed before it could drop the old row leaves it in results.csv: the report lists the
    configuration's row of the later run alone, says how many were left out, and keeps a failed row nothing
    replaced. Runs gpu-1, then resumes r2 and r3."""
    failed = dict(status="wrong", message=WRONG, **_timed(0.2, WALL), rel_l2=3.1e-2)
    rows = [_row(GPU_RUN, "Xeon", "cpu", "reference", 256, **failed),
            _row(GPU_RUN, "Xeon", "cpu", "reference", 97, **failed),  # never measured again: listed
            _row(GPU_RUN, "Xeon", "cpu", "reference", 256, status="skipped", message="no memory").replace(run_id="r2"),
            _row(GPU_RUN, "Xeon", "cpu", "reference", 256, **_timed(0.2, WALL), rel_l2=1e-7).replace(run_id="r3")]
    render(write(tmp_path, rows, [GPU_RUN]))
    md = (tmp_path / "results.md").read_text()
    assert md.split("\n## ")[0].count("2 rows (1 ok, 1 wrong)") == 1, md.split("\n## ")[0]
    assert "2 earlier failed or skipped row(s) that a later run measured again" in md
    _, listed = table(sections(md, "## ")["Wrong, skipped and failed"])
    assert [[c for c in cells if c in ("97", "256")] for cells in listed] == [["97"]], listed
    other = [row.replace(host="labpc") if row.run_id == "r3" else row for row in rows]
    render(write(tmp_path / "merged", other, [GPU_RUN]))  # another machine's ok row replaces nothing...
    merged = (tmp_path / "merged" / "results.md").read_text()
    assert "3 rows (1 ok, 1 wrong, 1 skipped)" in merged and " 1 earlier failed" in merged  # ...r2's skipped does


def test_a_torn_last_row_is_said_in_the_headline(tmp_path: Path):
    """A writer killed mid-row leaves a torn last line: the report counts the whole rows and says which line it did
    not count (it dropped it unseen)."""
    write(tmp_path, cpu_rows()[:2], [GPU_RUN])
    whole = (tmp_path / "results.csv").read_text().splitlines()
    (tmp_path / "results.csv").write_text("\n".join(whole) + "\n" + whole[-1][:60])  # line 4, no newline
    render(tmp_path)
    head = (tmp_path / "results.md").read_text().split("\n## ")[0]
    assert "2 rows (2 ok)" in head and "results.csv's last line (4) is a torn row" in head, head


def test_rows_of_one_run_never_replace_each_other(tmp_path: Path):
    """A tile sweep writes a row a tile of one problem in one run: a skipped or wrong cell stays listed beside the
    other tiles' ok rows (the untiled configuration is the same, the run too)."""
    cells = [_row(GPU_RUN, "NVIDIA H200", "gpu", "flash", 64, br=16, bc=128, status="skipped", message="too big"),
             _row(GPU_RUN, "NVIDIA H200", "gpu", "flash", 64, br=128, bc=16, **_timed(0.1, EVENTS), rel_l2=1e-6),
             _row(GPU_RUN, "NVIDIA H200", "gpu", "flash", 64, br=32, bc=32, status="wrong", message=WRONG,
                  **_timed(0.1, EVENTS), rel_l2=3.1e-2),
             _row(GPU_RUN, "NVIDIA H200", "gpu", "flash", 64, br=64, bc=64, **_timed(0.1, EVENTS), rel_l2=1e-6)]
    render(write(tmp_path, cells, [GPU_RUN]))
    md = (tmp_path / "results.md").read_text()
    assert "4 rows (2 ok, 1 wrong, 1 skipped)" in md and "earlier failed" not in md


def test_runs_section_lists_every_run(md: str):
    runs = sections(md, "## ")["Runs"]
    assert "**gpu-1**" in runs and "**bench-1**" in runs
    assert "`python -m host.compare --sim`" in runs
    assert 'driver={"cuda":"12.4"}; gpu=NVIDIA H200; sms=132' in runs
    assert "10 rows" in runs and "3 rows" in runs


def test_a_run_missing_from_runs_jsonl_is_still_listed(tmp_path: Path):
    render(write(tmp_path, mcu_rows(), []))
    runs = sections((tmp_path / "results.md").read_text(), "## ")["Runs"]
    assert "**bench-1**" in runs and "no entry in runs.jsonl" in runs


def test_roofline_needs_measured_peaks(tmp_path: Path):
    (tmp_path / "roofline.png").write_bytes(PNG_MAGIC)  # stale, from an earlier render
    written = render(write(tmp_path, cpu_rows() + gpu_rows(peaks=False), [GPU_RUN]))
    assert [p.name for p in written] == ["results.md", "latency_vs_seq.png", "error.png"]
    assert not (tmp_path / "roofline.png").exists()
    md = (tmp_path / "results.md").read_text()
    assert "roofline.png not drawn: no ok row carries" in md
    assert "](roofline.png)" not in md


def test_zero_errors_are_annotated_not_log_plotted(tmp_path: Path):
    rows = [r.replace(max_abs=0.0, rel_l2=0.0) for r in mcu_rows()]
    written = render(write(tmp_path, rows, [BENCH_RUN]))
    assert tmp_path / "error.png" in written
    assert_png(tmp_path / "error.png")


def test_only_failed_rows_draw_no_plot(tmp_path: Path):
    written = render(write(tmp_path, gpu_rows()[-1:], [GPU_RUN]))
    assert [p.name for p in written] == ["results.md"]
    md = (tmp_path / "results.md").read_text()
    assert "latency_vs_seq.png not drawn" in md and "error.png not drawn" in md


def test_missing_or_empty_results_raise(tmp_path: Path):
    with pytest.raises(ResultsError, match="does not exist"):
        render(tmp_path / "nowhere")
    with pytest.raises(ResultsError, match="results.csv does not exist"):
        render(tmp_path)
    (tmp_path / "results.csv").write_text("")
    with pytest.raises(ResultsError, match="no result rows"):
        render(tmp_path)


def test_runs_headline_and_runs_list_agree(md: str):
    head = re.search(r"from (\d+) run\(s\) on \d+ host\(s\)\. (\d+) more run\(s\) in runs.jsonl gave no row", md)
    assert head, md.splitlines()[2]
    entries = [line for line in sections(md, "## ")["Runs"].splitlines() if line.startswith("- **")]
    assert len(entries) == int(head[1]) + int(head[2]) == 3
    assert [line for line in entries if ", 0 rows" in line] == [line for line in entries if "**bench-2**" in line]


def test_a_run_line_written_twice_counts_once(tmp_path: Path):
    md = _rendered(tmp_path, mcu_rows(), [BENCH_RUN, BENCH_RUN])
    assert "from 1 run(s) on 1 host(s)." in md and "more run(s)" not in md
    assert sections(md, "## ")["Runs"].count("- **") == 1


def test_unavailable_targets_are_listed_with_their_reason(md: str):
    headers, rows = table(sections(md, "## ")["Targets not run"])
    assert headers == ["target", "reason", "run (host)"]
    assert rows == [["gpu", NO_CUPY, "bench-1 (labpc), bench-2 (labpc)"]]
    assert "targets not run: `gpu`" in sections(md, "## ")["Runs"]


def test_no_unavailable_target_is_said(tmp_path: Path):
    md = _rendered(tmp_path, cpu_rows(), [GPU_RUN])
    said = sections(md, "## ")["Targets not run"].strip()
    assert said == "None: no run in runs.jsonl recorded an unavailable target."


def test_modelled_sensors_are_labelled_in_the_header(md: str):
    headers, rows = table(sections(md, "### ")["mcu / q15"])
    cells = dict(zip(headers, rows[0]))
    assert (cells["temp °C (modelled)"], cells["VDDA V (modelled)"]) == ("26.18", "3.311")


def test_mixed_sensor_sources_label_each_modelled_cell(tmp_path: Path):
    twin = mcu_rows()[0]
    board = twin.replace(seq=48, br=48, temp_c=31.5, vdda_v=3.29, sensors_source="measured")
    headers, rows = table(sections(_rendered(tmp_path, [twin, board], [BENCH_RUN]), "### ")["mcu / q15"])
    assert [row[headers.index("temp °C")] for row in rows] == ["26.18 (modelled)", "31.5"]
    assert [row[headers.index("VDDA V")] for row in rows] == ["3.311 (modelled)", "3.29"]


def test_modelled_timing_is_labelled_in_the_header(md: str):
    """The twin's latency, cycles and the GFLOP/s they give come from its cycle model: every row of the table is
    modelled, so the headers say so; measured tables stay unlabelled; each caption names its timing source."""
    groups = sections(md, "### ")
    mcu_headers = table(groups["mcu / q15"])[0]
    for header in ("p50 ms [95% CI]", "mean ms", "p99 ms", "min ms", "cycles", "GFLOP/s"):
        assert f"{header} (modelled)" in mcu_headers
    assert "iters" in mcu_headers and "GB/s (modelled)" in mcu_headers  # modelled bytes, labelled once
    for group in ("gpu / flash", "cpu / reference"):
        headers = table(groups[group])[0]
        assert {"p50 ms [95% CI]", "mean ms", "GFLOP/s"} <= set(headers)
        assert [h for h in headers if h.endswith("(modelled)")] == ["GB/s (modelled)"]
    assert "Timing modelled (board twin's cycle model)." in groups["mcu / q15"]
    assert "Timing measured (CUDA events, L2 flushed before each call)." in groups["gpu / flash"]
    assert "Timing measured (wall clock, perf_counter_ns)." in groups["cpu / reference"]


def test_mixed_timing_sources_label_each_modelled_cell(tmp_path: Path):
    twin = mcu_rows()[0]
    board = twin.replace(seq=48, br=48, timing_source="measured: DWT cycle counter", sensors_source="measured")
    body = sections(_rendered(tmp_path, [twin, board], [BENCH_RUN]), "### ")["mcu / q15"]
    headers, rows = table(body)
    cells = [dict(zip(headers, row)) for row in rows]
    assert [c["p50 ms [95% CI]"] for c in cells] == ["3.2 [3.104, 3.328] (modelled)", "3.2 [3.104, 3.328]"]
    assert [c["cycles"] for c in cells] == ["537.6k (modelled)", "537.6k"]
    assert [c["min ms"] for c in cells] == ["2.88 (modelled)", "2.88"]
    assert "Timing modelled (board twin's cycle model); measured (DWT cycle counter)." in body


def test_a_datasheet_roof_is_named_as_such(md: str):
    assert ("Ran on labpc (STM32F407 (twin)), datasheet roof 0.672 GFLOP/s, 0.672 GB/s "
            "(Cortex-M4 SMLALD 2 MAC/cycle, SRAM 4 B/cycle).") in sections(md, "### ")["mcu / q15"]
    assert "measured peak 60000 GFLOP/s, 4200 GB/s" in sections(md, "### ")["gpu / flash"]


def test_mcu_rows_whose_br_follows_seq_are_one_series():
    lines = series(results_frame(mcu_rows()))
    assert [s.label for s in lines] == ["mcu/q15"]
    assert list(lines[0].rows.seq) == [16, 32, 64] and list(lines[0].rows.br) == [16, 32, 64]


def test_a_tile_sweep_gives_one_series_per_tile_and_wrong_rows_stay_in_their_series():
    lines = series(results_frame(gpu_rows() + [wrong_row()] + mcu_rows()))
    assert [s.label for s in lines] == ["gpu/flash 32×64", "gpu/flash 64×64", "gpu/fused", "mcu/q15"]
    assert [list(s.rows.seq) for s in lines[:2]] == [[256, 1024], [256, 1024]]  # the oom row is not plotted
    assert list(lines[2].rows.status) == ["wrong"]
    assert len({s.color for s in lines}) == 4


def test_series_labels_name_what_tells_them_apart():
    causal = [r.replace(causal=True) for r in cpu_rows()[:3]]
    elsewhere = [r.replace(host="otherbox", dim=64) for r in cpu_rows()[:1]]
    frame = results_frame(cpu_rows()[:3] + causal + elsewhere + mcu_rows())
    assert [s.label for s in series(frame)] == [
        "cpu/reference d=59 non-causal @gpubox", "cpu/reference d=59 causal @gpubox",
        "cpu/reference d=64 non-causal @otherbox", "mcu/q15 d=59 non-causal @labpc"]
    assert shared_text(frame) == "H=2, B=1"


def test_seq_ticks_are_the_measured_lengths_labelled_where_they_fit():
    assert seq_ticks([97, 17, 1025, 17]) == ([17, 97, 1025], [])
    assert seq_ticks([16, 17, 32, 64, 1024, 1025]) == ([16, 32, 64, 1025], [17, 1024])
    labelled, bare = seq_ticks(range(1, 1001))
    assert labelled[0] == 1 and labelled[-1] == 1000 and len(labelled) <= 12
    assert sorted(labelled + bare) == list(range(1, 1001))


def test_roofline_puts_every_targets_rows_under_their_own_roof():
    points, roofs = roofline_data(results_frame(cpu_rows() + gpu_rows() + [wrong_row()] + mcu_rows()))
    assert sorted(points.target.unique()) == ["gpu", "mcu"]  # these cpu rows carry no peaks; wrong rows not plotted
    assert (points.target == "mcu").sum() == 3
    m4 = roofs.loc[("labpc", "STM32F407 (twin)", M4_ROOF)]
    assert (m4.flops, m4.bw) == (0.672, 0.672)
    assert roofs.loc[("gpubox", "NVIDIA H200", "measured")].flops == 60_000.0  # peak_source empty: measured


ASIC_ROOF = "model: 32x32 MACs and 32 DRAM B/cycle at 1000 MHz"


def asic_twins_of(rows: list[Result]) -> list[Result]:
    """The asic target's rows for the MCU's problems: the same Q15 bits, so the same errors; its own model roof."""
    return [r.replace(target="asic", kernel="sa32x32-os-acc40", device="ASIC model: 32x32 os array, 40-bit wrap "
                      "accumulators, 16 exp lanes, 32 dividers, 1000 MHz, DRAM 32 B/cycle", peak_gflops=2048.0,
                      peak_gbps=32.0, peak_source=ASIC_ROOF, gflops=r.gflops * 300) for r in rows]


def test_series_with_the_same_errors_are_one_line_named_together():
    """error.png drew the asic lines exactly under the MCU ones (6 legend entries, 4 lines): one line now, the
    legend saying both, and whether the bits are the same (every row bit-exact with the model) or only the errors."""
    rows = mcu_rows() + asic_twins_of(mcu_rows()) + cpu_rows()[:3]
    merged = same_errors_merged(series(results_frame(rows)))
    assert [s.label for s in merged] == ["asic/sa32x32-os-acc40 = mcu/q15, same bits", "cpu/reference"]
    inexact = [r.replace(bit_exact=None) for r in asic_twins_of(mcu_rows())]
    assert [s.label for s in same_errors_merged(series(results_frame(mcu_rows() + inexact)))] == [
        "asic/sa32x32-os-acc40 = mcu/q15, same errors"]
    apart = asic_twins_of(mcu_rows())[:2] + [asic_twins_of(mcu_rows())[2].replace(rel_l2=0.5)]
    assert len(same_errors_merged(series(results_frame(mcu_rows() + apart)))) == 2


def test_each_roof_has_its_own_style_and_the_legend_sits_below(tmp_path: Path):
    """The ASIC's model roof and the MCU's datasheet roof shared one style: each roof takes its rows' colour and a
    line style of its own. The legend (long device names) sat on the right, half the image's width: it is below, so
    the image is about the figure's 10 inches wide."""
    points, roofs = roofline_data(results_frame(gpu_rows() + mcu_rows() + asic_twins_of(mcu_rows())))
    styles = roof_styles(points, roofs)
    assert len(styles) == 3
    assert len({style["color"] for style in styles}) == 3 and len({style["ls"] for style in styles}) == 3
    render(write(tmp_path, gpu_rows() + mcu_rows() + asic_twins_of(mcu_rows()), [GPU_RUN, BENCH_RUN]))
    height, width = matplotlib.image.imread(tmp_path / "roofline.png").shape[:2]
    assert width < 11 * DPI and height > 6 * DPI


def test_a_schema_1_results_csv_still_renders(tmp_path: Path):
    rows = [r.to_row() | {"schema_version": "1"} for r in cpu_rows() + gpu_rows()]
    columns = [name for name in rows[0] if not any(name in added for added in ADDED_COLUMNS.values())]
    with (tmp_path / "results.csv").open("w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    old_run = {k: v for k, v in dataclasses.asdict(GPU_RUN).items() if k != "unavailable"}
    (tmp_path / "runs.jsonl").write_text(json.dumps(old_run) + "\n", encoding="utf-8")
    written = render(tmp_path)
    assert [p.name for p in written] == ["results.md", "latency_vs_seq.png", "error.png", "roofline.png"]
    md = (tmp_path / "results.md").read_text()
    assert "9 rows (8 ok, 1 oom) from 1 run(s) on 1 host(s)." in md
    assert len(table(sections(md, "### ")["gpu / flash"])[1]) == 5
    assert "measured peak 60000 GFLOP/s" in md and "None: no run in runs.jsonl" in md
    assert "Timing" not in md and "(modelled)" not in md.replace("GB/s (modelled)", "")  # never recorded: no label


def _rendered(out: Path, rows: list[Result], runs: list[RunInfo]) -> str:
    render(write(out, rows, runs))
    return (out / "results.md").read_text()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "host.report", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_cli_missing_folder_exits_2_with_one_line(tmp_path: Path):
    done = _cli(str(tmp_path / "nowhere"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("kbench: ")
    assert "Traceback" not in done.stderr


def test_cli_bad_arguments_exit_2_with_one_line():
    done = _cli()
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("kbench: ")


def test_cli_renders(merged: Path):
    done = _cli(str(merged))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].endswith("results.md")


def test_cli_refuses_an_empty_out_dir_naming_it(capsys):
    from host.report.render import main
    assert main([""]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kbench: error: ") and "'' is empty" in err, err


@pytest.mark.parametrize("content,needle", [
    (b"garbage,x,y\n", ":1: not a kbench results header"),
    (b"garbage without a newline", ":1: no complete line"),
    (b"\x89PNG\r\n\x1a\n\x00\xff", ":1: byte 0x89 is not UTF-8 text"),
])
def test_cli_a_results_file_that_is_not_results_exits_2_with_a_hint_for_this_tool(tmp_path, capsys, content, needle):
    from host.report.render import main
    (tmp_path / "results.csv").write_bytes(content)
    assert main([str(tmp_path)]) == 2  # the folder named on the command line: a bad argument, as for --resume
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"kbench: error: OUT_DIR {tmp_path}: {tmp_path / 'results.csv'}")
    assert needle in err, err
    assert "move it aside, or render a folder holding kbench results" in err and "--out" not in err
    assert (tmp_path / "results.csv").read_bytes() == content


def test_cli_a_results_csv_that_is_a_folder_is_named_so(tmp_path, capsys):
    from host.report.render import main
    (tmp_path / "results.csv").mkdir()
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "its results.csv is not a file" in err, err  # it said "holds no results.csv"


def test_cli_a_runs_log_that_is_a_fifo_is_refused_not_waited_on(tmp_path, capsys):
    from host.report.render import main
    write(tmp_path, cpu_rows(), [])
    os.mkfifo(tmp_path / "runs.jsonl")  # reading it would block for ever
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "runs.jsonl is not a file; move it aside" in err, err
