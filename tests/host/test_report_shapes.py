"""The report of LLM inference shapes (issue 32): a q_len equal to a swept seq on the same plot line as the other rows
of that q_len (q_len = seq is stored empty), and results.md grouping a --workload sweep's rows under each workload's
name, with the q_len, K/V heads and workload of the rows that are not ok."""

from __future__ import annotations

from host.report.markdown import markdown, not_ok_section, summary_section
from host.report.digest import Digest
from host.report.plots import results_frame, series, series_groups, shared_text
from host.results import Result

WALL = "measured: wall clock, perf_counter_ns"


def row(seq: int, q_len: int | None = None, workload: str = "", status: str = "ok", **extra) -> Result:
    base = dict(run_id="r1", timestamp="t", git_rev="g", host="h", device="cpu0", target="cpu", kernel="numpy",
                dtype="float32", batch=1, heads=4, seq=seq, dim=16, causal=True, seed=0, q_len=q_len,
                workload=workload, status=status, message="" if status == "ok" else "skipped: why")
    timed = dict(p50_ms=0.01 * seq, min_ms=0.009 * seq, gflops=1.0, timing_source=WALL) if status == "ok" else {}
    return Result(**(base | timed | extra))


def plotted(rows: list[Result]) -> list[tuple[str, list[int]]]:
    """Each series' label and the sequence lengths of its points."""
    return [(s.label, [int(seq) for seq in s.rows.seq]) for s in series(results_frame(rows))]


def test_a_q_len_equal_to_a_swept_seq_is_on_the_line_of_that_q_len():
    """`--seq 16,64 --q-len 16`: q_len 16 at N 16 is stored as self-attention (q_len empty); it is the N = 16 point
    of the q_len 16 line, not a line of its own (the review found two series, 'q_len=N' and 'q_len=16')."""
    rows = [row(16), row(64, q_len=16)]
    groups = series_groups(results_frame(rows))
    q = 6  # SERIES_FIELDS: target, kernel, dtype, dim, heads, kv_heads, q_len, ...
    assert [key[q] for key, _ in groups] == [16]
    assert sorted(int(seq) for seq in groups[0][1].seq) == [16, 64]
    assert plotted(rows) == [("cpu/numpy", [16, 64])]
    # the one line's q_len is said in the title (it was left out: the stored values, empty and 16, differ)
    assert shared_text(results_frame(rows)) == "float32, d=16, H=4, q_len=16, B=1, causal"
    # square rows alone say no q_len; a square line beside a q_len line names it in the legend instead
    assert shared_text(results_frame([row(16), row(64)])) == "float32, d=16, H=4, B=1, causal"
    assert "q_len" not in shared_text(results_frame([row(16), row(64), row(64, q_len=16)]))


def test_a_fake_gpus_line_says_so_in_the_legend():
    """kernels/fake.py's rows (numpy timed on the CPU) are never drawn as a GPU's line."""
    fake = "fake GPU (numpy on the CPU, NVIDIA H200 limits, 1024 MiB)"
    rows = [row(16, target="gpu", kernel="naive", device=fake), row(64, target="gpu", kernel="naive", device=fake),
            row(16)]
    assert plotted(rows) == [("cpu/numpy", [16]), ("gpu/naive (fake GPU)", [16, 64])]


def test_a_square_series_keeps_its_rows_and_lends_the_one_a_q_len_line_needs():
    """A square sweep (N 16 and 64) beside a decode one (q_len 16 at N 64): the square line keeps both of its points
    (at N 64 it is no q_len 16 row), and the q_len 16 line has its point at N 16 from the square row there."""
    rows = [row(16), row(64), row(64, q_len=16), row(64, q_len=1), row(16, q_len=1)]
    assert plotted(rows) == [("cpu/numpy q_len=1", [16, 64]), ("cpu/numpy q_len=16", [16, 64]),
                             ("cpu/numpy q_len=N", [16, 64])]
    # a non-causal square row is not a causal q_len 16 row
    assert plotted([row(16, causal=False), row(64, q_len=16)]) == [("cpu/numpy q_len=16 causal", [64]),
                                                                    ("cpu/numpy q_len=N non-causal", [16])]


def test_results_md_groups_a_workload_sweeps_rows_under_each_name():
    rows = [row(1024, q_len=1, workload="gpt2-decode", heads=12, kv_heads=None, batch=16, dim=64),
            row(197, workload="vit-b16", heads=12, batch=8, dim=64, causal=False),
            row(197, workload="vit-b16", heads=12, batch=8, dim=64, causal=False, target="asic", kernel="sa",
                dtype="q15"),
            row(64)]
    text = markdown(rows, [], [])
    headings = [line for line in text.splitlines() if line.startswith("###")]
    assert headings == ["### Workload `gpt2-decode`: B16 H12 N1024 q_len 1 d64 causal", "#### cpu / numpy",
                        "### Workload `vit-b16`: B8 H12 N197 d64 non-causal", "#### asic / sa", "#### cpu / numpy",
                        "### Rows without a workload", "#### cpu / numpy"]
    plain = markdown([row(64), row(128)], [], [])
    assert [line for line in plain.splitlines() if line.startswith("###")] == ["### cpu / numpy"]


def test_rows_not_ok_show_their_shape_and_workload_and_the_summary_its_workload():
    shown = [row(64, q_len=1, kv_heads=2, workload="w", status="skipped"), row(64, status="skipped")]
    header = not_ok_section(shown)[2]
    assert header == ("| workload | target | kernel | host | dtype | B | H | K/V heads | N | q_len | d | causal | "
                      "Br×Bc | status | message |")
    assert not_ok_section(shown)[4].startswith("| w | cpu | numpy | h | float32 | 1 | 4 | 2 | 64 | 1 | 16 | yes |")
    summary = summary_section(Digest.of([row(64, workload="w"), row(64)], keep=1))
    assert summary[4].startswith("| workload | target | kernel | dtype | rows |")
    assert summary[6].startswith("| w | cpu | numpy | float32 | 1 |") and summary[7].startswith("|  | cpu | numpy |")
