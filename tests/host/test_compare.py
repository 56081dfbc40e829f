"""`python -m host.compare`: the CPU sweep end to end, bad arguments, failing rows, interruption and --resume."""

import csv
import json
import os
import signal
import subprocess
import sys

import pytest

from helpers import ROOT, run_module
from host.sweep import cli as compare
from host.sweep import registry as compare_targets
from host.results_file import ResultsFile

FAKE_TARGET = '''
"""A target for tests: fails on seq 17, runs out of memory on seq 33, computes a wrong output on seq 65 (1 % off),
else one ok row. Its one option, --fake-scale, scales every output (1.0: right)."""
import numpy as np

from host.verdict import check_float

KERNELS = {"fake": "float32"}
CALLS = []

def add_options(group):
    group.add_argument("--fake-scale", type=float, default=1.0, help="scale every output by this")

def settings(args):
    return args.fake_scale

def available(settings):
    return True, "always"

def device(settings=None, session=None):
    return "fake device"

def run(problem, inputs, options):
    CALLS.append(problem.seq)
    if problem.seq == 17:
        raise RuntimeError("kernel exploded")
    if problem.seq == 33:
        raise MemoryError("4 GiB requested")
    out = inputs.golden.astype(np.float32) * np.float32(options.settings * (1.01 if problem.seq == 65 else 1.0))
    return [options.context.result(problem, target="fake", kernel=options.kernel, device=device(),
                                   p50_ms=1.0, min_ms=1.0, timing_source="measured: wall clock",
                                   verdict=check_float(out, problem, inputs.golden))]
'''

