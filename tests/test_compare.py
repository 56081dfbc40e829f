"""`python -m host.compare`: the CPU sweep end to end, bad arguments, failing rows, interruption and --resume."""

import csv
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, run_module
from host import compare
from host.results import ResultsFile

FAKE_TARGET = '''
"""A target for tests: fails on seq 17, runs out of memory on seq 33, else one ok row."""
from host.results import Result

KERNELS = {"fake": "float32"}
CALLS = []

def available():
    return True, "always"

def device():
    return "fake device"

def run(problem, inputs, options):
    CALLS.append(problem.seq)
    if problem.seq == 17:
        raise RuntimeError("kernel exploded")
    if problem.seq == 33:
        raise MemoryError("4 GiB requested")
    return [options.context.result(problem, target="fake", kernel=options.kernel, device=device(),
                                   p50_ms=1.0, min_ms=1.0, rel_l2=0.0)]
'''

MISSING_TARGET = '''
"""A target whose capability is absent."""
KERNELS = {"ghost": "float32"}

def available():
    return False, "no ghost board attached"

def device():
    return ""
'''


def data_rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_acceptance_cpu_sweep(tmp_path):
    out = tmp_path / "OUT"
    done = run_module("host.compare", "--targets", "cpu", "--seq", "64,128", "--dim", "32", "--heads", "2",
                      "--causal", "both", "--out", str(out))
    assert done.returncode == 0, done.stderr
    rows = data_rows(out / "results.csv")
    assert sorted((int(r["seq"]), r["causal"]) for r in rows) == [(64, "0"), (64, "1"), (128, "0"), (128, "1")]
    for r in rows:
        assert r["status"] == "ok" and r["target"] == "cpu"
        assert float(r["rel_l2"]) <= 1e-6
        assert float(r["p50_ms"]) > 0 and float(r["p50_ci_low_ms"]) <= float(r["p50_ms"])
        assert r["instructions"] or r["counters_reason"], "counters or the reason they are missing"
        assert float(r["peak_gflops"]) > 0 and float(r["gflops"]) > 0
    assert (out / "results.md").read_text().count("| 128 |") >= 2
    assert list(out.glob("*.png"))
    assert "python -m host.compare --targets cpu" in (out / "runs.jsonl").read_text()


@pytest.mark.parametrize("args,needle", [
    (["--seq", "0"], "seq=0"),
    (["--dim", "0"], "dim=0"),
    (["--dim", "300"], "dim=300"),
    (["--seq", "64,,128"], "64,,128"),
    (["--seq", "abc"], "'abc'"),
    (["--heads", "2.5"], "'2.5'"),
    (["--targets", "tpu"], "'tpu'"),
    (["--kernels", "cublas"], "'cublas'"),
    (["--causal", "maybe"], "'maybe'"),
    (["--iters", "0"], "iters=0"),
    (["--bogus"], "--bogus"),
])
def test_bad_arguments_exit_2_with_one_line(args, needle, tmp_path):
    done = run_module("host.compare", *args, "--out", str(tmp_path / "o"), timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kbench: error:") and needle in lines[0], done.stderr
    assert not (tmp_path / "o" / "results.csv").exists()


@pytest.fixture
def fake_targets(tmp_path, monkeypatch):
    (tmp_path / "fake_target.py").write_text(FAKE_TARGET)
    (tmp_path / "missing_target.py").write_text(MISSING_TARGET)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(compare, "TARGETS", {**compare.TARGETS, "fake": "fake_target", "ghost": "missing_target"})
    import fake_target

    fake_target.CALLS.clear()
    return fake_target


def test_a_failing_row_is_recorded_and_the_sweep_goes_on(fake_targets, tmp_path, capsys):
    out = tmp_path / "o"
    code = compare.main(["--targets", "fake,ghost", "--seq", "1,17,33,97", "--causal", "0", "--out", str(out)])
    assert code == 1
    rows = {r.seq: r for r in ResultsFile(out / "results.csv").read()}
    assert [rows[s].status for s in (1, 17, 33, 97)] == ["ok", "error", "oom", "ok"]
    assert "RuntimeError: kernel exploded" in rows[17].message
    assert "4 GiB requested" in rows[33].message
    printed = capsys.readouterr()
    assert "ghost" in printed.out and "no ghost board attached" in printed.out


def test_resume_retries_failed_rows_only(fake_targets, tmp_path):
    out = tmp_path / "o"
    args = ["--targets", "fake", "--seq", "1,17,97", "--causal", "both", "--out", str(out)]
    assert compare.main(args) == 1
    fake_targets.CALLS.clear()
    assert compare.main(args + ["--resume"]) == 1
    assert fake_targets.CALLS == [17, 17]  # the two failed rows (causal 0 and 1) again, nothing else
    rows = ResultsFile(out / "results.csv").read()
    assert len(rows) == 6 and len({r.config_key() for r in rows}) == 6


def test_a_fresh_run_keeps_the_previous_results_aside(fake_targets, tmp_path):
    out = tmp_path / "o"
    compare.main(["--targets", "fake", "--seq", "1", "--out", str(out)])
    compare.main(["--targets", "fake", "--seq", "97", "--out", str(out)])
    assert [r.seq for r in ResultsFile(out / "results.csv").read()] == [97, 97]
    assert [r.seq for r in ResultsFile(out / "results.csv.prev").read()] == [1, 1]


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL])
def test_interrupted_sweep_resumes_without_duplicates_or_losses(tmp_path, how):
    out = tmp_path / "o"
    args = [sys.executable, "-m", "host.compare", "--targets", "cpu", "--seq", "32,48,64,80,96,112,128,144",
            "--dim", "16", "--heads", "1", "--causal", "both", "--iters", "1500", "--warmup", "0", "--out", str(out)]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if (out / "results.csv").exists() and len(ResultsFile(out / "results.csv").read()) >= 2:
            break
        time.sleep(0.05)
    proc.send_signal(how)
    _, stderr = proc.communicate(timeout=60)
    before = ResultsFile(out / "results.csv").read()
    assert 2 <= len(before) < 16, "the sweep must be cut in the middle"
    if how == signal.SIGINT:
        assert proc.returncode == 130 and "--resume" in stderr
    done = subprocess.run(args + ["--resume", "--iters", "3"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    after = ResultsFile(out / "results.csv").read()
    keys = [r.config_key() for r in after]
    assert len(after) == 16 and len(set(keys)) == 16
    assert all(r in after for r in before), "rows measured before the interruption are kept as they were"
    assert f"{len(before)} of 16 rows already" in done.stderr
