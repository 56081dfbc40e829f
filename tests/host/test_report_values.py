"""The report at the ends of what results.csv holds (issue 28): counts up to 2^63-1 (the problem's own up to
host/problem.py's LIMITS) and figures up to 1e308 in every column render as readable text, no OverflowError,
TypeError or matplotlib traceback; and the seed the inputs were drawn from is said (in the headline, and in a
column where a table's rows differ)."""

from __future__ import annotations

from pathlib import Path

from host.problem import LIMITS
from host.report.common import fmt_num
from host.report.render import render
from host.tolerance import rel_l2_limit
from test_report import EVENTS, GPU_RUN, WALL, _row, _timed, cpu_rows, sections, table, write

INT64_MAX = 2**63 - 1
SEQ_MAX = LIMITS["seq"][1]
FLOAT_BIG = 1e308


def huge(seq: int, **extra) -> dict:
    """The problem at host/problem.py's largest, every other count at int64's largest and every figure at 1e308
    (ordered as the schema wants: min <= p50), but rel-L2 at the largest an ok float32 row may have (its tolerance:
    host/tolerance.py)."""
    counts = dict(batch=LIMITS["batch"][1], heads=LIMITS["heads"][1], dim=LIMITS["dim"][1], seed=LIMITS["seed"][1],
                  br=INT64_MAX, bc=INT64_MAX,
                  iters=INT64_MAX, warmup=INT64_MAX, model_bytes=INT64_MAX, measured_bytes=INT64_MAX,
                  llc_loads=INT64_MAX, llc_misses=INT64_MAX, instructions=INT64_MAX, cpu_cycles=INT64_MAX,
                  cycles=INT64_MAX, clock_hz=INT64_MAX)
    figures = {name: FLOAT_BIG for name in ("mean_ms", "p50_ms", "p99_ms", "min_ms", "p50_ci_low_ms",
                                            "p50_ci_high_ms", "gflops", "gbps", "peak_gflops", "peak_gbps",
                                            "max_abs", "ipc", "temp_c", "vdda_v", "energy_j")}
    figures["rel_l2"] = rel_l2_limit("float32", counts["dim"], seq)
    return dict(seq=seq) | counts | figures | dict(timing_source=EVENTS) | extra


def test_fmt_num_writes_the_largest_counts_in_short_scientific_form():
    assert fmt_num(INT64_MAX) == "9.223e18"
    assert fmt_num(10**15) == "1.000e15" and fmt_num(10**400) == "1.000e400"
    assert fmt_num(537_600) == "537.6k" and fmt_num(FLOAT_BIG) == "1.000e308"


def test_the_largest_values_the_reader_accepts_render_as_readable_text(tmp_path: Path):
    rows = [_row(GPU_RUN, "NVIDIA H200", "gpu", "flash", **huge(seq)) for seq in (1, SEQ_MAX // 2, SEQ_MAX)]
    rows.append(_row(GPU_RUN, "NVIDIA H200", "gpu", "flash", **huge(97, status="wrong", message="outside tolerance",
                                                                   gflops=5e-324, max_abs=5e-324, rel_l2=1e-300)))
    rows.append(_row(GPU_RUN, "Xeon", "cpu", "reference", 17, **_timed(0.5, WALL), gflops=1.0, gbps=2.0,
                     peak_gflops=FLOAT_BIG, peak_gbps=1e-308))
    written = render(write(tmp_path, rows, [GPU_RUN]))
    assert [p.name for p in written][0] == "results.md"
    md = (tmp_path / "results.md").read_text()
    headers, cells = table(sections(md, "### ")["gpu / flash"])
    row = dict(zip(headers, cells[-1]))
    assert row["N"] == str(SEQ_MAX) and row["H"] == "4096" and row["Br×Bc"] == f"{INT64_MAX}×{INT64_MAX}"
    assert row["GFLOP/s"] == "1.000e308" and row["iters"] == "9.223e18" and row["measured bytes"] == "9.223e18"
    assert row["% of peak GFLOP/s"] == "100 %" and row["clock MHz"] == "9.223e12"
    assert "e+" not in md and "T |" not in md, "no '9.223e+06T'"
    assert f"Inputs drawn from seeds 0, {2**32 - 1} (a seed column" in md
    headers, cells = table(sections(md, "### ")["cpu / reference"])
    assert dict(zip(headers, cells[0]))["% of peak GB/s"] == "inf %"  # 2 GB/s under a 1e-308 GB/s roof: said
    for name in ("latency_vs_seq.png", "error.png", "roofline.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{name} drawn"


def test_one_seed_is_said_in_the_headline_and_differing_seeds_get_a_column(tmp_path: Path):
    md = _md(tmp_path / "one", cpu_rows())
    assert "Inputs drawn from seed 0." in md.split("\n## ")[0]
    assert "seed" not in table(sections(md, "### ")["cpu / reference"])[0]
    rows = cpu_rows() + [r.replace(seed=7) for r in cpu_rows()[:2]]
    md = _md(tmp_path / "two", rows)
    assert "Inputs drawn from seeds 0, 7 (a seed column where a table's rows differ)." in md
    headers, cells = table(sections(md, "### ")["cpu / reference"])
    assert headers[headers.index("causal") + 1] == "seed"
    assert sorted(row[headers.index("seed")] for row in cells) == ["0", "0", "0", "7", "7"]
    assert "seed" not in table(sections(md, "### ")["cpu / naive"])[0], "its one row has one seed"


def _md(out: Path, rows) -> str:
    out.mkdir()
    render(write(out, rows, [GPU_RUN]))
    return (out / "results.md").read_text()


def test_a_count_that_rounds_up_to_the_next_prefix_takes_that_prefix():
    # 999,999,999 rounds to 4 digits as 1.000e9: '1G', never '1000M'; just below 10^15 it is written as 10^15 is.
    assert [fmt_num(n) for n in (999_999_999, 999_950, 999_949, 10**15 - 1)] == ["1G", "1M", "999.9k", "1.000e15"]
