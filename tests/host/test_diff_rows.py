"""scripts/diff_rows.py, the refactor check: rows matched by their whole configuration, a changed verdict found, a
file it cannot compare refused in one line."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from helpers import ROOT
from host.results import Result
from host.results_file import ResultsFile

spec = importlib.util.spec_from_file_location("diff_rows", ROOT / "scripts" / "diff_rows.py")
diff_rows = importlib.util.module_from_spec(spec)
spec.loader.exec_module(diff_rows)

BASE = dict(run_id="a", timestamp="t", git_rev="g", host="h", device="cpu0", target="cpu", kernel="numpy",
            dtype="float32", batch=1, heads=4, seq=64, dim=32, causal=False, seed=0, status="ok", message="x",
            p50_ms=0.5, min_ms=0.4, timing_source="measured: wall")
#: Two decode rows and a prefill row of one (kernel, dtype, seq, dim, heads, causal): only q_len and kv_heads differ.
ROWS = [Result(**BASE, rel_l2=1e-7), Result(**BASE, rel_l2=2e-7, q_len=1, kv_heads=2),
        Result(**BASE, rel_l2=3e-7, q_len=1)]


def write(path: Path, rows: list[Result]) -> str:
    results = ResultsFile(path)
    for row in rows:
        results.append(row)
    return str(path)


def test_the_same_rows_in_another_run_differ_in_nothing(tmp_path, capsys):
    later = [row.replace(run_id="b", p50_ms=9.9, min_ms=9.0) for row in ROWS]  # identity and timing: not compared
    assert diff_rows.main([write(tmp_path / "a.csv", ROWS), write(tmp_path / "b.csv", later)]) == 0
    assert capsys.readouterr().out == "3 rows before, 3 after, 0 differences\n"


def test_a_row_gone_or_turned_wrong_is_a_difference_even_beside_rows_of_the_same_kernel_and_seq(tmp_path, capsys):
    before = write(tmp_path / "a.csv", ROWS)
    assert diff_rows.main([before, write(tmp_path / "gone.csv", ROWS[:2])]) == 1
    assert "missing from the second file" in capsys.readouterr().out
    wrong = [ROWS[0], ROWS[1].replace(status="wrong", rel_l2=0.5), ROWS[2]]
    assert diff_rows.main([before, write(tmp_path / "wrong.csv", wrong)]) == 1
    out = capsys.readouterr().out
    assert "status: 'ok' -> 'wrong'" in out and "rel_l2: 2e-07 -> 0.5" in out


def test_a_torn_last_row_is_left_out_and_said(tmp_path, capsys):
    torn = write(tmp_path / "torn.csv", ROWS)
    with open(torn, "a") as file:
        file.write("a,t,g,h,cpu0,cpu,num")  # a writer killed mid-row
    assert diff_rows.main([write(tmp_path / "a.csv", ROWS), torn]) == 0
    assert capsys.readouterr().err == f"kbench: {torn}:5: a torn last row (a killed writer) is left out\n"


@pytest.mark.parametrize("case,needle", [
    ("twice", "is there twice"),
    ("missing", "does not exist; allowed: a results.csv written by kbench"),
    ("fifo", "is not a regular file (a folder, a FIFO, a device?)"),  # a FIFO blocked the read for ever
    ("folder", "is not a regular file"),
    ("extra cell", ":3: 58 cells where the header has 57: not a whole results row"),  # was a TypeError traceback
    ("not results", ":1: not a kbench results header"),
])
def test_a_file_it_cannot_compare_is_refused_in_one_line(tmp_path, capsys, case, needle):
    good = write(tmp_path / "a.csv", ROWS)
    other = tmp_path / "other.csv"
    if case == "twice":
        write(other, ROWS + ROWS[:1])
    elif case == "fifo":
        os.mkfifo(other)
    elif case == "folder":
        other.mkdir()
    elif case == "extra cell":
        lines = Path(write(other, ROWS)).read_text().splitlines(keepends=True)
        other.write_text("".join([lines[0], lines[1], lines[2].replace("\n", ",extra\n"), *lines[3:]]))
    elif case == "not results":
        other.write_text("root:x:0:0:root:/root:/bin/bash\n")
    assert diff_rows.main([good, str(other)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
