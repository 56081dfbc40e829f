"""The operating-point explorer (codesign/explore.py, `python -m codesign explore`): every point agrees with the
cycle model and the energy model called directly on that one datapath, the fronts are non-dominated (checked by
brute force), bit-exactness follows the contract's width and is measured below it, bad spaces and folders are
refused in one line, and the command writes its CSVs and plots with measured rows beside the model."""

from __future__ import annotations

import csv
import dataclasses
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest

from codesign import console, energy
from codesign.__main__ import main as codesign_main
from codesign.cycles import head_cycles
from codesign.datapath import Datapath
from codesign.explore import check_space, explore, fronts, pareto, sensitivity, space_size
from codesign.technology import GATES, TABLE, GateCalibration, Technology
from codesign.widths import inputs, predicted_width
from host import q15
from host.errors import SpecError
from host.out_lock import LOCK_NAME
from host.problem import AttentionProblem
from host.reference import attention, errors
from host.results import Result
from host.results_file import ResultsFile

TECH = Technology.load()
SMALL = {"array": ["8x8", "16x32", "32x16"], "dataflow": ["os", "ws"], "exp_lanes": [4, 16], "dividers": [8],
         "div_latency": [18], "buffers_kb": [[32, 64, 64, 128], [1, 1, 1, 1]], "clock_mhz": [250, 1000],
         "dram_gbps": [16, 256], "node_nm": [45, 7], "acc_bits": [24, 40], "overflow": ["wrap"],
         "dram": ["hbm2", "lpddr4"]}
PROBLEM = AttentionProblem(batch=1, heads=2, seq=97, dim=16, causal=True, dtype="q15")


@pytest.fixture(scope="module")
def small():
    space = check_space(SMALL, TECH)
    return space, explore(PROBLEM, space, TECH)


def test_every_combination_is_one_point(small):
    space, result = small
    configs, total = space_size(space)
    assert configs == 3 * 2 * 2 * 2 * 2 * 2 and total == configs * 2 * 2 * 2 == len(result)
    combos = set(zip(*(result.columns[k].tolist() for k in ("array", "dataflow", "exp_lanes", "buffers_kb",
                                                            "clock_mhz", "dram_gbps", "node_nm", "acc_bits",
                                                            "dram"))))
    assert len(combos) == total


def test_a_point_matches_the_models_called_on_its_own_datapath(small):
    _, result = small
    c = result.columns
    rng = np.random.default_rng(1)
    runnable = np.flatnonzero(c["skipped"] == "")
    for i in rng.choice(runnable, 12, replace=False):
        rows, cols = (int(x) for x in c["array"][i].split("x"))
        buffers = tuple(float(x) for x in c["buffers_kb"][i].split("/"))
        clock = int(c["clock_mhz"][i] * 1e6)
        dp = Datapath(rows=rows, cols=cols, dataflow=c["dataflow"][i], exp_lanes=int(c["exp_lanes"][i]), dividers=8,
                      q_buffer_kb=buffers[0], k_buffer_kb=buffers[1], v_buffer_kb=buffers[2], o_buffer_kb=buffers[3],
                      dram_bytes_per_cycle=c["dram_gbps"][i] * 1e9 / clock, clock_hz=clock)
        head = head_cycles(dp, PROBLEM.seq, PROBLEM.dim, PROBLEM.causal)
        assert c["latency_s"][i] == pytest.approx(head.cycles * 2 / clock)
        node, acc = int(c["node_nm"][i]), int(c["acc_bits"][i])
        traffic = {k: float(v) for k, v in head.traffic.items()}
        # the supply its clock allows and the head's idle PE-cycles (one array: the head's cycles × R × C)
        parts = energy.head_energy(TECH, traffic, rows, cols, acc, 18, buffers, node, c["dram"][i], clock_hz=clock,
                                   cycles=head.cycles)
        units = energy.area(TECH, rows, cols, acc, dp.exp_lanes, 8, buffers, node)
        leak = energy.leakage_w(TECH, units, buffers, rows, cols, node)
        latency = head.cycles * 2 / clock
        assert c["energy_j_low"][i] == pytest.approx(2 * float(parts["total"].low) * 1e-12 + float(leak.low) * latency)
        assert c["energy_j_high"][i] == pytest.approx(2 * float(parts["total"].high) * 1e-12
                                                     + float(leak.high) * latency)
        assert c["area_mm2_low"][i] == pytest.approx(float(units["total"].low) * 1e-6)
        assert c["energy_j_low"][i] <= c["energy_j"][i] <= c["energy_j_high"][i]


