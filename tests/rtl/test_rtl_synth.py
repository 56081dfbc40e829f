"""The synthesis flow (codesign/rtl/synth.py, `python -m codesign synth`): Yosys's stat output is parsed and weighed
into NAND2 gate equivalents by the cited NanGate cell areas; a MAC cell's gate count and flip-flops are what its
circuit needs; GE grows with the accumulator; a 2×2 array costs four cells within a derived band; a missing or
failing Yosys is one line, and so is every bad argument. The full table (every unit) is marked slow."""

from __future__ import annotations

import errno
import json
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("amaranth", reason="Amaranth HDL is not installed (pip install -e '.[rtl]')")

from codesign.__main__ import main as codesign_main
from codesign.rtl import synth
from codesign.rtl import synth_cli
from codesign.rtl.mac import MacCell
from codesign.technology import GATES
from helpers import have, run_module
from host.errors import SpecError, TargetError, UnavailableError

needs_yosys = pytest.mark.skipif(not have("yosys"), reason=synth.MISSING_YOSYS)

#: NanGate FreePDK45 areas (µm²) the expected weights are computed from: NAND2_X1, INV_X1, NOR2_X1, DFF_X1.
NAND2_UM2, INV_UM2, NOR2_UM2, DFF_UM2 = 0.798, 0.532, 0.798, 4.522

#: `stat -json` as Debian's yosys 0.23 writes it (its odd indentation kept), for a design of 4 NANDs, 2 XORs, 1 NOT
#: and 3 flip-flops in one module.
STAT_0_23 = """{
   "creator": "Yosys 0.23 (git sha1 7ce5011c24b)",
   "invocation": "stat -json ",
   "modules": {
      "\\\\toy": {
         "num_wires":         12,
         "num_cells":         10,
         "num_cells_by_type": {
            "$_DFF_P_": 3,
            "$_NAND_": 4,
            "$_NOT_": 1,
            "$_XOR_": 2
         }
      }
   },
      "design": {
         "num_wires":         12,
         "num_cells":         10,
         "num_cells_by_type": {
            "$_DFF_P_": 3,
            "$_NAND_": 4,
            "$_NOT_": 1,
            "$_XOR_": 2
         }
      }
}
"""


def test_parse_stat_reads_the_design_totals():
    assert synth.parse_stat(STAT_0_23) == {"$_DFF_P_": 3, "$_NAND_": 4, "$_NOT_": 1, "$_XOR_": 2}


def test_parse_stat_sums_the_modules_without_a_design_total():
    data = json.loads(STAT_0_23)
    del data["design"]
    data["modules"]["\\other"] = {"num_cells_by_type": {"$_NAND_": 6, "$_MUX_": 1}}
    assert synth.parse_stat(json.dumps(data)) == {"$_DFF_P_": 3, "$_NAND_": 10, "$_NOT_": 1, "$_XOR_": 2,
                                                  "$_MUX_": 1}


@pytest.mark.parametrize("text", ["", "not json", "{}", '{"design": {"num_cells_by_type": 3}}'])
def test_parse_stat_refuses_other_text_in_one_line(text):
    with pytest.raises(TargetError, match="not the JSON") as caught:
        synth.parse_stat(text)
    assert "\n" not in str(caught.value)


def test_weights_are_nangate_areas_over_nand2():
    weights = synth.WEIGHTS
    assert weights["$_NAND_"] == 1
    assert weights["$_NOT_"] == pytest.approx(INV_UM2 / NAND2_UM2)  # 2/3
    assert weights["$_DFF_P_"] == pytest.approx(DFF_UM2 / NAND2_UM2)  # 5.67
    assert weights["$_ANDNOT_"] == pytest.approx((INV_UM2 + NOR2_UM2) / NAND2_UM2)  # an inverter and a NOR2
    # a cell that does more costs more: NOT < NAND <= AND < XOR < MUX < DFF
    assert weights["$_NOT_"] < weights["$_NAND_"] <= weights["$_AND_"] < weights["$_XOR_"] < weights["$_MUX_"] \
        < weights["$_DFF_P_"]


def test_gate_equivalents_of_hand_counts():
    # 4 NAND2 + 2 XOR2 (1.596 µm² each) + 1 INV + 3 DFF, over NAND2_X1's 0.798 µm²
    expected = (4 * NAND2_UM2 + 2 * 1.596 + INV_UM2 + 3 * DFF_UM2) / NAND2_UM2
    assert synth.gate_equivalents(synth.parse_stat(STAT_0_23)) == pytest.approx(expected)


