"""The asic target in host.compare and `python -m codesign`: rows judged like every Q15 row at the contract's Bc
(whatever the array's shape), the datapath's output (values and row shifts) byte-identical to the board twin's at the
same Bc, latency from the cycle model, and bad arguments in one line."""

from pathlib import Path

import numpy as np
import pytest

from codesign import target
from codesign.bits import run_head
from codesign.cycles import head_cycles
from codesign.datapath import Datapath
from helpers import have, run_module
from host import q15
from host.sweep import cli as compare
from host.results_file import ResultsFile


def test_asic_rows_are_judged_and_carry_the_models_latency(tmp_path):
    code = compare.main(["--targets", "asic", "--seq", "17,64", "--dim", "32", "--heads", "2", "--causal", "both",
                         "--asic-array", "16x32", "--asic-dataflow", "os,ws", "--out", str(tmp_path)])
    rows = ResultsFile(tmp_path / "results.csv").read()
    assert code == 0 and len(rows) == 2 * 2 * 2
    assert {row.kernel for row in rows} == {"sa16x32-os-acc40", "sa16x32-ws-acc40"}
    for row in rows:
        assert row.status == "ok" and row.bit_exact is True and row.target == "asic", row.message
        assert (row.br, row.bc) == (16, q15.BC) and row.clock_hz == 1_000_000_000  # Bc: the contract's, not C
        dataflow = row.kernel.split("-")[1]
        per_head = head_cycles(Datapath(rows=16, cols=32, dataflow=dataflow), row.seq, row.dim, row.causal)
        assert row.cycles == 2 * per_head.cycles  # two heads, one after another
        assert row.p50_ms == pytest.approx(row.cycles / 1e9 * 1e3)
        assert row.peak_gflops == pytest.approx(2 * 16 * 32)
        assert row.message.startswith("modelled:") and "ASIC model: 16x32" in row.device
        assert row.timing_source == "modelled: codesign cycle model"
        assert "mapper" not in row.message  # one array, serial: its one mapping, nothing to name
    assert "sa16x32-ws-acc40" in (tmp_path / "results.md").read_text()


def test_an_asic_row_on_two_arrays_names_the_mappers_mapping(tmp_path):
    """Two heads on two 8×8 arrays: each array takes one head (heads over 2) with half of the 32 B/cycle DRAM
    interface, so the problem takes one head's cycles on an 8×8 array at 16 B/cycle; the roof is both arrays' 2 × 64
    MACs, 2 operations each, at 1 GHz: 256 GFLOP/s."""
    code = compare.main(["--targets", "asic", "--seq", "64", "--dim", "16", "--heads", "2", "--causal", "0",
                         "--asic-array", "8x8", "--asic-arrays", "2", "--out", str(tmp_path)])
    (row,) = ResultsFile(tmp_path / "results.csv").read()
    assert code == 0 and row.status == "ok" and row.bit_exact is True and row.kernel == "sa8x8-os-acc40-p2"
    assert row.cycles == head_cycles(Datapath(rows=8, cols=8, dram_bytes_per_cycle=16), 64, 16, False).cycles
    assert row.peak_gflops == pytest.approx(256) and row.br == 8
    assert "the mapper chose: query tiles of 8 rows; folds back to back" in row.message
    assert row.message.endswith("; 2 of 2 arrays: heads over 2") and "of the 2 arrays' MACs" in row.message


def test_the_overlap_schedule_runs_a_tile_smaller_than_the_buffers_refuse_for_r_rows(tmp_path):
    """A 2 KB Q buffer holds 2048 / (64 words × 2 B) = 16 query rows at d 64: too few for the 32×32 array's 32-row
    tile under the serial schedule (a skipped row), enough for the mapper's tiles of at most 16 rows under overlap."""
    code = compare.main(["--targets", "asic", "--seq", "64", "--dim", "64", "--heads", "1", "--causal", "0",
                         "--asic-buffers-kb", "2,64,64,128", "--asic-schedule", "serial",
                         "--out", str(tmp_path / "serial")])
    (serial,) = ResultsFile(tmp_path / "serial" / "results.csv").read()
    assert code == 1 and serial.status == "skipped"  # 1: no row of the sweep was measured
    assert "q_buffer_kb=2 holds less than one query tile (32x64 words) = 4096 B" in serial.message
    code = compare.main(["--targets", "asic", "--seq", "64", "--dim", "64", "--heads", "1", "--causal", "0",
                         "--asic-buffers-kb", "2,64,64,128", "--asic-schedule", "overlap", "--asic-divider",
                         "pipelined", "--out", str(tmp_path / "overlap")])
    (overlap,) = ResultsFile(tmp_path / "overlap" / "results.csv").read()
    assert code == 0 and overlap.status == "ok" and overlap.bit_exact is True, overlap.message
    assert overlap.kernel == "sa32x32-os-acc40-buf2_64_64_128-overlap-pdiv" and overlap.br <= 16
    assert f"the mapper chose: query tiles of {overlap.br} rows" in overlap.message


