"""host.compare with LLM inference shapes (issue 32's review): --resume measuring a skipped row again once its target
runs the shape, a seq × q_len (or heads × kv_heads) pair that makes no problem refused in one line before anything
runs, --workload refusing a shape option given at its default value, and a workload sweep's rows carrying the
workload's name (results.csv, the console, results.md)."""

from __future__ import annotations

import pytest

from host.cpu import target as cpu
from host.results_file import ResultsFile
from host.sweep import cli as compare

QUICK = ("--targets", "cpu", "--iters", "1", "--warmup", "0")


def test_resume_measures_a_skipped_row_again_once_its_target_runs_the_shape(tmp_path, monkeypatch, capsys):
    """A row skipped because its target could not run the shape is measured again by --resume (the review found it
    kept forever); the skipped row goes once the new one is on disk."""
    args = [*QUICK, "--seq", "17", "--q-len", "3", "--heads", "6", "--kv-heads", "3", "--dim", "8", "--causal", "1",
            "--out", str(tmp_path)]
    with monkeypatch.context() as patch:
        patch.setattr(cpu, "supports", lambda problem: (False, "a decode kernel is not built yet (this test's cpu)"))
        assert compare.main(args) == 1  # no row measured
    [skipped] = ResultsFile(tmp_path / "results.csv").read()
    assert skipped.status == "skipped" and "not built yet" in skipped.message
    capsys.readouterr()
    assert compare.main([*args, "--resume"]) == 0
    assert "resuming: 0 of 1 rows already in" in capsys.readouterr().err
    [measured] = ResultsFile(tmp_path / "results.csv").read()
    assert (measured.status, measured.q_len, measured.kv_heads) == ("ok", 3, 3), measured.message
    assert compare.main([*args, "--resume"]) == 0  # done now
    assert "nothing left to measure" in capsys.readouterr().err