def test_an_unweighted_cell_type_is_an_error_naming_it():
    with pytest.raises(TargetError, match=r"\$_AOI3_"):
        synth.gate_equivalents({"$_NAND_": 2, "$_AOI3_": 1})


# ---------------------------------------------------------------- Yosys itself

@pytest.fixture(scope="module")
def macs():
    """MAC cells at 24, 32, 40 and 48 accumulator bits (about a second each)."""
    return {bits: synth.synthesize(MacCell(bits), f"mac_{bits}") for bits in (24, 32, 40, 48)}


@needs_yosys
def test_mac_cell_gate_count(macs):
    cell = macs[40]
    # Flip-flops: the accumulator and the result shadow register (40 bits each), a and b passed on (16 each), and
    # valid, first, last passed on: 115, nothing else registered, nothing removed (every one drives an output).
    assert cell.flip_flops == 40 + 40 + 16 + 16 + 3
    # GE: the 115 flip-flops are 652 GE; a 16×16 multiplier is 256 partial-product ANDs (341 GE) and about 225 full
    # adders of 2 XORs and a MUX or 3 NANDs (5-7 GE each, 1,100-1,600 GE), the 41-bit adder and first-clear about
    # 40 more full adders and ANDs (250-350 GE), the valid and last muxes 80 × 2.33 GE: so 2,500 at the least; simple
    # gates without full-adder cells can double the arithmetic, so 6,000 at the most.
    assert 2_500 <= cell.ge <= 6_000
    assert cell.seconds < 60


@needs_yosys
def test_gate_equivalents_grow_with_the_accumulator(macs):
    widths = sorted(macs)
    for narrow, wide in zip(widths, widths[1:]):
        # 8 more bits: 16 more flip-flops (accumulator and shadow, 91 GE), 8 more adder bits and valid/last mux
        # bits (a full adder and two muxes, about 12 GE a bit), and below 32 bits 8 more product columns the wrap
        # no longer discards (at most 16 ANDs and 15 full adders each, about 130 GE): more than the flip-flops
        # alone, at most 91 + 8 · 12 + 8 · 130 < 1,250
        assert macs[wide].flip_flops - macs[narrow].flip_flops == 2 * (wide - narrow)
        assert 16 * synth.WEIGHTS["$_DFF_P_"] < macs[wide].ge - macs[narrow].ge < 1_250


@needs_yosys
def test_a_2x2_array_costs_four_cells(macs):
    from codesign.rtl.array import SystolicArray

    array = synth.synthesize(SystolicArray(2, 2, 40), "array_2x2")
    per_cell = array.ge / 4
    # Beside the four cells the array adds its skew (row 1's a and column 1's b delayed one cycle, 32 bits, and
    # the flag and capture delays, a few bits) and drops what nothing reads (the right column's a and flags, the
    # bottom row's b, every cell's last out: about 75 bits). Both are well under 10% of a cell's 115 flip-flops
    # and its arithmetic, so the per-cell figure is within 10% of one cell.
    assert 0.9 * macs[40].ge <= per_cell <= 1.1 * macs[40].ge


@needs_yosys
def test_a_yosys_failure_is_one_line():
    with pytest.raises(TargetError, match="yosys failed on broken") as caught:
        synth.run_yosys("module broken(input a, output b);\n  assign b = ;\nendmodule\n", "broken")
    assert "\n" not in str(caught.value)


def test_a_killed_yosys_is_named_by_its_signal(monkeypatch, tmp_path):
    fake = tmp_path / "yosys"
    fake.write_text("#!/bin/sh\nkill -KILL $$\n")  # dies as the OOM killer would leave it
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TargetError) as caught:
        synth.run_yosys("module m(input a, output b);\n  assign b = a;\nendmodule\n", "m")
    assert str(caught.value) == "yosys on m was killed by SIGKILL" and caught.value.status == "killed"


@needs_yosys
def test_a_yosys_timeout_is_one_line():
    with pytest.raises(TargetError, match="ran past") as caught:
        synth.synthesize(MacCell(64, "saturate"), "slow_mac", timeout_s=0.01)
    assert caught.value.status == "timeout"