def test_narrow_accumulators_give_wrong_rows_and_exit_1(tmp_path):
    # 24-bit accumulators cannot hold QKᵀ sums of N(0,1) data quantised to Q15 (products up to 2³⁰)
    code = compare.main(["--targets", "asic", "--seq", "64", "--dim", "32", "--heads", "1", "--causal", "0",
                         "--asic-acc-bits", "24,40", "--out", str(tmp_path)])
    rows = {row.kernel: row for row in ResultsFile(tmp_path / "results.csv").read()}
    assert code == 1
    narrow, wide = rows["sa32x32-os-acc24"], rows["sa32x32-os-acc40"]
    assert narrow.status == "wrong" and narrow.bit_exact is False and "not bit-exact" in narrow.message
    assert "accumulator results overflowed (24-bit, wrap)" in narrow.message
    assert wide.status == "ok" and narrow.rel_l2 > 100 * wide.rel_l2


def test_the_datapath_matches_the_board_twins_bytes():
    for module in ("unicorn", "capstone", "elftools"):
        pytest.importorskip(module, reason=f"{module} is not installed (pip install -e '.[mcu]')")
    if not have("arm-none-eabi-gcc"):
        pytest.skip("arm-none-eabi-gcc is not installed (scripts/setup.sh installs it)")
    from mcu.sim.q15emu import shared_emulator

    rng = np.random.default_rng(3)
    for seq, dim, causal in ((17, 8, False), (64, 32, True), (97, 59, True)):
        q, k, v = (rng.integers(-20000, 20000, (seq, dim)).astype(np.int16) for _ in range(3))
        params = q15.Q15Params(seq, dim, causal, q15.BC, *q15.score_scale(0, 0, dim))
        board = shared_emulator().run(params, q, k, v)[0]
        asic = run_head(q, k, v, params, Datapath(rows=16, cols=32)).out
        assert board.o.tobytes() == asic.o.tobytes(), (seq, dim, causal)
        assert board.shift.tobytes() == asic.shift.tobytes(), (seq, dim, causal)


def test_kernels_are_named_after_the_datapaths():
    import argparse

    parser = argparse.ArgumentParser()
    target.add_options(parser.add_argument_group("asic"))
    args = parser.parse_args(["--asic-array", "8x8,16x16", "--asic-dataflow", "is", "--asic-acc-bits", "36,48",
                              "--asic-overflow", "saturate"])
    names = list(target.kernels(target.settings(args)))
    assert names == ["sa8x8-is-acc36s", "sa8x8-is-acc48s", "sa16x16-is-acc36s", "sa16x16-is-acc48s"]