def test_points_whose_buffers_cannot_hold_a_tile_say_so(small):
    _, result = small
    c = result.columns
    tiny = c["buffers_kb"] == "1/1/1/1"
    assert np.all(c["skipped"][tiny & (c["array"] == "32x16")] != "")
    assert all("holds less than" in text for text in c["skipped"][tiny & (c["skipped"] != "")])
    assert np.all(np.isnan(c["energy_j"][c["skipped"] != ""]))


def test_bit_exactness_follows_the_contract_width_and_is_measured_below_it(small):
    _, result = small
    c = result.columns
    exact_bits = predicted_width(PROBLEM.dim, q15.BC)  # d 16: 36 bits for QKᵀ; Bc 64: 38 for P·V
    assert 24 < exact_bits <= 40
    # the contract v2's own accuracy on the explorer's probe head (seeded N(0,1), the problem's keys, Bc = 64)
    q, k, v = inputs("normal", PROBLEM.seq, PROBLEM.dim, 0)
    probe = AttentionProblem(batch=1, heads=1, seq=PROBLEM.seq, dim=PROBLEM.dim, causal=PROBLEM.causal, dtype="q15")
    quantized = q15.prepare(probe, *(x[None, None] for x in (q, k, v)))
    gold = attention(q[None, None], k[None, None], v[None, None], PROBLEM.causal, np.float64)
    contract = errors(quantized.dequantize(quantized.expected()), gold).rel_l2
    wide, narrow = c["acc_bits"] == 40, c["acc_bits"] == 24
    assert set(c["bit_exact"][wide]) == {"all inputs"}
    assert set(c["bit_exact"][narrow]) == {"no"}  # 24 bits overflow on N(0,1) data (docs/codesign.md)
    # one accuracy per width for every array shape (8x8, 16x32, 32x16): the bits are the contract's at its Bc
    assert set(c["rel_l2"][wide].tolist()) == {contract}
    assert len(set(c["rel_l2"][narrow].tolist())) == 1
    assert np.all(c["rel_l2"][narrow] > 10 * contract)


def test_the_fronts_are_exactly_the_non_dominated_bit_exact_points(small):
    _, result = small
    c = result.columns
    chosen = dict(fronts(result))
    assert set(chosen) == {"all nodes", "45 nm", "7 nm"}
    objectives = np.column_stack((c["latency_s"], c["energy_j"], c["area_mm2"]))
    for name, idx in chosen.items():
        mask = (c["bit_exact"] == "all inputs") & np.isfinite(c["latency_s"])
        if name != "all nodes":
            mask &= c["node_nm"] == int(name.split()[0])
        members = np.flatnonzero(mask)
        brute = [i for i in members if not any(np.all(objectives[j] <= objectives[i])
                                               and np.any(objectives[j] < objectives[i]) for j in members)]
        assert sorted(set(brute)) == sorted(set(idx.tolist())) or (
            # ties: equal points are kept once
            {tuple(objectives[i]) for i in brute} == {tuple(objectives[i]) for i in idx})


def test_pareto_on_a_hand_made_set():
    points = np.array([[1, 5], [2, 4], [3, 4], [2, 6], [4, 1], [np.nan, 0]], dtype=float)
    assert pareto(points).tolist() == [0, 1, 4]


@pytest.mark.parametrize("space,message", [
    ({"arrayz": ["8x8"]}, "unknown key 'arrayz'"),
    ({"arrays": ["8x8"]}, "arrays='8x8' is not an integer; allowed: 1..64"),
    ({"schedule": ["fast"]}, "schedule='fast' is unknown; allowed: serial, overlap"),
    ({"array": ["8x"]}, "array '8x' is not RxC"),
    ({"array": ["512x8"]}, "array '512x8' is out of range; allowed: 1..256"),
    ({"node_nm": [28]}, "node=28 nm is not in the scaling table"),
    ({"acc_bits": [8]}, "acc_bits=8 is out of range; allowed: 16..64"),
    ({"clock_mhz": [-5]}, "clock_mhz=-5 is out of range"),
    ({"clock_mhz": [1.0000005]}, "clock_mhz=1.0000005 is not a whole number of Hz; allowed: 1..10000 MHz"),
    ({"dataflow": []}, "dataflow must be a non-empty list"),
    ({"dram": ["sram"]}, "dram='sram' is unknown; allowed: hbm2"),
    ({"buffers_kb": [[1, 2, 3]]}, r"buffers_kb entry \[1, 2, 3\] is not \[Q, K, V, O\]"),
])
def test_a_bad_space_is_refused_in_one_line(space, message):
    with pytest.raises(SpecError, match=message):
        check_space(space, TECH)


