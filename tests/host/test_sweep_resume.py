"""host/sweep/resume.py on its own: the one pass of --resume (what is done, what waits for its replacement), the drop
at the end, and the temporary files a killed rewrite left behind (issue 28)."""

from __future__ import annotations

from host.report.common import RESULTS_MD
from host.report.plots import PLOTS
from host.results import Result, untiled_key
from host.results_file import ResultsFile
from host.sweep.resume import LEFTOVERS, open_out

BASE = dict(run_id="r1", timestamp="t", git_rev="g", host="h", device="cpu0", target="cpu", kernel="numpy",
            dtype="float32", batch=1, heads=1, dim=4, causal=False, seed=0)


def row(seq, status="ok", **changes):
    return Result(**{**BASE, "seq": seq, "status": status, "message": "" if status == "ok" else "why", **changes})


def test_one_pass_finds_the_done_keys_and_drops_failed_rows_only_once_replaced(tmp_path):
    results = ResultsFile(tmp_path / "results.csv")
    for r in (row(1, "error"), row(1), row(2, "wrong"), row(3), row(4, "error"), row(4, "error")):
        results.append(r)
    planned = {untiled_key(row(s)) for s in (1, 2, 3, 4)}
    opened = open_out(tmp_path, True, planned, {"cpu": "cpu0"})
    assert opened.done == {untiled_key(row(1)), untiled_key(row(3))} and opened.rows_before == 6
    assert len(results.read()) == 6, "nothing is dropped before the new rows are on disk"
    results.append(row(2))  # seq 2 measured again; seq 4 not (interrupted)
    assert opened.drop_superseded([row(2)]) == 3  # seq 1's old error, seq 2's wrong row, seq 4's first error
    assert [(r.seq, r.status) for r in results.read()] == [(1, "ok"), (3, "ok"), (4, "error"), (2, "ok")]


def test_a_row_from_another_device_is_not_done_here(tmp_path, capsys):
    ResultsFile(tmp_path / "results.csv").append(row(1, device="fake"))
    opened = open_out(tmp_path, True, {untiled_key(row(1))}, {"cpu": "cpu0"})
    assert opened.done == set()
    assert "1 finished rows in" in capsys.readouterr().err


def test_a_q15_row_of_another_numeric_contract_is_kept_and_measured_again(tmp_path, capsys):
    """A contract-v1 Q15 row (numerics empty: schema 4 and older) or one of another version is not this kbench's
    result for the configuration: --resume keeps it and measures the configuration again (issue 31's review found
    v1 asic rows kept as done beside v2 rows)."""
    q15_row = dict(target="asic", kernel="sa32x32-os-acc40", dtype="q15", device="model", bit_exact=True)
    results = ResultsFile(tmp_path / "results.csv")
    for seq, numerics in ((1, ""), (2, "q15 v1"), (3, "q15 v2")):
        results.append(row(seq, numerics=numerics, **q15_row))
    planned = {untiled_key(row(s, **q15_row)) for s in (1, 2, 3)}
    opened = open_out(tmp_path, True, planned, {"asic": "model"})
    assert opened.done == {untiled_key(row(3, **q15_row))}
    assert "2 finished Q15 rows in" in capsys.readouterr().err and len(results.read()) == 3


def test_every_q15_row_says_its_numeric_contract(tmp_path):
    from host.problem import AttentionProblem
    from host.q15 import NUMERICS
    from host.target_api import RunContext

    context = RunContext("r", "g", "h")
    problem = AttentionProblem(seq=4, dim=4)
    failed = dict(device="d", status="skipped", message="why")
    assert context.result(problem.with_(dtype="q15"), "mcu", "q15", **failed).numerics == NUMERICS == "q15 v2"
    assert context.result(problem, "cpu", "numpy", **failed).numerics == ""


def test_leftovers_of_a_killed_rewrite_are_removed_and_nothing_else(tmp_path):
    names = [f".{name}.1a2b3c4d.tmp" for name in LEFTOVERS]
    for name in names + ["notes.tmp", ".results.csv.keep", "results.csv.tmp"]:
        (tmp_path / name).write_text("x")
    open_out(tmp_path, True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".results.csv.keep", "notes.tmp", "results.csv.tmp"]


def test_leftovers_name_every_output_the_report_writes():
    assert {RESULTS_MD, *PLOTS} <= set(LEFTOVERS)


def test_a_resume_into_a_file_it_may_not_append_to_is_refused_before_measuring(tmp_path, capsys, monkeypatch,
                                                                               keep_signals):
    from host.sweep import cli as compare
    ResultsFile(tmp_path / "results.csv").append(row(1))
    before = (tmp_path / "results.csv").read_bytes()
    monkeypatch.setattr("host.sweep.cli.os.access", lambda path, mode: not str(path).endswith("results.csv"))
    argv = ["--targets", "cpu", "--seq", "8", "--dim", "4", "--heads", "1", "--causal", "0", "--resume",
            "--out", str(tmp_path)]
    assert compare.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("results.csv cannot be written (its permissions); allowed: a file this user may append "
                            "to, or another --out"), err
    assert (tmp_path / "results.csv").read_bytes() == before


def test_earlier_results_that_cannot_be_set_aside_are_one_line_and_stay(tmp_path, capsys, monkeypatch, keep_signals):
    from host.sweep import cli as compare
    ResultsFile(tmp_path / "results.csv").append(row(1))
    before = (tmp_path / "results.csv").read_bytes()

    def refused(source, destination):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr("host.safe_files.os.rename", refused)
    argv = ["--targets", "cpu", "--seq", "8", "--dim", "4", "--heads", "1", "--causal", "0", "--out", str(tmp_path)]
    assert compare.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "results.csv: cannot keep it aside as results.csv.prev: Operation not permitted" in err[-1], err
    assert (tmp_path / "results.csv").read_bytes() == before


def test_a_skipped_row_is_measured_again_and_an_oom_row_is_done(tmp_path):
    """A skipped row's reason may no longer hold (a target that gained the shape): --resume measures it again and
    drops it once the new row is on disk; an oom row counts as done (the same machine runs out of memory again)."""
    results = ResultsFile(tmp_path / "results.csv")
    for r in (row(1, "skipped"), row(2, "oom"), row(3, "skipped")):
        results.append(r)
    opened = open_out(tmp_path, True, {untiled_key(row(s)) for s in (1, 2, 3)}, {"cpu": "cpu0"})
    assert opened.done == {untiled_key(row(2))}
    results.append(row(1))  # seq 1 measured now; seq 3 skipped again, not yet written (interrupted)
    assert opened.drop_superseded([row(1)]) == 1
    assert [(r.seq, r.status) for r in results.read()] == [(2, "oom"), (3, "skipped"), (1, "ok")]