@pytest.mark.parametrize("args,needle", [
    (["--asic-array", "0x4"], "array '0x4' has a side of 0; allowed: 1..256 each"),
    (["--asic-array", "32"], "array '32' is not RxC"),
    (["--asic-dataflow", "os,xs"], "dataflow='xs' is unknown; allowed: os, ws, is"),
    (["--asic-acc-bits", "70"], "acc-bits=70 is out of range; allowed: 16..64"),
    (["--asic-overflow", "clip"], "overflow='clip' is unknown"),
    (["--asic-clock", "-5"], "clock=-5 is out of range"),
    (["--asic-clock", "nan"], "clock=nan is out of range"),
    (["--asic-clock", "1000000.5"], "clock=1000000.5 is not a whole number of Hz; allowed: whole Hz in 1e+06..1e+10"),
    (["--asic-clock", "1000000000.0000001"], "clock=1000000000.0000001 is not a whole number of Hz"),  # 1e9 as a float
    (["--asic-buffers-kb", "1,2"], "not four sizes"),
    (["--asic-dram-bw", "0"], "dram-bw=0 is out of range"),
    (["--asic-arrays", "65"], "arrays=65 is out of range; allowed: 1..64"),
    (["--asic-schedule", "fast"], "schedule='fast' is unknown; allowed: serial, overlap"),
    (["--asic-divider", "radix4"], "divider='radix4' is unknown; allowed: iterative, pipelined, reciprocal"),
])
def test_bad_asic_options_exit_2_with_one_line(args, needle, tmp_path):
    done = run_module("host.compare", "--targets", "asic", *args, "--out", str(tmp_path / "o"), timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and needle in lines[0], done.stderr


@pytest.mark.parametrize("option,value,needle", [
    ("arrays", "0", "arrays=0 is out of range; allowed: 1..64"),
    ("arrays", "2.5", "arrays"),
    ("schedule", "overlapped", "schedule='overlapped' is unknown; allowed: serial, overlap"),
    ("divider", "", "divider='' is unknown; allowed: iterative, pipelined, reciprocal"),
])
def test_the_issue_33_datapath_options_refuse_a_bad_value_in_one_line(option, value, needle, tmp_path, capsys):
    """In process (the subprocess cases above run only under `slow`): `codesign run` and the asic target alike."""
    from codesign.__main__ import main as codesign_main

    assert codesign_main(["run", f"--{option}", value]) == 2
    assert compare.main(["--targets", "asic", f"--asic-{option}", value, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(needle in line for line in err), err


def test_a_command_that_does_not_map_gets_no_mapping_options():
    """`mapped=False` (a drawing, not a run): no --arrays, --schedule or --divider, and the datapath their defaults."""
    import argparse

    from codesign.options import add_datapath_options, datapaths

    parser = argparse.ArgumentParser(exit_on_error=False)
    add_datapath_options(parser.add_argument_group("datapath"), mapped=False)
    with pytest.raises(SystemExit):  # argparse's own refusal of an unknown option
        parser.parse_args(["--arrays", "2"])
    (dp,) = datapaths(parser.parse_args(["--array", "8x8"]))
    assert (dp.rows, dp.arrays, dp.schedule, dp.divider) == (8, 1, "serial", "iterative")


def test_a_buffer_too_small_for_the_problem_is_a_skipped_row_naming_it(tmp_path):
    args = ["--targets", "asic", "--seq", "32", "--dim", "64,256", "--heads", "1", "--causal", "0",
            "--asic-buffers-kb", "4,64,64,128", "--out", str(tmp_path)]
    assert compare.main(args) == 0  # d 64 fits: its row is ok
    rows = {row.dim: row for row in ResultsFile(tmp_path / "results.csv").read()}
    assert rows[64].status == "ok" and rows[256].status == "skipped"
    assert "q_buffer_kb=4 holds less than one query tile (32x256 words) = 16384 B at dim 256" in rows[256].message
    # --resume measures a skipped row again (host/results.py REMEASURED_STATUSES: a capability may have come); it is
    # skipped again, so this run measured nothing (exit 1), and the file keeps one row per configuration
    assert compare.main(args + ["--resume"]) == 1
    kept = ResultsFile(tmp_path / "results.csv").read()
    again = {row.dim: row for row in kept}
    assert len(kept) == 2 and again[64] == rows[64] and again[256].status == "skipped"


def test_resume_tells_datapaths_apart_by_every_parameter(tmp_path):
    args = ["--targets", "asic", "--seq", "32", "--dim", "16", "--heads", "1", "--causal", "0", "--out", str(tmp_path)]
    assert compare.main(args) == 0
    assert compare.main(args + ["--resume", "--asic-clock", "2e9", "--asic-exp-lanes", "1"]) == 0
    rows = ResultsFile(tmp_path / "results.csv").read()
    assert [row.kernel for row in rows] == ["sa32x32-os-acc40", "sa32x32-os-acc40-e1-2000MHz"]
    assert rows[1].clock_hz == 2_000_000_000 and rows[1].p50_ms == pytest.approx(rows[1].cycles / 2e9 * 1e3)


def test_codesign_run_prints_the_figures():
    done = run_module("codesign", "run", "--seq", "97", "--dim", "59", "--array", "16x8", "--dataflow", "is",
                      "--causal", "1", timeout=120)
    assert done.returncode == 0, done.stderr
    head = head_cycles(Datapath(rows=16, cols=8, dataflow="is"), 97, 59, True)
    assert f"cycles     {head.cycles:,}" in done.stdout
    for needle in (f"bit_exact  yes (host/q15.py at Bc={q15.BC}", "rel_l2", "softmax", "dram_read_k_bytes",
                   "verdict    ok"):
        assert needle in done.stdout
    assert "not the contract's" not in done.stdout
    other = run_module("codesign", "run", "--seq", "17", "--dim", "8", "--bc", "16", timeout=120)
    assert other.returncode == 0 and f"at Bc=16, not the contract's {q15.BC}," in other.stdout, other.stderr


@pytest.mark.parametrize("args,needle", [
    (["run", "--seq", "0"], "seq=0 is out of range"),
    (["run", "--array", "300x2"], "300"),
    (["run", "--arrays", "0"], "arrays=0 is out of range; allowed: 1..64"),
    (["run", "--dim", "256", "--buffers-kb", "1,64,64,128"], "q_buffer_kb=1 holds less than one query tile"),
    (["gemm", "4", "4"], "K"),
    (["widths", "--bits", "8"], "acc-bits=8 is out of range"),
    (["run", "--causal"], "--causal: expected one argument"),
    (["run", "--causal", "yes"], "invalid choice: 'yes'"),
    (["diagram", "--out", "docs/codesign_datapath.png"], "names an image file; allowed: a folder"),
    (["nonsense"], "unknown command 'nonsense'"),
])
def test_codesign_cli_errors_are_one_line(args, needle):
    done = run_module("codesign", *args, timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and needle in lines[0], done.stderr


def test_the_width_sweep_writes_its_table_and_plot(tmp_path):
    done = run_module("codesign", "widths", "--seq", "8", "--dims", "4", "--bits", "33,34,35", "--array", "4x4",
                      "--bc", "4", "--out", str(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr
    # d 4: QKᵀ needs 32 + 2 = 34 bits; P·V over Bc 4: 4·32767·32768 < 2³² → 33 bits: predicted 34.
    assert "   4        34                34" in done.stdout  # the extreme input, wrapping, breaks below 34
    assert (tmp_path / "widths.png").stat().st_size > 0
    assert len((tmp_path / "widths.csv").read_text().splitlines()) == 1 + 2 * 2 * 3
    assert done.stdout.startswith("machine: load average ") and " anchors" in done.stdout  # time beside its anchor
    assert "codesign widths: 12 of 12 heads in" in done.stderr  # progress in a log, not a tty's bar


def test_the_diagram_is_drawn_into_its_folder(tmp_path):
    done = run_module("codesign", "diagram", "--array", "8x16", "--out", str(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "codesign_datapath.png").read_bytes()[:4] == b"\x89PNG"
    done = run_module("codesign", "diagram", "--format", "svg", "--out", str(tmp_path), timeout=120)
    assert done.returncode == 0 and b"<svg" in (tmp_path / "codesign_datapath.svg").read_bytes()[:400]


def test_every_written_default_is_git_ignored_and_every_option_says_its_default():
    from codesign import diagram, explore_cli, widths

    root = Path(__file__).resolve().parents[2]
    for default in (diagram.DEFAULT_OUT, explore_cli.DEFAULT_OUT, widths.DEFAULT_OUT):
        assert default.parts[:2] == ("reports", "latest")  # .gitignore has reports/latest/
    assert "reports/latest/" in (root / ".gitignore").read_text().splitlines()
    for command in ("run", "gemm", "widths", "diagram", "actions", "explore", "bench", "synth"):
        done = run_module("codesign", command, "--help", timeout=60)
        assert done.returncode == 0, done.stderr
        options = [line for line in done.stdout.splitlines() if line.strip().startswith("--")]
        assert options, command


def test_gemm_takes_the_datapaths_array_and_dataflow_by_default(capsys):
    from codesign.__main__ import main

    assert main(["gemm", "64", "64", "64"]) == 0
    assert capsys.readouterr().out.startswith("GEMM M=64 N=64 K=64 on a 32x32 array, dataflow os ")


def test_run_with_both_masks_reports_each(capsys):
    from codesign.__main__ import main

    assert main(["run", "--seq", "17", "--dim", "8", "--causal", "both"]) == 0
    out = capsys.readouterr().out
    assert "problem    B 1 H 1 N 17 d 8: " in out and "problem    B 1 H 1 N 17 d 8 causal: " in out
    assert out.count("verdict    ok") == 2


@pytest.mark.parametrize("text,hz", [("1e9", 1_000_000_000), ("1.5e9", 1_500_000_000), ("1000000", 1_000_000),
                                     (" 168000000 ", 168_000_000), ("1.000000001e9", 1_000_000_001)])
def test_the_asic_clock_is_read_exactly_in_whole_hz(text, hz):
    from codesign.options import hertz

    assert hertz(text) == hz and isinstance(hertz(text), int)