def _space_file(tmp_path, **changes):
    text = "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in {**SMALL, **changes}.items())
    path = tmp_path / "space.toml"
    path.write_text(text)
    return path


def _gpu_row(problem: AttentionProblem, energy_j: float | None, seq: int | None = None) -> Result:
    return Result(run_id="r", timestamp="t", git_rev="g", host="h", device="NVIDIA H200 (132 SMs)", target="gpu",
                  kernel="flash", dtype="float16", batch=problem.batch, heads=problem.heads, seq=seq or problem.seq,
                  dim=problem.dim, causal=problem.causal, seed=0, status="ok", p50_ms=0.02, energy_j=energy_j,
                  energy_source="measured (NVML)" if energy_j else "", timing_source="measured: CUDA events")


def test_the_command_writes_points_front_and_plots_with_measured_rows(tmp_path, capsys):
    results = tmp_path / "run"
    rows = ResultsFile(results / "results.csv")
    for row in (_gpu_row(PROBLEM, 0.005), _gpu_row(PROBLEM, None), _gpu_row(PROBLEM, 0.001, seq=64)):
        rows.append(row)
    out = tmp_path / "out"
    code = codesign_main(["explore", "--seq", "97", "--dim", "16", "--heads", "2", "--causal", "1",
                          "--space", str(_space_file(tmp_path)), "--results", str(results), "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    with open(out / "points.csv", newline="") as handle:
        points = list(csv.DictReader(handle))
    assert len(points) == space_size(check_space(SMALL, TECH))[1]
    with open(out / "front.csv", newline="") as handle:
        front = list(csv.DictReader(handle))
    assert front and {r["bit_exact"] for r in front} == {"all inputs"}
    assert {r["front"] for r in front} == {"all nodes", "45 nm", "7 nm"}
    for name in ("energy_latency.png", "efficiency.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert ("measured H200 flash float16: 20 µs, 5 mJ (timing measured: CUDA events; energy measured (NVML))"
            in printed)
    assert "left out 1 row(s): another problem" in printed and "1 row(s): gpu row without energy_j" in printed


@pytest.mark.parametrize("args,message", [
    (["--seq", "0"], "seq"),
    (["--results", "nowhere"], "--results nowhere: no results.csv there"),
    (["--space", "missing.toml"], "--space missing.toml: not a readable TOML file"),
    (["--technology", "missing.toml"], "not a readable technology table"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    code = codesign_main(["explore", *args, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1


def test_the_default_space_is_large_and_means_something():
    space = check_space({}, TECH)
    configs, total = space_size(space)
    assert total >= 100_000
    sides = [side for a in space["array"] for side in a]
    assert min(sides) == 8 and max(sides) == 256
    assert min(space["clock_mhz"]) == 200 and max(space["clock_mhz"]) == 1500
    assert set(space["node_nm"]) == {45, 32, 16, 7}
    assert min(space["acc_bits"]) == 24 and max(space["acc_bits"]) == 48
    assert list(itertools.chain(space["dataflow"])) == ["os", "ws", "is"]


def test_the_energy_shares_of_a_point_add_up_to_one(small):
    _, result = small
    c = result.columns
    ok = c["skipped"] == ""
    total = sum(c[f"share_{part}"][ok] for part in (*energy.PARTS, "leakage"))
    assert set(energy.PARTS) >= {"idle", "clock"} and np.allclose(total, 1.0)
    assert np.all(c["share_clock"][ok] > 0) and np.all(c["share_idle"][ok] > 0)  # no SMALL array is ever all busy
    lpddr, hbm = ok & (c["dram"] == "lpddr4"), ok & (c["dram"] == "hbm2")
    # LPDDR4's 8 pJ/bit against HBM's 3.9..13.1 (the device alone to the HBM level): a geometric mean of 7.1
    assert np.median(c["share_dram"][lpddr]) > np.median(c["share_dram"][hbm])


@pytest.mark.parametrize("space,message", [
    ({"exp_lanes": [16.0]}, "exp_lanes=16.0 is not an integer"),
    ({"node_nm": [45.0]}, "node_nm=45.0 is not an integer node"),
    ({"array": ["8_8x8"]}, "array '8_8x8' is not RxC"),
    ({"clock_mhz": [1], "dram_gbps": [204.8]}, r"dram_gbps=204.8 at clock_mhz=1 is 204800 bytes per cycle"),
    ({"exp_lanes": list(range(1, 4097)), "dividers": list(range(1, 200))}, r"operating points .* allowed: up to"),
])
def test_a_space_the_model_cannot_take_is_refused_before_any_work(space, message):
    with pytest.raises(SpecError, match=message):
        check_space(space, TECH)


def test_duplicates_in_the_space_are_merged():
    space = check_space({"node_nm": [45, 45], "buffers_kb": [[32, 64, 64, 128], [32.0, 64, 64, 128]]}, TECH)
    assert space["node_nm"] == [45] and len(space["buffers_kb"]) == 1


def test_the_sensitivity_table_holds_every_other_key_of_the_space():
    space = check_space({**SMALL, "array": ["16x32"], "div_latency": [1, 64], "buffers_kb": [[32, 64, 64, 128]],
                         "dataflow": ["os"], "exp_lanes": [16], "clock_mhz": [1000], "dram_gbps": [256],
                         "node_nm": [7], "acc_bits": [40], "dram": ["hbm2"]}, TECH)
    result = explore(PROBLEM, space, TECH)
    table = {row["parameter"]: row for row in sensitivity(result, 0)}
    assert set(table) == {"div_latency"} and table["div_latency"]["latency_s_spread"] > 1


def test_a_space_without_an_exact_point_still_writes_everything_and_says_why(tmp_path, capsys):
    out = tmp_path / "out"
    (out).mkdir()
    (out / "sensitivity.csv").write_text("stale\n")
    code = codesign_main(["explore", "--seq", "97", "--dim", "16", "--heads", "2",
                          "--space", str(_space_file(tmp_path, acc_bits=[24])), "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and "front all nodes: empty: no point is bit-exact for every input" in printed
    with open(out / "front.csv", newline="") as handle:
        assert list(csv.DictReader(handle)) == []
    assert not (out / "sensitivity.csv").exists()  # the stale one is gone, not claimed as written
    assert (out / "energy_latency.png").read_bytes()[:4] == b"\x89PNG"
    assert not list(out.glob(".tmp-*")) and not (out / LOCK_NAME).exists()


def test_an_interrupted_run_leaves_an_earlier_run_untouched(tmp_path, capsys, monkeypatch):
    from codesign import explore_cli

    out = tmp_path / "out"
    args = ["explore", "--seq", "97", "--dim", "16", "--heads", "2", "--space", str(_space_file(tmp_path)),
            "--out", str(out)]
    assert codesign_main(args) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(explore_cli, "plot_efficiency", interrupted)  # the last file: the others are staged by then
    assert codesign_main(args) == 130
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == f"kbench: interrupted; nothing written to {out} (files of an earlier run there are unchanged)"
    assert not [line for line in err if line.startswith("kbench:")][:-1]  # guard's one line, nothing else
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize("text", ["x = " + "[" * 900 + "]" * 900, "x = " + "{a=" * 900 + "1" + "}" * 900])
def test_a_space_nested_too_deep_is_refused_in_one_line(tmp_path, capsys, text):
    space = tmp_path / "deep.toml"
    space.write_text(text)
    assert codesign_main(["explore", "--space", str(space), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == (f"kbench: error: --space {space}: not a readable TOML file (TOMLDecodeError: nested too deep "
                   "for the TOML parser (these tables are flat keys of lists))\n")


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_space_that_is_no_regular_file_is_refused_without_reading_it(tmp_path, capsys, kind):
    space = tmp_path / "space"
    os.mkfifo(space) if kind == "fifo" else space.mkdir()  # a FIFO without a writer: a read would wait forever
    assert codesign_main(["explore", "--space", str(space), "--out", str(tmp_path / "out")]) == 2
    allowed = {"fifo": "a FIFO", "folder": "a folder"}[kind]
    assert capsys.readouterr().err == (f"kbench: error: --space {space}: not a readable TOML file (OSError: "
                                       f"{allowed}; allowed: a regular TOML file)\n")


def test_a_space_where_no_point_can_run_is_refused_in_one_line_before_writing(tmp_path, capsys):
    # 1 KB buffers hold less than one query tile at d 256 (8 rows × 256 words × 2 B = 4096 B): every point skips
    out = tmp_path / "out"
    space = _space_file(tmp_path, array=["8x8"], dataflow=["os"], exp_lanes=[4], buffers_kb=[[1, 1, 1, 1]],
                        clock_mhz=[1000], dram_gbps=[256], node_nm=[45], acc_bits=[40], dram=["hbm2"])
    code = codesign_main(["explore", "--seq", "1024", "--dim", "256", "--heads", "2", "--causal", "0",
                          "--space", str(space), "--out", str(out)])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kbench:")]
    assert code == 2 and err == ["kbench: error: --space: none of the 1 points can run B 1 H 2 N 1024 d 256 (the "
                                 "first: q_buffer_kb=1 holds less than one query tile (8x256 words) = 4096 B at dim "
                                 "256; allowed: >= 4); give larger buffers_kb, a slower clock_mhz, or a smaller "
                                 "problem, as the reason says"]
    assert sorted(p.name for p in out.iterdir()) == []  # nothing written, the lock released


def test_a_second_explore_into_the_same_folder_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    lock = out / LOCK_NAME
    lock.write_text(f"{os.getpid()} {socket.gethostname()} host.compare\n")  # a running process: this test's own
    code = codesign_main(["explore", "--seq", "97", "--dim", "16", "--heads", "2",
                          "--space", str(_space_file(tmp_path)), "--out", str(out)])
    err = capsys.readouterr().err.splitlines()  # not a bad argument: 1, naming who holds it
    assert code == 1 and err[-1] == (f"kbench: --out {out}: another sweep is writing there (host.compare, PID "
                                     f"{os.getpid()} on {socket.gethostname()}, {lock})")
    assert lock.read_text() == f"{os.getpid()} {socket.gethostname()} host.compare\n"  # still the holder's
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # nothing written


def _free_pid() -> int:
    """A PID no process holds now (counted down from the kernel's largest), as a killed explore's lock leaves."""
    pid = int(Path("/proc/sys/kernel/pid_max").read_text()) - 1
    while Path(f"/proc/{pid}").exists():
        pid -= 1
    return pid


@pytest.mark.parametrize("content,age_s,why", [("{dead} HOST host.compare\n", 0,
                                                "PID {dead} of host.compare is not running"),
                                               ("{dead} HOST\n", 0, "PID {dead} is not running"),  # older formats
                                               ("{dead}\n", 0, "PID {dead} is not running"),
                                               ("", 60, "it holds no PID")])
def test_a_stale_lock_of_a_killed_explore_is_taken_over_in_one_line(tmp_path, capsys, content, age_s, why):
    dead = _free_pid()
    out = tmp_path / "out"
    out.mkdir()
    lock = out / LOCK_NAME
    lock.write_text(content.format(dead=dead).replace("HOST", socket.gethostname()))
    os.utime(lock, (time.time() - age_s, time.time() - age_s))
    code = codesign_main(["explore", "--seq", "97", "--dim", "16", "--heads", "2",
                          "--space", str(_space_file(tmp_path)), "--out", str(out)])
    err = capsys.readouterr().err.splitlines()
    assert code == 0 and f"kbench: codesign explore: took over the stale lock {lock} ({why.format(dead=dead)})" in err
    assert (out / "front.csv").exists() and not lock.exists() and not list(out.glob(LOCK_NAME + "*"))


def test_sigterm_stops_an_explore_in_one_line_with_143_and_frees_its_lock(tmp_path):
    out = tmp_path / "out"
    run = subprocess.Popen([sys.executable, "-m", "codesign", "explore", "--seq", "97", "--dim", "16", "--heads", "2",
                            "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (out / LOCK_NAME).exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    run.terminate()  # SIGTERM, as a job scheduler or `kill` sends
    err = run.communicate(timeout=60)[1]
    assert run.returncode == 143, err
    assert [line for line in err.splitlines() if line.startswith("kbench:")] == [
        f"kbench: terminated (SIGTERM); nothing written to {out} (files of an earlier run there are unchanged)"]
    assert "Traceback" not in err and not (out / LOCK_NAME).exists() and not list(out.glob(".tmp-*"))


def test_ctrl_c_stops_an_explore_started_in_the_background_by_a_shell(tmp_path):
    """A non-interactive shell starts `python -m codesign explore ... &` with SIGINT ignored; `kill -INT` must still
    stop it in one line with 130 (guard answers Ctrl-C again)."""
    out = tmp_path / "out"
    run = subprocess.Popen([sys.executable, "-m", "codesign", "explore", "--seq", "97", "--dim", "16", "--heads", "2",
                            "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # as `sh -c 'cmd &'`
    deadline = time.monotonic() + 60
    while not (out / LOCK_NAME).exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    run.send_signal(signal.SIGINT)
    err = run.communicate(timeout=60)[1]
    assert run.returncode == 130, err
    assert [line for line in err.splitlines() if line.startswith("kbench:")] == [
        f"kbench: interrupted; nothing written to {out} (files of an earlier run there are unchanged)"]
    assert not (out / LOCK_NAME).exists()


def test_measured_rows_without_a_positive_latency_and_energy_are_left_out_with_the_reason(tmp_path, capsys):
    results = tmp_path / "run"
    rows = ResultsFile(results / "results.csv")
    rows.append(_gpu_row(PROBLEM, 0.0))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "results.csv").write_text("")
    code = codesign_main(["explore", "--seq", "97", "--dim", "16", "--heads", "2", "--causal", "1",
                          "--space", str(_space_file(tmp_path)), "--results", str(results), str(empty),
                          "--out", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert code == 0 and "measured H200" not in printed
    assert "1 row(s): latency or energy not a positive finite number" in printed
    assert "results.csv: no rows" in printed


def test_the_synthesis_based_area_is_gates_times_the_nand2_area():
    """One point by hand from codesign/rtl_gates.toml and technology.toml: an 8×8 os array of 40-bit wrapping cells,
    4 EXP2 lanes, 8 dividers, at 45 nm."""
    gates = tomllib.loads(GATES.read_text())
    table = tomllib.loads(TABLE.read_text())
    shapes = list(zip(gates["array"]["rows"], gates["array"]["cols"], gates["array"]["acc_bits"]))
    if (8, 8, 40) not in shapes or max(r * c for r, c, _ in shapes) != 64:
        pytest.skip("the calibration's largest array is not 8x8 at 40 bits")
    # the array's overhead over its cells is measured on the largest array, so 64 cells × overhead × the 40-bit
    # cell is that array's own GE; then 8 score lanes at 40 bits, 4 EXP2 and 4 rescale lanes, 8 dividers
    score = gates["score"]["ge"][gates["score"]["acc_bits"].index(40)]
    ge = (gates["array"]["ge"][shapes.index((8, 8, 40))] + 8 * score
          + 4 * (gates["exp2"]["ge"] + gates["rescale"]["ge"])
          + 8 * gates["divider"]["ge"])
    # each library's NAND2 at 45 nm: its own area × area_from_45[45] / area_from_45[its node]
    factor = dict(zip(table["scaling"]["nodes_nm"], table["scaling"]["area_from_45"]))
    nand2 = [e["area_um2"] * factor[45] / factor[table["sources"][e["source"]]["node_nm"]] for e in table["nand2"]]
    buffers = (32.0, 64.0, 64.0, 128.0)
    table_units = energy.area(TECH, 8, 8, 40, 4, 8, buffers, 45)
    compare = TECH.area("compare", 32, 45)  # the max comparators have no RTL: from the table
    low, high = table["assumptions"]["control_overhead"]
    space = check_space({"array": ["8x8"], "dataflow": ["os"], "exp_lanes": [4], "dividers": [8], "div_latency": [18],
                         "buffers_kb": [list(buffers)], "clock_mhz": [1000], "dram_gbps": [256], "node_nm": [45],
                         "acc_bits": [40], "overflow": ["wrap"], "dram": ["hbm2"]}, TECH)
    c = explore(PROBLEM, space, TECH).columns
    assert c["synth_ge"][0] == pytest.approx(ge)
    assert c["synth_area_mm2_low"][0] == pytest.approx(
        (ge * min(nand2) + 4 * float(compare.low) + float(table_units["buffers"].low)) * low * 1e-6)
    assert c["synth_area_mm2_high"][0] == pytest.approx(
        (ge * max(nand2) + 4 * float(compare.high) + float(table_units["buffers"].high)) * high * 1e-6)
    assert c["synth_area_mm2_low"][0] <= c["synth_area_mm2"][0] <= c["synth_area_mm2_high"][0]


def test_a_missing_or_partial_gate_calibration_is_one_line(tmp_path):
    with pytest.raises(SpecError, match="not a readable gate calibration"):
        GateCalibration.load(tmp_path / "none.toml")
    partial = tmp_path / "partial.toml"
    partial.write_text("[mac]\nacc_bits = [24, 40]\nwrap = [1.0, 2.0]\nsaturate = [1.0, 2.0]\n")
    with pytest.raises(SpecError, match=r"\[score\] is missing; allowed: a table"):
        GateCalibration.load(partial)


def set_entry(text: str, section: str, key: str, value: str) -> str:
    """The calibration's text with `key = value` in [section] (the first such line after its header)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"[{section}]"))
    at = next(i for i in range(start + 1, len(lines)) if lines[i].startswith(f"{key} ="))
    lines[at] = f"{key} = {value}"
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("edit, message", [
    (lambda text: text.replace("[mac]", "mac = 3\n[mac_unused]", 1), r"\[mac\] is 3; allowed: a table"),
    (lambda text: set_entry(text, "score", "ge", "[1.0]"), r"\[score\] ge is \[1.0\]; allowed: 7 numbers"),
    (lambda text: set_entry(text, "array", "acc_bits", "[4, 200]"),
     r"\[array\] acc_bits \[4, 200\] are outside \[mac\] acc_bits; allowed: 16..64"),
])
def test_a_hand_edited_gate_calibration_is_refused_naming_its_section(tmp_path, edit, message):
    bad = tmp_path / "gates.toml"
    bad.write_text(edit(GATES.read_text()))
    with pytest.raises(SpecError, match=message):
        GateCalibration.load(bad)


def test_an_accumulator_outside_the_gate_calibration_is_refused():
    gates = GateCalibration.load()
    with pytest.raises(SpecError, match="outside the MAC gate calibration"):
        gates.mac(np.array([gates.acc_bits[0] - 1]))


@pytest.mark.parametrize("entry, message", [
    ({"source": "nobody", "cell": "NAND2", "area_um2": 1.0}, "NAND2 entry .* names no source with a node"),
    ({"source": "assumption", "cell": "NAND2", "area_um2": 1.0}, "names no source with a node"),
    ({"source": "nangate45", "cell": "NAND2_X1", "area_um2": -0.798},
     "area_um2 = -0.798; allowed: a finite number > 0"),
])
def test_a_bad_nand2_entry_is_refused_in_one_line(entry, message):
    data = tomllib.loads(TABLE.read_text())
    data["nand2"] = [entry]
    with pytest.raises(SpecError, match=message):
        Technology(data)


def test_the_nand2_band_holds_each_library_at_its_own_node():
    table = tomllib.loads(TABLE.read_text())
    for entry in table["nand2"]:
        node = table["sources"][entry["source"]]["node_nm"]
        band = TECH.nand2_area(node)
        assert float(band.low) <= entry["area_um2"] <= float(band.high)


@pytest.mark.parametrize("value,seconds_text,joules_text", [
    (44.4e-3, "44.4 ms", "44.4 mJ"), (22.8, "22.8 s", "22.8 J"), (3.01, "3.01 s", "3.01 J"),
    (2.61e-4, "261 µs", "261 µJ"), (9.996e-4, "1 ms", "1 mJ"), (7.5e-9, "7.5 ns", "7.5 nJ"), (0.0, "0 ns", "0 nJ"),
])
def test_console_figures_pick_their_unit(value, seconds_text, joules_text):
    assert console.seconds(value) == seconds_text and console.joules(value) == joules_text


def test_a_band_is_printed_in_its_middles_unit():
    assert console.joules(1.05e-3, (0.704e-3, 1.56e-3)) == "1.05 mJ (0.704..1.56)"


def test_progress_in_a_log_has_one_prefix_and_never_overshoots_its_total(capsys):
    """capsys' stderr is no terminal: lines, not a bar. No `what` gives one prefix; a count that ends elsewhere than
    the total says the total was an estimate instead of '4,565 of 4,564'."""
    with console.Progress("codesign widths", None, 2, "head") as progress:
        progress.update(2)
    with console.Progress("codesign run", "RTL", 10, "cycle") as progress:
        progress.update(4)
    with console.Progress("codesign run", "RTL", 10, "cycle") as progress:
        progress.update(11)
    lines = [line.rsplit(" in ", 1)[0] for line in capsys.readouterr().err.splitlines()]
    assert lines == ["codesign widths: 2 of 2 heads", "codesign run: RTL: 4 cycles (the total of 10 was an estimate)",
                     "codesign run: RTL: 11 cycles (the total of 10 was an estimate)"]


def test_a_plot_title_names_targets_only_when_some_were_placed():
    from codesign.explore_plots import title
    from codesign.measured import MeasuredPoint

    twin = MeasuredPoint("mcu", "STM32F407 (twin) q15", 0.8, 0.1, "modelled: board twin's cycle model",
                         "datasheet", None)
    gpu = MeasuredPoint("gpu", "H200 flash", 1e-5, 1e-3, "measured: CUDA events", "measured (NVML)", 814.0)
    assert "targets" not in title("t", PROBLEM, [])
    assert "beside modelled targets" in title("t", PROBLEM, [twin])
    assert "beside measured and modelled targets" in title("t", PROBLEM, [gpu, twin])
    assert twin.kind == "modelled" and gpu.kind == "measured"


def test_the_twins_modelled_rows_are_called_modelled(tmp_path, capsys):
    results = tmp_path / "run"
    row = dataclasses.replace(_gpu_row(PROBLEM, 0.005), target="mcu", device="kbench twin of F4DISC", kernel="q15",
                              dtype="q15", timing_source="modelled: board twin's cycle model",
                              energy_source="datasheet: 40 mA x 3.3 V")
    ResultsFile(results / "results.csv").append(row)
    code = codesign_main(["explore", "--seq", "97", "--dim", "16", "--heads", "2", "--causal", "1",
                          "--space", str(_space_file(tmp_path)), "--results", str(results),
                          "--out", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert code == 0 and "modelled STM32F407 (twin) q15: 20 µs, 5 mJ (timing modelled: " in printed
    assert "measured STM32F407" not in printed


def test_both_masks_explore_into_their_own_folders(tmp_path, capsys):
    out = tmp_path / "out"
    code = codesign_main(["explore", "--seq", "97", "--dim", "16", "--heads", "2", "--causal", "both",
                          "--space", str(_space_file(tmp_path)), "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0
    for name in ("full", "causal"):
        assert (out / name / "front.csv").is_file() and (out / name / "points.csv").is_file()
    assert "B 1 H 2 N 97 d 16: " in captured.out and "B 1 H 2 N 97 d 16 causal: " in captured.out
    # progress in a log (capsys' stderr is no terminal): each stage named as it starts
    points = space_size(check_space(SMALL, TECH))[1]
    for stage in ("codesign explore: cycle model: ", f"codesign explore: {points:,} points evaluated ",
                  "codesign explore: writing ", "codesign explore: plots"):
        assert stage in captured.err


def test_the_new_datapath_dimensions_are_searched_with_their_mapping_and_cost():
    """arrays, schedule and divider in the space: an overlap point is never slower than its serial twin (the mapper
    tries the serial mapping too), two arrays cost twice one's area, every point names its mapping, and a point
    slower than a smaller array says why (checked against the latencies themselves)."""
    space = check_space({**SMALL, "array": ["8x8", "16x16", "16x32"], "dataflow": ["os"], "exp_lanes": [16],
                         "buffers_kb": [[32, 64, 64, 128]], "clock_mhz": [1000], "dram_gbps": [256], "node_nm": [7],
                         "acc_bits": [40], "dram": ["hbm2"], "arrays": [1, 2], "schedule": ["serial", "overlap"],
                         "divider": ["iterative", "pipelined"]}, TECH)
    result = explore(PROBLEM, space, TECH)
    c = result.columns
    assert len(result) == 3 * 2 * 2 * 2 and (c["skipped"] == "").all()
    key = {(c["array"][i], c["arrays"][i], c["schedule"][i], c["divider"][i]): i for i in range(len(result))}
    for (array, arrays, schedule, divider), i in key.items():
        assert "query tile" in c["mapping"][i]
        if schedule == "overlap":
            assert c["latency_s"][i] <= c["latency_s"][key[array, arrays, "serial", divider]]
        if arrays == 2:
            one = key[array, 1, schedule, divider]
            assert c["area_mm2"][i] == pytest.approx(2 * c["area_mm2"][one])
            assert c["latency_s"][i] <= c["latency_s"][one]
        if divider == "pipelined":  # 8 dividers of 18 stages each: 8 · 17 more dividers' worth of logic
            iterative = key[array, arrays, schedule, "iterative"]
            per_divider = energy.area(TECH, 1, 1, 40, 1, 1, (1, 1, 1, 1), 7)["dividers"]
            for end, share in (("low", 0), ("high", 1)):  # each end of the band: (logic + SRAM) × the overhead's end
                extra = c[f"area_mm2_{end}"][i] - c[f"area_mm2_{end}"][iterative]
                expected = 8 * 17 * getattr(per_divider, end) * TECH.overhead[share] * 1e-6 * arrays
                assert extra == pytest.approx(expected)
    slower = 0
    for (array, arrays, schedule, divider), i in key.items():
        r, k = (int(x) for x in array.split("x"))
        smaller = [key[a, arrays, schedule, divider] for a in ("8x8", "16x16", "16x32")
                   if a != array and all(int(x) <= y for x, y in zip(a.split("x"), (r, k)))]
        faster = [j for j in smaller if c["latency_s"][j] < c["latency_s"][i]]
        assert bool(c["slower_than"][i]) == bool(faster), (array, arrays, schedule, divider)
        slower += len(faster)
    assert result.slower_pairs == slower and result.array_pairs == 3 * 8
    assert result.cycle_free_points_per_s > 0 and 0 < result.cycle_seconds < result.seconds