@needs_yosys
def test_the_calibration_is_what_this_yosys_makes_of_this_rtl():
    """The committed codesign/rtl_gates.toml against a fresh synthesis of its quick units (the 40-bit MAC cell, the
    EXP2 lane, the divider, the rescale lane: about 6 s); Yosys is deterministic, so they agree to the digit."""
    from codesign.rtl.divider import Divider
    from codesign.rtl.exp2 import Exp2Unit
    from codesign.rtl.rescale import RescaleUnit

    calibration = tomllib.loads(GATES.read_text())
    if calibration["yosys"] != synth_cli.yosys_version():
        pytest.skip(f"the calibration was written by {calibration['yosys']}")
    written = {"MacCell(40)": calibration["mac"]["wrap"][calibration["mac"]["acc_bits"].index(40)],
               "Exp2Unit()": calibration["exp2"]["ge"],
               f"Divider({calibration['divider']['latency']})": calibration["divider"]["ge"],
               f"RescaleUnit({calibration['rescale']['width']})": calibration["rescale"]["ge"]}
    units = {"MacCell(40)": MacCell(40), "Exp2Unit()": Exp2Unit(),
             f"Divider({calibration['divider']['latency']})": Divider(latency=calibration["divider"]["latency"]),
             f"RescaleUnit({calibration['rescale']['width']})": RescaleUnit(calibration["rescale"]["width"])}
    stale = {name: (written[name], round(synth.synthesize(unit, "unit").ge, 3)) for name, unit in units.items()}
    stale = {name: pair for name, pair in stale.items() if pair[0] != pytest.approx(pair[1], abs=1e-3)}
    assert not stale, (f"(written, now) GE differ for {stale}: the RTL changed since codesign/rtl_gates.toml was "
                       f"written; run `{calibration['command']}` again")


# ---------------------------------------------------------------- without Yosys