@pytest.mark.parametrize("options,line", [
    (("--seq", "128,4096", "--q-len", "1024"),
     "--q-len 1024 with --seq 128: q_len must be at most seq (queries against a KV cache of seq keys)"),
    (("--seq", "16,97", "--q-len", "1,17,64"),
     "--q-len 17 with --seq 16, --q-len 64 with --seq 16: q_len must be at most seq (queries against a KV cache of "
     "seq keys)"),
    (("--heads", "4,12", "--kv-heads", "8"),
     "--kv-heads 8 with --heads 4, --kv-heads 8 with --heads 12: kv_heads must divide heads (grouped-query "
     "attention)"),
])
def test_a_pair_of_shape_values_that_makes_no_problem_is_one_line_before_anything_runs(tmp_path, capsys, options,
                                                                                        line):
    out = tmp_path / "out"
    assert compare.main([*QUICK, *options, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"kbench: error: {line}; the sweep runs every pair of the lists: give the values that fit "
                   "together, in separate runs into one --out with --resume"]
    assert not out.exists(), "refused before the output folder is made"


@pytest.mark.parametrize("options,flags", [(("--seq", "128,256,512"), "--seq"),  # the defaults, typed out
                                           (("--heads", "4", "--batch", "1"), "--heads, --batch"),
                                           (("--causal=both",), "--causal"),
                                           (("--q-len", "1"), "--q-len")])
def test_a_workload_refuses_every_shape_option_given_even_at_its_default(tmp_path, capsys, options, flags):
    assert compare.main(["--workload", "gpt2-decode", *options, *QUICK, "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.strip() == (f"kbench: error: --workload sets the problem's shape; drop {flags} "
                                               "(or drop --workload)")
    assert not (tmp_path / "x").exists()


def test_a_workload_sweep_names_its_workload_in_every_row_on_the_console_and_in_results_md(tmp_path, capsys):
    args = ["--workload", "vit-b16,gpt2-decode", *QUICK, "--out", str(tmp_path)]
    assert compare.main(args) == 0
    rows = ResultsFile(tmp_path / "results.csv").read()
    assert [(r.workload, r.seq, r.q_len, r.status) for r in rows] == [("vit-b16", 197, None, "ok"),
                                                                     ("gpt2-decode", 1024, 1, "ok")]
    out = capsys.readouterr().out.splitlines()
    at = {line: i for i, line in enumerate(out)}
    assert at["workload vit-b16:"] + 1 == next(i for i, line in enumerate(out) if " 197 " in line)
    assert at["workload gpt2-decode:"] + 1 == next(i for i, line in enumerate(out) if " 1024 " in line)
    text = (tmp_path / "results.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("###")]
    assert headings == ["### Workload `vit-b16`: B8 H12 N197 d64 non-causal", "#### cpu / numpy",
                        "### Workload `gpt2-decode`: B16 H12 N1024 q_len 1 d64 causal", "#### cpu / numpy"]
    assert compare.main([*args, "--resume"]) == 0  # the rows of each workload are its configurations
    assert "nothing left to measure" in capsys.readouterr().err


def test_more_repeats_than_a_target_counts_are_refused_before_its_device_starts(tmp_path, monkeypatch, capsys):
    """--iters over the MCU's 255 calls a RUN counts: one line before the board or twin starts (every row was an
    error after the twin had started and been deployed)."""
    from host.sweep import cli
    from mcu import target as mcu

    shape = ["--seq", "16", "--dim", "8", "--heads", "1", "--causal", "0"]
    assert compare.main(["--targets", "cpu", "--warmup", "0", "--iters", "300", *shape, "--out",
                         str(tmp_path / "cpu")]) == 0  # the cpu target has no such limit
    monkeypatch.setattr(mcu, "available", lambda settings: (True, ""))

    def no_session(*args, **kwargs):
        raise AssertionError("a session was opened")

    monkeypatch.setattr(cli, "open_sessions", no_session)
    capsys.readouterr()
    assert compare.main(["--targets", "cpu,mcu", "--sim", "--warmup", "6", "--iters", "250", *shape, "--out",
                         str(tmp_path / "mcu")]) == 2
    line = ("kbench: error: --warmup 6 + --iters 250 = 256 calls a row is out of range for the mcu target; allowed: "
            "1..255 (run mcu apart with fewer, or leave it out of --targets)")
    assert capsys.readouterr().err.strip() == line
    assert not (tmp_path / "mcu" / "results.csv").exists()
    # a cluster sweep refuses it before it reaches the scheduler (nothing listens on port 9)
    assert compare.main(["--targets", "mcu", "--warmup", "6", "--iters", "250", *shape, "--cluster",
                         "tcp://127.0.0.1:9", "--out", str(tmp_path / "cluster")]) == 2
    assert capsys.readouterr().err.strip() == line
    # --kernels that leaves the mcu without a kernel: it runs no row, so its limit does not stop the cpu's rows
    monkeypatch.undo()
    assert compare.main(["--targets", "cpu,mcu", "--kernels", "numpy", "--warmup", "0", "--iters", "300", *shape,
                         "--out", str(tmp_path / "numpy")]) == 0


def test_workload_list_refuses_anything_beside_it(tmp_path, capsys):
    """`--workload list` prints the table and runs nothing: an option beside it would be dropped unread."""
    assert compare.main(["--workload", "list", "--targets", "garbage", "--seq", "5"]) == 2
    assert capsys.readouterr().err.strip() == ("kbench: error: --workload list prints the table and runs nothing; "
                                               "drop --seq, --targets")
    assert compare.main(["--work", "list", "--iters=1"]) == 2  # as argparse reads it: abbreviated, with =
    assert capsys.readouterr().err.strip().endswith("drop --iters")
    assert compare.main(["--sim", "--workload=list"]) == 2  # a target's option too (setup.sh main adds none here)
    assert capsys.readouterr().err.strip().endswith("drop --sim")
    assert compare.main(["--workload=list"]) == 0 and "llama3-8b-decode" in capsys.readouterr().out