MISSING_TARGET = '''
"""A target whose capability is absent."""
KERNELS = {"ghost": "float32"}

def add_options(group):
    pass

def settings(args):
    return None

def available(settings):
    return False, "no ghost board attached"

def device(settings=None, session=None):
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
        assert float(r["rel_l2"]) > 0 and r["bit_exact"] == ""  # judged ok by the verdict: no verdict message
        assert bool(r["energy_j"]) != ("energy: none (" in r["message"]), "energy or why not"
        assert float(r["p50_ms"]) > 0 and float(r["p50_ci_low_ms"]) <= float(r["p50_ms"])
        assert r["timing_source"] == "measured: wall clock, perf_counter_ns"
        assert r["instructions"] or r["counters_reason"], "counters or the reason they are missing"
        assert float(r["peak_gflops"]) > 0 and float(r["gflops"]) > 0
    assert (out / "results.md").read_text().count("| 128 |") >= 2
    assert list(out.glob("*.png"))
    assert "python -m host.compare --targets cpu" in (out / "runs.jsonl").read_text()


@pytest.mark.parametrize("args,needle", [
    (["--seq", "0"], "seq=0"),
    (["--dim", "0"], "dim=0"),
    (["--dim", "300"], "dim=300"),
    (["--seed", "4294967296"], "seed=4294967296 is out of range; allowed: 0..4294967295"),  # before anything starts
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
    monkeypatch.setattr(compare_targets, "TARGETS",
                        {**compare_targets.TARGETS, "fake": "fake_target", "ghost": "missing_target"})
    import fake_target

    fake_target.CALLS.clear()
    return fake_target


def test_failing_and_wrong_rows_are_recorded_and_the_sweep_goes_on(fake_targets, tmp_path, capsys):
    out = tmp_path / "o"
    code = compare.main(["--targets", "fake,ghost", "--seq", "1,17,33,65,97", "--causal", "0", "--out", str(out)])
    assert code == 1
    rows = {r.seq: r for r in ResultsFile(out / "results.csv").read()}
    assert [rows[s].status for s in (1, 17, 33, 65, 97)] == ["ok", "error", "oom", "wrong", "ok"]
    assert "RuntimeError: kernel exploded" in rows[17].message
    assert "4 GiB requested" in rows[33].message
    wrong = rows[65]
    assert wrong.rel_l2 is not None and 5e-3 < wrong.rel_l2 < 2e-2, "a wrong row keeps its figures"
    assert wrong.message.startswith("wrong") and "rel_l2" in wrong.message and "worst O(" in wrong.message
    printed = capsys.readouterr()
    assert "ghost" in printed.out and "no ghost board attached" in printed.out
    assert "1 wrong" in printed.out
    report = (out / "results.md").read_text()
    assert "wrong" in report and "no ghost board attached" in report
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert runs[-1]["unavailable"] == {"ghost": "no ghost board attached"}


def test_the_console_table_keeps_its_columns_and_says_each_status_once(fake_targets, tmp_path, capsys):
    """Rows without figures (an error, an oom) stay aligned: '-' fills each column's width; a status word is not
    repeated by its message ('wrong: wrong (…)')."""
    assert compare.main(["--targets", "fake", "--seq", "1,17,33,65", "--causal", "0", "--out", str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("target/kernel"))
    table = lines[lines.index(header) + 1:lines.index(header) + 5]
    column = header.index("  status") + 2
    assert [line[column:].split(":")[0] for line in table] == ["ok", "error", "oom", "wrong"]
    assert all(line[column - 2:column] == "  " for line in table)
    assert "wrong: float32 tolerance" in table[3] and "wrong: wrong" not in table[3]


def test_a_sweep_into_a_log_shows_a_line_per_finished_row(fake_targets, tmp_path, capsys):
    """stderr that is not a terminal gets no tqdm bar: each finished row says so at once, with the time so far."""
    assert compare.main(["--targets", "fake", "--seq", "1,97", "--causal", "0", "--out", str(tmp_path)]) == 0
    progress = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kbench: ")]
    assert [line.split(" (")[0] for line in progress] == ["kbench: 1/2 fake/fake B1 H4 N1 d64: ok",
                                                          "kbench: 2/2 fake/fake B1 H4 N97 d64: ok"]
    assert all(line.endswith(" s)") for line in progress)


def test_progress_tells_a_kernels_dtypes_apart(tmp_path, capsys):
    """One kernel in two dtypes is two rows: each progress line names a dtype other than the default float32."""
    assert compare.main(["--targets", "gpu", "--gpu-device", "fake", "--gpu-dtype", "fp32,fp16", "--kernels", "flash",
                         "--seq", "64", "--dim", "64", "--heads", "1", "--causal", "0", "--out", str(tmp_path)]) == 0
    progress = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kbench: ")]
    assert [line.split(": ok")[0] for line in progress] == ["kbench: 1/2 gpu/flash B1 H1 N64 d64",
                                                            "kbench: 2/2 gpu/flash float16 B1 H1 N64 d64"]


def test_a_named_target_that_kernels_leaves_without_a_kernel_is_said(tmp_path, capsys):
    """--targets cpu,asic --kernels numpy: asic runs no row, and the sweep says so instead of dropping it unseen."""
    assert compare.main(["--targets", "cpu,asic", "--kernels", "numpy", "--seq", "16", "--dim", "8", "--heads", "1",
                         "--causal", "0", "--iters", "1", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "kbench: --kernels numpy leaves the asic target no kernel, so it runs no row (its kernels: sa32x32" in err
    assert "cpu target no kernel" not in err and len(ResultsFile(tmp_path / "results.csv").read()) == 1


def test_a_note_every_cpu_row_carries_is_printed_once(tmp_path, capsys, monkeypatch):
    """No RAPL: every CPU row's message says why (results.csv keeps it), the console says it once."""
    from host.cpu import rapl

    monkeypatch.setattr(rapl, "POWERCAP_ROOT", tmp_path / "no-powercap")
    assert compare.main(["--targets", "cpu", "--seq", "1,2,3", "--dim", "1", "--heads", "1", "--causal", "0",
                         "--iters", "2", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert out.count("no RAPL") == 1 and "cpu/numpy, every row: energy: none (no RAPL: " in out
    assert all("no RAPL" in row.message for row in ResultsFile(tmp_path / "o" / "results.csv").read())


def test_a_cpu_row_whose_median_is_far_above_its_fastest_call_is_flagged_noisy(monkeypatch):
    """p50 3x the minimum: 'noisy: …' in the row's message, from NOISY_RATIO (2x) up; the verdict stays ok."""
    from host.cpu import target as cpu
    from host.problem import AttentionProblem
    from host.target_api import Inputs, RunContext, RunOptions
    from host.timing import summarize

    problem = AttentionProblem(batch=1, heads=1, seq=8, dim=4, causal=False)
    options = RunOptions(context=RunContext("test", "rev", "host"), kernel="numpy", warmup=0, iters=5)
    for samples, note in (([1.0, 3.0, 3.0, 3.1, 3.2], "noisy: p50 3.0x min (flagged from 2x)"),
                          ([1.0, 1.9, 1.9, 1.9, 2.0], "")):
        monkeypatch.setattr(cpu, "time_calls", lambda *args, samples=samples, **kwargs: samples)
        [row] = cpu.run(problem, Inputs(problem), options)
        assert row.status == "ok" and cpu.noise_note(summarize(samples)) == note
        assert row.message.startswith(note) if note else not row.message.startswith("noisy")


def test_only_wrong_rows_make_an_all_ok_sweep_fail(fake_targets, tmp_path):
    assert compare.main(["--targets", "fake", "--seq", "1,97", "--out", str(tmp_path / "a")]) == 0
    assert compare.main(["--targets", "fake", "--seq", "1,97", "--fake-scale", "1.001",
                         "--out", str(tmp_path / "b")]) == 1
    assert {r.status for r in ResultsFile(tmp_path / "b" / "results.csv").read()} == {"wrong"}


def test_a_target_owns_its_options(fake_targets, tmp_path, capsys):
    out = tmp_path / "o"
    assert compare.main(["--targets", "cpu", "--seq", "1", "--dim", "1", "--heads", "1", "--fake-scale", "2",
                         "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "--fake-scale applies to the fake target, which --targets leaves out" in err
    assert "--fake-scale" in compare.build_parser()[0].format_help()
    # typed at its default value, an option is given all the same (a comparison with the default missed it)
    default = str(compare.build_parser()[0].get_default("fake_scale"))
    assert compare.main(["--targets", "cpu", "--seq", "1", "--dim", "1", "--heads", "1", "--fake-scale", default,
                         "--out", str(out), "--resume"]) == 0
    assert "--fake-scale applies to the fake target, which --targets leaves out" in capsys.readouterr().err
    source = (ROOT / "host" / "sweep" / "cli.py").read_text()
    for flag in ("--serial", "--sim", "--baud", "--cpu-cache-sim", "--gpu-device", "--gpu-tile"):
        assert flag not in source, f"{flag} belongs to its target, not to compare.py"


def test_resume_retries_failed_and_wrong_rows_only(fake_targets, tmp_path):
    out = tmp_path / "o"
    args = ["--targets", "fake", "--seq", "1,17,65,97", "--causal", "both", "--out", str(out)]
    assert compare.main(args) == 1
    fake_targets.CALLS.clear()
    assert compare.main(args + ["--resume"]) == 1
    assert fake_targets.CALLS == [17, 17, 65, 65]  # the failed and wrong rows (causal 0 and 1) again, nothing else
    rows = ResultsFile(out / "results.csv").read()
    assert len(rows) == 8 and len({r.config_key() for r in rows}) == 8


def test_resume_with_nothing_left_records_no_run(fake_targets, tmp_path, capsys):
    out = tmp_path / "o"
    args = ["--targets", "fake", "--seq", "1,97", "--out", str(out)]
    assert compare.main(args) == 0
    runs = (out / "runs.jsonl").read_text().splitlines()
    fake_targets.CALLS.clear()
    capsys.readouterr()
    assert compare.main(args + ["--resume"]) == 0
    assert fake_targets.CALLS == [] and (out / "runs.jsonl").read_text().splitlines() == runs
    printed = capsys.readouterr()
    assert "nothing left to measure" in printed.err
    assert "target/kernel" not in printed.out, "no empty table"
    assert "0 rows written (none), 4 of this sweep's rows already done before" in printed.out
    assert "from 1 run(s)" in (out / "results.md").read_text()


def test_a_fresh_run_keeps_the_previous_results_aside(fake_targets, tmp_path):
    out = tmp_path / "o"
    compare.main(["--targets", "fake", "--seq", "1", "--out", str(out)])
    compare.main(["--targets", "fake", "--seq", "97", "--out", str(out)])
    assert [r.seq for r in ResultsFile(out / "results.csv").read()] == [97, 97]
    assert [r.seq for r in ResultsFile(out / "results.csv.prev").read()] == [1, 1]


def test_a_fresh_sweep_stopped_before_its_report_leaves_no_report_of_other_rows(fake_targets, tmp_path, monkeypatch,
                                                                                 keep_signals):
    """The previous run's results.md and plots go aside with its rows: a fresh sweep stopped after one row leaves
    results.csv with that row and no results.md describing the seq 1 rows it no longer holds."""
    out = tmp_path / "o"
    assert compare.main(["--targets", "fake", "--seq", "1", "--out", str(out)]) == 0
    assert "| 1 |" in (out / "results.md").read_text()
    monkeypatch.setenv("KBENCH_STOP_AFTER_ROWS", "1")
    monkeypatch.setenv("KBENCH_STOP_SIGNAL", "INT")
    assert compare.main(["--targets", "fake", "--seq", "97,98", "--out", str(out)]) == 130
    assert not (out / "results.md").exists() and "| 1 |" in (out / "results.md.prev").read_text()
    assert [r.seq for r in ResultsFile(out / "results.csv").read()] == [97]


@pytest.mark.parametrize("how", ["INT", "TERM", "KILL"])
def test_interrupted_sweep_resumes_without_duplicates_or_losses(tmp_path, how):
    out = tmp_path / "o"
    args = [sys.executable, "-m", "host.compare", "--targets", "cpu", "--seq", "32,48,64,80",
            "--dim", "16", "--heads", "1", "--causal", "both", "--iters", "3", "--warmup", "0", "--out", str(out)]
    stop = {**os.environ, compare.STOP_AFTER_ROWS_ENV: "3", compare.STOP_SIGNAL_ENV: how}
    cut = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300, env=stop)
    before = ResultsFile(out / "results.csv").read()
    assert len(before) == 3, "the hook stops the sweep right after its third row"
    if how == "KILL":
        assert cut.returncode == -signal.SIGKILL
    else:
        code, line = {"INT": (130, "interrupted"), "TERM": (143, "terminated (SIGTERM)")}[how]
        assert cut.returncode == code and "--resume" in cut.stderr
        assert f"kbench: {line}; 3 rows measured now and the 0 from before are kept in" in cut.stderr
    done = subprocess.run(args + ["--resume"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    after = ResultsFile(out / "results.csv").read()
    keys = [r.config_key() for r in after]
    assert len(after) == 8 and len(set(keys)) == 8
    assert after[:3] == before, "rows measured before the interruption are kept as they were"
    assert "3 of 8 rows already" in done.stderr


@pytest.mark.parametrize("where", ["file", "under_file"])
def test_an_unusable_out_is_refused_before_any_target_starts(fake_targets, tmp_path, capsys, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    out = blocker if where == "file" else blocker / "sub"
    assert compare.main(["--targets", "fake", "--seq", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kbench: error: --out") and "is a file" in err[0]
    assert fake_targets.CALLS == [] and blocker.read_text() == "not a folder"


def test_nothing_measurable_exits_1_saying_why(fake_targets, tmp_path, capsys):
    """No selected target can run on this machine: not a bad argument (2) but the machine (1), in one line."""
    assert compare.main(["--targets", "ghost", "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "kbench: nothing can be measured: target ghost unavailable: no ghost board attached"
    assert not (tmp_path / "o" / "results.csv").exists()


@pytest.mark.parametrize("argv,needle", [
    (["--targets", "gpu", "--gpu-device", "cuda"], "target gpu unavailable: "),
    (["--targets", "mcu"], "target mcu unavailable: "),  # no --serial, no --sim (or no mcu extras)
    (["--targets", "mcu", "--serial", "/dev/nonexistent"], "target mcu unavailable: "),
])
def test_no_device_for_the_selected_target_exits_1(argv, needle, tmp_path, capsys, monkeypatch):
    from kernels import target as gpu_target
    monkeypatch.setattr(gpu_target, "available", lambda settings=None: (False, "no CUDA device (test)"))
    assert compare.main([*argv, "--seq", "1", "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("kbench: nothing can be measured: ") and needle in err[-1], err


def test_cluster_without_dask_exits_1_naming_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # importing it raises ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "host.sweep.cluster", raising=False)
    assert compare.main(["--targets", "cpu", "--cluster", "tcp://127.0.0.1:8786", "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kbench: --cluster tcp://127.0.0.1:8786: Dask distributed is not "
                                               "installed here") and "[cluster]" in err[0], err


def test_a_resume_over_a_file_that_is_not_results_changes_nothing(fake_targets, tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    garbage = bytes(range(256)) * 3
    (out / "results.csv").write_bytes(garbage)
    assert compare.main(["--targets", "fake", "--seq", "1", "--resume", "--out", str(out)]) == 2
    err = capsys.readouterr().err  # 0x0a ends line 1
    assert "results.csv:2: byte 0x80 is not UTF-8 text" in err and "choose another --out" in err
    assert (out / "results.csv").read_bytes() == garbage and fake_targets.CALLS == []


def test_inputs_too_large_for_the_machine_are_oom_rows_and_the_sweep_fails(fake_targets, tmp_path, capsys):
    out = tmp_path / "o"
    code = compare.main(["--targets", "fake", "--seq", "1048576", "--dim", "256", "--heads", "4096", "--causal", "0",
                         "--out", str(out)])
    [row] = ResultsFile(out / "results.csv").read()
    assert code == 1 and row.status == "oom" and "GiB) of host memory" in row.message and fake_targets.CALLS == []
    assert "no row was measured" in capsys.readouterr().err


@pytest.mark.parametrize("setup,args,needle", [
    ("", ["--out", ""], "'' is empty"),
    ("results_dir", ["--resume"], "results.csv is not a file"),
])
def test_more_unusable_outs_exit_2(fake_targets, tmp_path, capsys, setup, args, needle):
    out = tmp_path / "o"
    if setup == "results_dir":
        (out / "results.csv").mkdir(parents=True)
    argv = ["--targets", "fake", "--seq", "1"] + (["--out", str(out)] if "--out" not in args else []) + args
    assert compare.main(argv) == 2
    assert needle in capsys.readouterr().err and fake_targets.CALLS == []


def test_a_run_log_with_garbage_bytes_still_resumes_and_renders(fake_targets, tmp_path):
    out = tmp_path / "o"
    args = ["--targets", "fake", "--seq", "1,97", "--out", str(out)]
    assert compare.main(args) == 0
    with (out / "runs.jsonl").open("ab") as log:
        log.write(b"garbage\n{not json\n\x00\xff\n")
    assert compare.main(args + ["--resume"]) == 0
    assert "from 1 run(s)" in (out / "results.md").read_text()


def test_a_torn_last_row_is_announced_and_measured_again(fake_targets, tmp_path, capsys):
    out = tmp_path / "o"
    args = ["--targets", "fake", "--seq", "1,97", "--causal", "0", "--out", str(out)]
    assert compare.main(args) == 0
    data = (out / "results.csv").read_bytes()
    (out / "results.csv").write_bytes(data[: data.rfind(b"\n", 0, len(data) - 1) + 40])  # half of the last row
    fake_targets.CALLS.clear()
    assert compare.main(args + ["--resume"]) == 0
    assert "results.csv:3: a torn last row (a writer killed mid-row) is dropped" in capsys.readouterr().err
    assert fake_targets.CALLS == [97] and len(ResultsFile(out / "results.csv").read()) == 2


@pytest.mark.parametrize("rows,signal_name,needle", [
    ("²", "KILL", "KBENCH_STOP_AFTER_ROWS='²' is not a row count"),
    ("0", "KILL", "KBENCH_STOP_AFTER_ROWS='0' is not a row count"),
    ("1", "HUP", "KBENCH_STOP_SIGNAL='HUP' is unknown"),
])
def test_the_stop_hook_refuses_bad_values_naming_the_variable(fake_targets, tmp_path, capsys, monkeypatch, rows,
                                                              signal_name, needle):
    monkeypatch.setenv(compare.STOP_AFTER_ROWS_ENV, rows)
    monkeypatch.setenv(compare.STOP_SIGNAL_ENV, signal_name)
    assert compare.main(["--targets", "fake", "--seq", "1", "--out", str(tmp_path / "o")]) == 2
    assert needle in capsys.readouterr().err and not (tmp_path / "o" / "runs.jsonl").exists()


def test_the_stop_hook_counts_oom_rows_too(fake_targets, tmp_path, monkeypatch):
    """Rows that could not get their inputs are rows like any other: the hook stops the sweep after the first."""
    monkeypatch.setenv(compare.STOP_AFTER_ROWS_ENV, "1")
    monkeypatch.setenv(compare.STOP_SIGNAL_ENV, "INT")
    out = tmp_path / "o"
    code = compare.main(["--targets", "fake", "--seq", "1048576", "--dim", "256", "--heads", "4096",
                         "--causal", "both", "--out", str(out)])
    [row] = ResultsFile(out / "results.csv").read()
    assert code == 130 and row.status == "oom"


def test_resume_keeps_failed_rows_of_configurations_outside_the_sweep(fake_targets, tmp_path):
    out = tmp_path / "o"
    assert compare.main(["--targets", "fake", "--seq", "17,64", "--dim", "8", "--heads", "1", "--causal", "0",
                         "--out", str(out)]) == 1  # seq 17 fails
    assert compare.main(["--targets", "fake", "--seq", "64,80", "--dim", "8", "--heads", "1", "--causal", "0",
                         "--out", str(out), "--resume"]) == 0
    rows = ResultsFile(out / "results.csv").read()
    # the seq 17 error row is not part of the resumed sweep: it stays for a sweep that asks for it again
    assert sorted((row.seq, row.status) for row in rows) == [(17, "error"), (64, "ok"), (80, "ok")]


def test_resume_on_another_device_measures_again_and_keeps_the_old_rows(fake_targets, tmp_path, capsys, monkeypatch):
    out = tmp_path / "o"
    args = ["--targets", "fake", "--seq", "64", "--dim", "8", "--heads", "1", "--causal", "0", "--out", str(out)]
    assert compare.main(args) == 0
    monkeypatch.setattr(fake_targets, "device", lambda settings=None, session=None: "another device")
    capsys.readouterr()
    assert compare.main(args + ["--resume"]) == 0
    err = capsys.readouterr().err
    assert "1 finished rows in" in err and "measured on another device (fake on fake device)" in err
    rows = ResultsFile(out / "results.csv").read()
    assert [row.device for row in rows] == ["fake device", "another device"]
    assert compare.main(args + ["--resume"]) == 0  # now done on this device: nothing measured again
    assert len(ResultsFile(out / "results.csv").read()) == 2


def test_a_full_disk_mid_sweep_keeps_the_rows_written_and_names_the_row_it_could_not_write(fake_targets, tmp_path,
                                                                                             capsys, monkeypatch):
    # Issue 28, item 7: an OSError traceback and a torn row. Now: one line, every earlier row whole on disk, exit 1.
    import errno

    from host import safe_files

    out = tmp_path / "o"
    real_write = os.write

    def fills_up(fd, data):  # the disk fills on the seq 97 row, after 10 of its bytes
        if b",fake,fake,float32,1,4,97,64," in bytes(data):
            real_write(fd, bytes(data[:10]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(safe_files.os, "write", fills_up)
    code = compare.main(["--targets", "fake", "--seq", "1,97", "--causal", "0", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1
    assert [r.seq for r in ResultsFile(out / "results.csv").read()] == [1]
    assert (out / "results.csv").read_bytes().endswith(b"\n")
    last = err.strip().splitlines()[-1]  # after the progress lines of a log
    assert last.startswith(f"kbench: {out / 'results.csv'}: cannot append to it: {os.strerror(errno.ENOSPC)}"), err
    assert "N97" in last and "1 rows measured now" in last and "Traceback" not in err


def test_fresh_runs_keep_every_previous_file(fake_targets, tmp_path):
    # Issue 28, item 5: the third run into one folder destroyed the first run's rows.
    out = tmp_path / "o"
    for seq in ("1", "17", "97"):
        compare.main(["--targets", "fake", "--seq", seq, "--causal", "0", "--out", str(out)])
    assert [r.seq for r in ResultsFile(out / "results.csv.prev").read()] == [1]
    assert [r.seq for r in ResultsFile(out / "results.csv.prev.1").read()] == [17]
    assert [r.seq for r in ResultsFile(out / "results.csv").read()] == [97]
    assert (out / "runs.jsonl.prev").exists() and (out / "runs.jsonl.prev.1").exists()


def test_resume_refuses_columns_the_schema_does_not_know_before_measuring(fake_targets, tmp_path, capsys):
    # Issue 28, item 4: a user's own column was dropped silently by the resume's first append.
    out = tmp_path / "o"
    compare.main(["--targets", "fake", "--seq", "1", "--causal", "0", "--out", str(out)])
    header, line = (out / "results.csv").read_text().splitlines()
    (out / "results.csv").write_text(f"{header},note\n{line},mine\n")
    fake_targets.CALLS.clear()
    capsys.readouterr()
    code = compare.main(["--targets", "fake", "--seq", "1,97", "--causal", "0", "--resume", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and fake_targets.CALLS == []
    assert len(err) == 1 and "(note)" in err[0], err
    assert (out / "results.csv").read_text() == f"{header},note\n{line},mine\n"


def test_an_interrupted_resume_keeps_the_failed_rows_it_has_not_measured_again(fake_targets, tmp_path, monkeypatch,
                                                                               capsys):
    # Issue 28, item 2: --resume deleted every failed and wrong row before measuring them again, so one stopped after
    # its first row had lost the others. A failed row now goes only once its new measurement is on disk.
    out = tmp_path / "o"
    args = ["--targets", "fake", "--seq", "1,17,65", "--causal", "0", "--out", str(out)]
    assert compare.main(args) == 1  # 1 ok, 17 error, 65 wrong
    old = {r.seq: r for r in ResultsFile(out / "results.csv").read()}
    monkeypatch.setenv(compare.STOP_AFTER_ROWS_ENV, "1")
    monkeypatch.setenv(compare.STOP_SIGNAL_ENV, "INT")
    assert compare.main(args + ["--resume"]) == 130
    rows = ResultsFile(out / "results.csv").read()
    assert [(r.seq, r.status) for r in rows] == [(1, "ok"), (65, "wrong"), (17, "error")]
    assert rows[1] == old[65], "65 kept as it was; 17, measured again, comes last"
    monkeypatch.delenv(compare.STOP_AFTER_ROWS_ENV)
    assert compare.main(args + ["--resume"]) == 1
    assert sorted(r.seq for r in ResultsFile(out / "results.csv").read()) == [1, 17, 65], "one row each"


@pytest.mark.parametrize("flag,value", [("--iters", "1000000000000"), ("--warmup", "100001"), ("--iters", "0")])
def test_repeats_beyond_their_range_are_one_line(flag, value, capsys):
    """--iters 10^12 was accepted (and would run for ever): both repeat counts have kernels.sweep's cap."""
    assert compare.main(["--targets", "cpu", flag, value, "--out", "unused"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kbench: error: ") and value in err and "allowed" in err and err.count("\n") == 0


def test_a_sweep_stopped_before_its_first_row_says_no_row_was_measured(tmp_path, monkeypatch, capsys):
    """Ctrl-C before the first row: the line names no results.csv as kept (none was written)."""
    from host.cpu import target as cpu
    from host.sweep import cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cpu, "run", interrupted)
    out = tmp_path / "out"
    code = cli.main(["--targets", "cpu", "--seq", "16", "--dim", "8", "--heads", "1", "--causal", "0", "--out",
                     str(out)])
    assert code == 130 and not (out / "results.csv").exists()
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"kbench: interrupted; no row was measured, so {out / 'results.csv'} was not written: rerun to measure the "
        "sweep")


@pytest.mark.parametrize("name", ["results.csv", "runs.jsonl"])
def test_a_dangling_link_in_out_is_refused_before_a_row_is_written_through_it(tmp_path, capsys, name):
    """An --out whose results.csv (or runs.jsonl) links to nothing: appending would create the link's target,
    outside --out (a resume wrote /nonexistent at the root); refused in one line, nothing made."""
    from host.sweep import cli

    out = tmp_path / "out"
    out.mkdir()
    target = tmp_path / "elsewhere" / name
    target.parent.mkdir()
    (out / name).symlink_to(target)
    for resume in ([], ["--resume"]):
        assert cli.main(["--targets", "cpu", "--seq", "16", "--dim", "8", "--heads", "1", "--causal", "0", "--out",
                         str(out), *resume]) == 2
        assert capsys.readouterr().err.strip() == (f"kbench: error: --out {out}: {out / name} is a link to {target}, "
                                                   "which does not exist; remove the link or choose another --out")
    assert not target.exists()


def test_a_kernel_whose_target_cannot_run_here_is_a_missing_capability_with_its_reason(tmp_path, capsys,
                                                                                       monkeypatch):
    """--kernels flash with no GPU: the gpu target's reason, exit 1 (it was 'unknown kernel', exit 2)."""
    from host.sweep import cli
    from kernels import target as gpu

    monkeypatch.setattr(gpu, "available", lambda settings: (False, "no CUDA device (test)"))
    assert cli.main(["--targets", "cpu,gpu", "--kernels", "flash", "--seq", "16", "--dim", "8", "--out",
                     str(tmp_path)]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "kbench: --kernels flash: no target that runs it can run here (gpu: no CUDA device (test)); the available "
        "targets run: numpy")
