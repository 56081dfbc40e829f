"""`codesign explore --results DIR` over a folder that holds no kbench results (issue 28): a bad argument, one line
naming --results and what is wrong, exit 2; a results.csv saved by Excel (with a byte-order mark) is read."""

import pytest

from codesign.__main__ import main as codesign_main
from codesign.measured import load
from host.problem import AttentionProblem
from host.results import Result
from host.results_file import ResultsFile


@pytest.mark.parametrize("content,needle", [
    (bytes(range(256)) * 4, "results.csv:2: byte 0x80 is not UTF-8 text"),
    (b"name,value\nx,1\n", "results.csv:1: not a kbench results header"),
])
def test_a_folder_without_results_is_a_bad_argument(tmp_path, capsys, content, needle):
    folder = tmp_path / "garbage"
    folder.mkdir()
    (folder / "results.csv").write_bytes(content)
    code = codesign_main(["explore", "--results", str(folder), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"kbench: error: --results {folder}: ") and needle in err, err
    assert "choose another --out" not in err


def test_a_results_file_with_a_byte_order_mark_is_read(tmp_path):
    problem = AttentionProblem(batch=1, heads=1, seq=64, dim=16, causal=False, seed=0)
    path = tmp_path / "results.csv"
    ResultsFile(path).append(Result(run_id="r", timestamp="t", git_rev="g", host="h", device="NVIDIA H200",
                                    target="gpu", kernel="flash", dtype="float16", batch=1, heads=1, seq=64, dim=16,
                                    causal=False, seed=0, p50_ms=0.02, min_ms=0.01,
                                    timing_source="measured: CUDA events", energy_j=5e-3,
                                    energy_source="measured (NVML)"))
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    points, left = load([tmp_path], problem)
    assert [point.target for point in points] == ["gpu"] and left == []


def test_an_explore_removes_the_staged_files_a_killed_one_left(tmp_path):
    from codesign.explore_cli import OUTPUTS, _remove_leftovers
    for name in OUTPUTS:
        (tmp_path / f".tmp-29361-{name}").write_text("partial")
    for keep in (".tmp-notapid-points.csv", "points.csv", ".tmp-1-notes.txt"):
        (tmp_path / keep).write_text("mine")
    _remove_leftovers(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-1-notes.txt", ".tmp-notapid-points.csv",
                                                          "points.csv"]


def test_a_torn_last_row_is_named_not_dropped_silently(tmp_path):
    """A results.csv whose writer was killed mid-row (a review found the row vanished from iso.md without a word):
    the whole row is read, the torn one is named with its line in the left-out list."""
    problem = AttentionProblem(batch=1, heads=1, seq=64, dim=16, causal=False, seed=0)
    path = tmp_path / "results.csv"
    for dtype in ("float16", "bfloat16"):
        ResultsFile(path).append(Result(run_id="r", timestamp="t", git_rev="g", host="h", device="NVIDIA H200",
                                        target="gpu", kernel="flash", dtype=dtype, batch=1, heads=1, seq=64, dim=16,
                                        causal=False, seed=0, p50_ms=0.02, min_ms=0.01,
                                        timing_source="measured: CUDA events", energy_j=5e-3,
                                        energy_source="measured (NVML)"))
    text = path.read_bytes()
    path.write_bytes(text[:len(text) - 40])  # the bfloat16 row (line 3: header, fp16, bf16) cut mid-row
    points, left = load([tmp_path], problem)
    assert [point.label for point in points] == ["H200 flash float16"]
    assert left == [f"{path}: line 3 torn (a writer killed mid-row), skipped"], left