def test_missing_yosys_is_the_one_line_reason(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert synth.yosys_missing() == synth.MISSING_YOSYS
    with pytest.raises(UnavailableError, match="^yosys not found: install Debian's yosys"):
        synth.synthesize(object(), "mac_40")  # the unit is never touched: the check comes before the export
    assert codesign_main(["synth", "--units", "mac"]) == 1
    assert capsys.readouterr().err == f"kbench: {synth.MISSING_YOSYS}\n"


@pytest.mark.parametrize("argv, message", [
    (["--array", "0x4"], "array '0x4' has a side of 0; allowed: 1..256"),
    (["--array", "4by4"], "not RxC"),
    (["--array", "17x16"], "272 cells; allowed: up to 256"),
    (["--acc-bits", "15"], "acc-bits=15 is out of range; allowed: 16..64"),
    (["--acc-bits", "65"], "acc-bits=65 is out of range; allowed: 16..64"),
    (["--acc-bits", "forty"], "'forty' is not an integer"),
    (["--units", "mac,fpu"], "--units 'fpu' is unknown; allowed: mac, exp2"),
    (["--units", ""], "not a comma-separated list"),
    (["--timeout", "0"], "timeout=0 is out of range"),
    (["--units", "mac", "--write-calibration", "x.toml"], "leave out --units"),
    (["--write-calibration", "/no/such/folder/gates.toml"], "cannot write a file there"),
    (["--write-calibration", ""], "'' is empty; allowed: a file path"),
])
def test_bad_arguments_are_one_line(argv, message, capsys):
    assert codesign_main(["synth", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kbench: error: ") and message in err and err.count("\n") == 1


# ---------------------------------------------------------------- what a careless or hostile user does

def _elaborate(unit) -> None:
    """Elaborate the unit a fake receives, as the real export would, so Amaranth counts it used (the fakes skip the
    export itself)."""
    from amaranth.hdl import Fragment

    Fragment.get(unit, None)


def _fake_synthesis(job, unit=None):
    """A Synthesis with as many NAND2s as the job's label has characters (each job a different, known GE)."""
    if unit is not None:
        _elaborate(unit)
    return synth.Synthesis(job.top, {"$_NAND_": len(job.label)}, 0.0, 0.0)


@pytest.fixture
def fake_yosys(monkeypatch):
    """Yosys 'present' and its synthesis replaced by _fake_synthesis, so the command's own logic runs in a moment."""
    monkeypatch.setattr(synth_cli, "yosys_missing", lambda: "")
    monkeypatch.setattr(synth_cli, "environment", lambda: {"yosys": "Yosys fake", "machine": "test"})
    labels = {job.top: job for job in synth_cli.calibration_jobs((8, 8), 40) + synth_cli.table_jobs(
        tuple(synth_cli.UNIT_KINDS), (8, 8), 40)}
    monkeypatch.setattr(synth_cli, "synthesize", lambda unit, top, timeout_s: _fake_synthesis(labels[top], unit))
    return labels


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc, a file system nobody can write in")
def test_write_calibration_into_a_read_only_file_system_is_refused_before_synthesising(capsys):
    # os.access says yes to root on a read-only file system: the place is tried by making a file there
    assert codesign_main(["synth", "--write-calibration", "/proc/gates.toml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kbench: error: --write-calibration /proc/gates.toml: cannot write a file there (")
    assert err.count("\n") == 1 and "synth [" not in err


def test_a_read_only_file_system_reports_the_writes_error_not_the_cleanups(fake_yosys, tmp_path, monkeypatch, capsys):
    # a read-only mount refuses the staging file's write and its removal alike (EROFS); the write's line is the one
    def read_only(*_args, **_kwargs):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(Path, "write_text", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)
    assert codesign_main(["synth", "--write-calibration", str(tmp_path / "gates.toml")]) == 2
    assert capsys.readouterr().err == (f"kbench: error: --write-calibration {tmp_path / 'gates.toml'}: cannot write a "
                                       "file there (Read-only file system); allowed: a file path in an existing, "
                                       "writable folder\n")
    results = {job: _fake_synthesis(job) for job in synth_cli.calibration_jobs((8, 8), 40)}
    with pytest.raises(SpecError, match=r"gates.toml: cannot write it \(Read-only file system\)$"):
        synth_cli.write_calibration(tmp_path / "gates.toml", results, [], {"yosys": "Yosys 0.23", "machine": "m"})


def test_a_calibration_command_with_quotes_is_valid_toml(fake_yosys, monkeypatch):
    results = {job: _fake_synthesis(job) for job in synth_cli.calibration_jobs((8, 8), 40)}
    command = 'python -m codesign synth --write-calibration /tmp/it\'s a "dir"\\gates.toml'
    env = {"yosys": 'Yosys "0.23"', "machine": "host\\1, CPU 'x'"}
    written = tomllib.loads(synth_cli.calibration_text(results, command, env))
    assert written["command"] == command and written["machine"] == env["machine"]
    assert written["exp2"]["ge"] == len("EXP2 unit")


def test_a_calibration_written_to_an_awkward_path_reads_back(fake_yosys, tmp_path, capsys):
    import shlex

    path = tmp_path / 'it\'s a "gates" file.toml'
    assert codesign_main(["synth", "--write-calibration", str(path)]) == 0
    written = tomllib.loads(path.read_text())
    assert shlex.split(written["command"]) == ["python", "-m", "codesign", "synth", "--write-calibration", str(path)]
    assert written["divider"]["ge"] == len("divider latency 18")
    assert sorted(tmp_path.iterdir()) == [path]  # no staging file left beside it


def test_one_failed_synthesis_keeps_the_others(fake_yosys, monkeypatch, capsys):
    def divider_times_out(unit, top, timeout_s):
        _elaborate(unit)
        if top.startswith("divider"):
            raise TargetError(f"yosys on {top} ran past {timeout_s:g} s and was stopped", status="timeout")
        return _fake_synthesis(fake_yosys[top], unit)

    monkeypatch.setattr(synth_cli, "synthesize", divider_times_out)
    assert codesign_main(["synth", "--units", "exp2,divider,rescale", "--timeout", "5"]) == 1
    out, err = capsys.readouterr()
    table = {line[:26].strip(): line[26:].split() for line in out.splitlines()}
    assert table["EXP2 unit"][2] == str(len("EXP2 unit"))  # GE column of the units done before and after
    assert table["rescale unit 48-bit"][2] == str(len("rescale unit 48-bit"))
    assert " ".join(table["divider latency 18"]) == "yosys on divider_18 ran past 5 s and was stopped"
    assert err.splitlines()[-1] == ("kbench: 1 of 3 units failed (the table has the others); divider latency 18: "
                                    "yosys on divider_18 ran past 5 s and was stopped")


def test_an_interrupt_prints_the_units_done_and_writes_nothing(fake_yosys, monkeypatch, tmp_path, capsys):
    done = []

    def third_is_interrupted(unit, top, timeout_s):
        _elaborate(unit)
        if len(done) == 2:
            raise KeyboardInterrupt
        done.append(top)
        return _fake_synthesis(fake_yosys[top], unit)

    monkeypatch.setattr(synth_cli, "synthesize", third_is_interrupted)
    assert codesign_main(["synth", "--write-calibration", str(tmp_path / "gates.toml")]) == 130
    out, err = capsys.readouterr()
    assert "MAC cell acc 16 wrap" in out and "MAC cell acc 24 wrap" in out and "MAC cell acc 32" not in out
    assert err.splitlines()[-1] == ("kbench: interrupted after 2 of 26 units (the table has them); no calibration "
                                    "written")
    assert list(tmp_path.iterdir()) == []  # neither the calibration nor its staging file


def test_amaranth_without_a_yosys_to_export_with_is_unavailable(monkeypatch, capsys):
    from amaranth.back import verilog

    def no_yosys(unit, **kwargs):
        _elaborate(unit)
        raise verilog.YosysError("Could not find an acceptable Yosys binary. Searched: system")

    monkeypatch.setattr(verilog, "convert", no_yosys)
    with pytest.raises(UnavailableError, match="^Amaranth's Verilog export of mac_40 needs a Yosys of 0.40"):
        synth.to_verilog(MacCell(40), "mac_40")
    monkeypatch.setattr(synth, "yosys_missing", lambda: "")
    monkeypatch.setattr(synth_cli, "yosys_missing", lambda: "")
    assert codesign_main(["synth", "--units", "exp2"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("kbench: Amaranth's Verilog export of exp2 needs") and "Traceback" not in err


@needs_yosys
def test_sigterm_stops_yosys_and_leaves_no_temporary_folder(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    from helpers import ROOT

    env = dict(os.environ, TMPDIR=str(tmp_path))
    child = subprocess.Popen([sys.executable, "-m", "codesign", "synth", "--units", "array", "--array", "8x8"],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("kbench-synth-*")):  # Yosys is at work on the 4x4 array
        assert time.monotonic() < deadline and child.poll() is None, "no synthesis started"
        time.sleep(0.1)
    time.sleep(1)
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 130
    assert err.splitlines()[-1] == "kbench: interrupted after 0 of 2 units" and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # Yosys was killed and waited for before its folder went


# ---------------------------------------------------------------- the full table

@pytest.mark.slow
@needs_yosys
def test_the_full_table():
    done = run_module("codesign", "synth", "--array", "4x4", timeout=900)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for label in ("MAC cell acc 24", "MAC cell acc 48", "EXP2 unit", "divider latency 18", "score unit acc 40",
                  "rescale unit 48-bit", "array 4x4 acc 40"):
        assert label in out
    row = next(line for line in out.splitlines() if line.startswith("array 4x4"))
    ratio = float(row.split()[-3])  # the columns end: ÷ MAC cell, export s, yosys s
    assert 0.9 <= ratio <= 1.1  # per cell within 10% of one MAC cell, as for 2×2
    assert "synth [" in done.stderr  # progress lines on stderr


@needs_yosys
@pytest.mark.slow
def test_the_parallel_datapath_is_its_copies_of_the_units():
    """Two copies of a 2×2 array with one softmax lane (score, EXP2, rescale) and one divider each, synthesised as one
    netlist (codesign/rtl/parallel.py), against each unit synthesised alone: the explorer counts P arrays as P
    datapaths, and synthesis agrees to within ABC's run-to-run mapping of the larger netlist (about 40 s)."""
    from codesign.rtl.array import SystolicArray
    from codesign.rtl.divider import Divider
    from codesign.rtl.exp2 import Exp2Unit
    from codesign.rtl.parallel import ParallelDatapath
    from codesign.rtl.rescale import RescaleUnit
    from codesign.rtl.score import ScoreUnit

    together = synth.synthesize(ParallelDatapath(2, 2, 2, 1, 1), "parallel")
    alone = sum(synth.synthesize(unit, "unit").ge for unit in (SystolicArray(2, 2, 40), ScoreUnit(40), Exp2Unit(),
                                                               RescaleUnit(48), Divider(18)))
    assert together.ge == pytest.approx(2 * alone, rel=0.01)
