"""scripts/diff_rows.py, the refactor check: rows matched by their whole configuration, a changed verdict found, a
file it cannot compare refused in one line."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

from helpers import ROOT

spec = importlib.util.spec_from_file_location("diff_rows", ROOT / "scripts" / "diff_rows.py")
diff_rows = importlib.util.module_from_spec(spec)
spec.loader.exec_module(diff_rows)

COLUMNS = ("run_id", "target", "kernel", "dtype", "batch", "heads", "kv_heads", "seq", "q_len", "dim", "causal",
           "status", "rel_l2", "mean_ms", "timing_source", "message")
#: Two decode rows and a prefill row of one (kernel, dtype, seq, dim, heads, causal): only q_len and kv_heads differ.
ROWS = [dict(zip(COLUMNS, values)) for values in (
    ("a", "cpu", "numpy", "float32", "1", "4", "", "64", "", "32", "0", "ok", "1e-7", "0.5", "measured: wall", "x"),
    ("a", "cpu", "numpy", "float32", "1", "4", "2", "64", "1", "32", "0", "ok", "2e-7", "0.2", "measured: wall", "x"),
    ("a", "cpu", "numpy", "float32", "1", "4", "", "64", "1", "32", "0", "ok", "3e-7", "0.1", "measured: wall", "x"))]


def write(path: Path, rows: list[dict]) -> str:
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


def test_the_same_rows_in_another_run_differ_in_nothing(tmp_path, capsys):
    later = [dict(row, run_id="b", mean_ms="9.9") for row in ROWS]  # identity and timing are not compared
    assert diff_rows.main([write(tmp_path / "a.csv", ROWS), write(tmp_path / "b.csv", later)]) == 0
    assert capsys.readouterr().out == "3 rows before, 3 after, 0 differences\n"


def test_a_row_gone_or_turned_wrong_is_a_difference_even_beside_rows_of_the_same_kernel_and_seq(tmp_path, capsys):
    before = write(tmp_path / "a.csv", ROWS)
    assert diff_rows.main([before, write(tmp_path / "gone.csv", ROWS[:2])]) == 1
    assert "missing from the second file" in capsys.readouterr().out
    wrong = [ROWS[0], dict(ROWS[1], status="wrong", rel_l2="0.5"), ROWS[2]]
    assert diff_rows.main([before, write(tmp_path / "wrong.csv", wrong)]) == 1
    out = capsys.readouterr().out
    assert "status: 'ok' -> 'wrong'" in out and "rel_l2: '2e-7' -> '0.5'" in out


@pytest.mark.parametrize("case", ["twice", "missing"])
def test_a_file_it_cannot_compare_is_refused_in_one_line(tmp_path, capsys, case):
    good = write(tmp_path / "a.csv", ROWS)
    other = write(tmp_path / "twice.csv", ROWS + ROWS[:1]) if case == "twice" else str(tmp_path / "nope.csv")
    assert diff_rows.main([good, other]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("twice" in err if case == "twice" else "cannot read" in err), err
