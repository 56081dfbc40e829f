"""kernels.sweep (tile sweep CLI, results rows, heatmap) and kernels.nsight with scripts/run_nsight.sh (ncu CSV
fold), no GPU."""

from __future__ import annotations

import csv
import dataclasses
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, gpu_missing, run_module
import numpy as np

from host.report import render as report
from host.errors import ResultsError, SpecError
from host.problem import AttentionProblem
from host.results import Result
from host.results_file import ResultsFile
from host.target_api import RunContext
from host.verdict import check_float
from kernels import budget, nsight, sweep, target

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
H200 = budget.PROFILES["h200"]


# ---------------------------------------------------------------------------------------------------------- sweep CLI

@pytest.mark.parametrize("args, quoted", [
    (["--br", "7"], "7 is not supported"),            # not in target.TILE_CHOICES
    (["--bc", "16,256"], "256 is not supported"),
    (["--br", "8,,16"], "'8,,16'"),
    (["--seq", "0"], "0 is out of range"),             # LIMITS["seq"] starts at 1
    (["--dim", "257"], "257 is out of range"),         # LIMITS["dim"] ends at 256
    (["--causal", "2"], "2 is out of range"),
    (["--iters", "x"], "'x' is not an integer"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_sweep_bad_arguments_exit_2_with_one_line(args, quoted, capsys):
    assert sweep.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("kbench: error: ") and err.count("\n") == 1
    assert quoted in err


def test_sweep_bad_argument_exit_status_from_the_command_line():
    proc = run_module("kernels.sweep", "--br", "7", timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("kbench: error: ") and "7 is not supported" in proc.stderr
    assert proc.stdout == ""


def test_sweep_without_a_gpu_says_why_and_exits_1(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(target, "available", lambda settings=None: (False, "no CUDA device (test)"))
    assert sweep.main(["--out", str(tmp_path / "sweep")]) == 1  # the machine, not a bad argument
    captured = capsys.readouterr()
    assert captured.err == ("kbench: nothing can be measured: no CUDA device (test) (--gpu-device fake runs "
                            "the sweep without a GPU)\n")
    assert captured.out == ""
    assert not (tmp_path / "sweep").exists()


@pytest.mark.skipif(not gpu_missing(), reason="a GPU is present: the sweep would run")
def test_sweep_without_a_gpu_from_the_command_line(tmp_path):
    proc = run_module("kernels.sweep", "--out", str(tmp_path), timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.startswith("kbench: nothing can be measured: ") and proc.stderr.count("\n") == 1


@pytest.mark.parametrize("args,code,needle", [
    (["--seq", "100000", "--heads", "4096"], 1, "no cell was measured"),  # inputs beyond host memory: oom cells
    (["--br", "128", "--bc", "128", "--dim", "256"], 1, "no cell was measured"),  # the tile does not fit: skipped
    (["--out", ""], 2, "'' is empty"),
])
def test_a_sweep_that_measures_nothing_does_not_pass(tmp_path, capsys, args, code, needle):
    base = ["--gpu-device", "fake", "--br", "8", "--bc", "8", "--seq", "64", "--heads", "1", "--iters", "1"]
    out = [] if "--out" in args else ["--out", str(tmp_path / "s")]
    assert sweep.main(base + args + out) == code
    assert needle in capsys.readouterr().err
    if code == 1:
        rows = ResultsFile(tmp_path / "s" / sweep.RESULTS_NAME).read()
        assert rows and {row.status for row in rows} <= {"oom", "skipped"} and all(row.message for row in rows)


def test_a_sweep_into_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "afile").write_text("hi")
    assert sweep.main(["--gpu-device", "fake", "--out", str(tmp_path / "afile")]) == 2
    assert "is a file" in capsys.readouterr().err and (tmp_path / "afile").read_text() == "hi"


def test_importing_the_sweep_does_not_import_cupy():
    code = "import sys, kernels.sweep, kernels.nsight; print('cupy' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


# ---------------------------------------------------------------------------------------------------------- rows

CONTEXT = RunContext("run", "rev", "host")


def _row(n: int, br: int, bc: int, tflops: float | None, status: str = "ok", message: str = "") -> Result:
    """A sweep row as target.run writes it: TFLOP/s as gflops (derived by the row from its p50), ok rows through a
    passing verdict."""
    problem = AttentionProblem(heads=2, seq=n, dim=64)
    fields = dict(br=br, bc=bc)
    if tflops is not None:
        p50_ms = problem.flops() / (tflops * 1e12) * 1e3  # the latency at which the row's rate is `tflops`
        fields.update(p50_ms=p50_ms, min_ms=p50_ms, timing_source="measured: CUDA events")
    if status == "ok":
        gold = np.zeros(problem.shape)
        verdict = check_float(gold.astype(np.float32), problem, gold)
        return CONTEXT.result(problem, "gpu", "flash", "dev", verdict=verdict, **fields)
    return CONTEXT.result(problem, "gpu", "flash", "dev", status=status, message=message, **fields)


def _synthetic_rows() -> list[Result]:
    rows = []
    for n in (64, 1024):
        for br in (8, 16, 32):
            for bc in (8, 16, 32):
                rows.append(_row(n, br, bc, float(br + bc) / 10 * (n / 64)))
    rows[0] = _row(64, 8, 8, 3.0, "wrong", "wrong (test): rel_l2 0.3 > 1e-05")
    rows[1] = _row(64, 8, 16, None, "error", "CUDARuntimeError: launch failed")
    rows[-1] = _row(1024, 32, 32, None, "skipped", "needs too much shared memory")
    return rows


def test_best_ignores_wrong_errored_and_skipped_rows():
    rows = _synthetic_rows()
    top_64 = sweep.best(row for row in rows if row.seq == 64)
    assert (top_64.br, top_64.bc) == (32, 32)
    top_1024 = sweep.best(row for row in rows if row.seq == 1024)  # 32×32 was skipped: the next best
    assert (top_1024.br, top_1024.bc) in {(16, 32), (32, 16)}
    assert sweep.best([_row(64, 8, 8, 9.0, "wrong", "wrong: test")]) is None
    assert sweep.best([]) is None


def test_measure_skips_a_tile_that_does_not_fit_without_touching_the_gpu():
    tiny = budget.DeviceLimits(name="tiny", sms=1, smem_per_sm=8_192, smem_per_block_default=4_096,
                               smem_per_block_optin=8_192, reserved_smem_per_block=0, regs_per_sm=65_536,
                               max_threads_per_sm=2_048)
    problem = AttentionProblem(heads=2, seq=64, dim=64)
    row = sweep.measure(problem, None, 64, 64, tiny, 1, CONTEXT, target.Settings())  # inputs unused: never run
    assert row.status == "skipped" and (row.br, row.bc) == (64, 64)
    assert "opt-in limit" in row.message and row.p50_ms is None


def test_heatmap_writes_a_png_with_one_panel_per_n(tmp_path):
    from matplotlib.image import imread

    path = sweep.heatmap(_synthetic_rows(), tmp_path / "out" / sweep.HEATMAP_NAME, "synthetic")
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    height, width, _ = imread(path).shape
    assert width > height > 100


def test_heatmap_of_rows_read_back_and_of_a_panel_where_nothing_ran(tmp_path):
    results = ResultsFile(tmp_path / "results.csv")
    for row in (_row(128, 8, 8, None, "error", "boom"), _row(128, 8, 16, None, "skipped", "too big"),
                _row(256, 8, 8, 1.5)):
        results.append(row)
    path = sweep.heatmap(results.read(), tmp_path / "h.png")
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    with pytest.raises(ResultsError):
        sweep.heatmap([], tmp_path / "empty.png")


def test_summary_names_the_best_tile_and_the_budget_square():
    text = sweep.summary(_synthetic_rows(), H200)
    lines = text.splitlines()
    assert len(lines) == 3 and lines[0].split()[:2] == ["N", "d"]
    # the largest square tile the kernel runs (TILE_CHOICES) with two blocks an SM: 64 at d = 64 (the budget alone
    # would take 96, a tile the kernel has not), outside the 8..32 grid
    square = budget.largest_square_tile(64, H200, candidates=target.TILE_CHOICES)
    assert square == 64 and budget.largest_square_tile(64, H200) == 96
    assert "64×64" in lines[1] and "96×96" not in lines[1] and "not swept" in lines[1]
    assert "32×32" in lines[1] and "6.4 " in lines[1] + " "                # best at N=64: (32 + 32) / 10
    assert "skipped" in lines[2]                                         # swept square 32×32 was skipped at N=1024


# ---------------------------------------------------------------------------------------------------------- ncu fold

# ncu --csv --page raw, as printed without --print-units base: a units row, scaled units, thousands separators and a
# ==PROF== line before the header. Naive: three kernels of one call; read 1 Mbyte + 2,048 byte + 0.5 Mbyte.
HEADER = ",".join(f'"{name}"' for name in ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context",
                                              "Stream", "Block Size", "Grid Size", "Device", "CC", *nsight.METRICS))
RAW_NAIVE = '''==PROF== Disconnected from process 1234
''' + HEADER + '''
"","","","","","","","","","","","Mbyte","byte","Gbyte","%"
"0","1234","python3","h","naive_scores","1","7","(16, 16, 1)","(32, 32, 16)","0","9.0","1","4,096","0.01","80.5"
"1","1234","python3","h","naive_softmax","1","7","(256, 1, 1)","(512, 16, 1)","0","9.0","0.002048","8,192","0.02","60.5"
"2","1234","python3","h","naive_pv","1","7","(16, 16, 1)","(4, 32, 16)","0","9.0","0.5","16,384","0.03","70"
'''

RAW_FLASH = HEADER + '''
"","","","","","","","","","","","byte","byte","byte","%"
"0","99","python3","h","flash_fwd<64, 64, 64>","1","7","(128, 1, 1)","(8, 16, 1)","0","9.0",\
"6,291,456","2,097,152","12,345,678","11.9"
'''


def test_parse_raw_applies_the_units_row_and_drops_separators():
    launches = nsight.parse_raw(RAW_NAIVE)
    assert [launch.kernel_name for launch in launches] == ["naive_scores", "naive_softmax", "naive_pv"]
    assert [launch.dram_read for launch in launches] == [1e6, 2_048, 5e5]
    assert [launch.dram_write for launch in launches] == [4_096, 8_192, 16_384]
    assert [launch.l2_bytes for launch in launches] == pytest.approx([1e7, 2e7, 3e7])
    assert [launch.occupancy_pct for launch in launches] == [80.5, 60.5, 70.0]


def test_parse_raw_without_a_units_row_takes_base_units():
    text = "\n".join(line for line in RAW_FLASH.splitlines() if not line.startswith('""'))
    (launch,) = nsight.parse_raw(text)
    assert (launch.dram_read, launch.dram_write, launch.l2_bytes) == (6_291_456, 2_097_152, 12_345_678)


@pytest.mark.parametrize("text, match", [
    ("hello\n", "no header row"),
    (RAW_FLASH.replace("dram__bytes_write.sum", "other"), "dram__bytes_write.sum missing"),
    (RAW_FLASH.replace('"byte","byte","byte"', '"furlong","byte","byte"'), "unit 'furlong'"),
    (RAW_FLASH.replace('"6,291,456"', '"n/a"'), "'n/a' is not a number"),
    # no measurement: a negative count, nan, inf, an occupancy over 100 % (they were folded into nsight.csv)
    (RAW_FLASH.replace('"6,291,456"', '"-1000"'), r"dram__bytes_read.sum = '-1000' byte is out of range; allowed: a "
                                                  "finite count of bytes, 0 or more"),
    (RAW_FLASH.replace('"2,097,152"', '"nan"'), "dram__bytes_write.sum = 'nan' byte is out of range"),
    (RAW_FLASH.replace('"12,345,678"', '"inf"'), "lts__t_bytes.sum = 'inf' byte is out of range"),
    (RAW_FLASH.replace('"11.9"', '"500"'), "= '500' % is out of range; allowed: 0..100 %"),
])
def test_parse_raw_rejects_what_it_cannot_read(text, match):
    with pytest.raises(ResultsError, match=match):
        nsight.parse_raw(text, "x.csv")


def test_fold_sums_the_three_naive_kernels_beside_the_model():
    problem = AttentionProblem(heads=16, seq=512, dim=64)
    row = nsight.fold("naive", problem, nsight.parse_raw(RAW_NAIVE), H200, (64, 64))
    assert row.launches == 3 and row.kernel_names == "naive_scores;naive_softmax;naive_pv"
    assert row.dram_read_bytes == 1e6 + 2_048 + 5e5
    assert row.dram_write_bytes == 4_096 + 8_192 + 16_384
    assert row.dram_bytes == row.dram_read_bytes + row.dram_write_bytes
    assert row.model_bytes == 4 * 16 * (4 * 512 * 64 + 4 * 512 * 512) == target.model_bytes("naive", problem)
    assert row.measured_over_model == pytest.approx(row.dram_bytes / row.model_bytes)
    assert row.achieved_occupancy_pct == pytest.approx((80.5 + 60.5 + 70) / 3)
    assert row.predicted_occupancy_pct is None


def test_fold_of_flash_predicts_occupancy_from_the_budget():
    problem = AttentionProblem(heads=16, seq=512, dim=64)
    row = nsight.fold("flash", problem, nsight.parse_raw(RAW_FLASH), H200, (64, 64))
    assert row.dram_bytes == 6_291_456 + 2_097_152 and row.model_bytes == 4 * 16 * 4 * 512 * 64
    blocks = budget.blocks_per_sm(budget.flash_smem_bytes(64, 64, 64), H200)
    assert row.predicted_occupancy_pct == pytest.approx(100 * blocks * 128 / 2048)
    with pytest.raises(ResultsError, match="no profiled launches"):
        nsight.fold("flash", problem, [], H200, (64, 64))


def test_run_names_give_kernel_and_n():
    assert nsight.run_of(Path("raw/naive_N1024.csv")) == ("naive", 1024)
    for bad in ("fused_N64.csv", "flash_1024.csv", "flash_N1024.txt"):
        with pytest.raises(SpecError, match="<kernel>_N<seq>.csv"):
            nsight.run_of(Path(bad))


def test_fold_command_writes_the_summary_the_launches_and_the_plot(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "naive_N512.csv").write_text(RAW_NAIVE)
    (raw / "flash_N512.csv").write_text(RAW_FLASH)
    (raw / "flash_N1024.csv").write_text(RAW_FLASH)
    args = [a for name in ("naive_N512", "flash_N512", "flash_N1024") for a in ("--csv", str(raw / f"{name}.csv"))]
    assert nsight.main(["fold", *args, "--br", "64", "--bc", "32", "--out", str(tmp_path / "out")]) == 0
    with (tmp_path / "out" / nsight.SUMMARY_NAME).open() as f:
        rows = list(csv.DictReader(f))
    assert [(row["kernel"], row["N"]) for row in rows] == [("flash", "512"), ("flash", "1024"), ("naive", "512")]
    assert float(rows[2]["dram_bytes"]) == 1e6 + 2_048 + 5e5 + 4_096 + 8_192 + 16_384
    assert rows[2]["predicted_occupancy_pct"] == ""
    assert [(row["Br"], row["Bc"]) for row in rows] == [("64", "32")] * 2 + [("", "")]  # --br/--bc as given
    with (tmp_path / "out" / nsight.LAUNCHES_NAME).open() as f:
        assert len(list(csv.DictReader(f))) == 5
    assert (tmp_path / "out" / nsight.PLOT_NAME).read_bytes()[:8] == PNG_SIGNATURE
    assert "naive" in capsys.readouterr().out


def test_filter_prints_the_ncu_selection_of_one_call(capsys):
    assert nsight.main(["filter", "--kernel", "naive"]) == 0
    expected = "--kernel-name regex:^naive_(scores|softmax|pv) --launch-skip 3 --launch-count 3\n"
    assert capsys.readouterr().out == expected
    assert nsight.main(["filter", "--kernel", "flash"]) == 0
    assert capsys.readouterr().out.endswith("--launch-skip 1 --launch-count 1\n")


@pytest.mark.parametrize("args", [["filter", "--kernel", "fused"], ["drive", "--kernel", "flash", "--seq", "0"],
                                  ["fold", "--out", "x"], ["fold", "--csv", "flash_N64.csv", "--out", __file__], []])
def test_nsight_bad_arguments_exit_2(args, capsys):
    assert nsight.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("kbench: error: ") and err.count("\n") == 1


def test_drive_without_a_gpu_says_why(monkeypatch, capsys):
    monkeypatch.setattr(target, "available", lambda: (False, "no CUDA device (test)"))
    assert nsight.main(["drive", "--kernel", "flash", "--seq", "64"]) == 1
    assert capsys.readouterr().err == "kbench: nsight drive needs a GPU: no CUDA device (test)\n"


# ---------------------------------------------------------------------------------------------------------- script

SCRIPT = ROOT / "scripts" / "run_nsight.sh"

# A stand-in for ncu: -o writes a report file, --import prints the raw CSV matching the report's kernel.
FAKE_NCU = f'''#!/usr/bin/env bash
if [ "$1" = --version ]; then echo "fake ncu"; echo "Version 0.0"; exit 0; fi
echo "$*" >> "$FAKE_NCU_LOG"
if [ -n "${{FAKE_NO_GPU:-}}" ]; then echo "kbench: nsight drive needs a GPU: no CUDA device (fake)"; exit 1; fi
if [ "$1" = --import ]; then
    case "$2" in *naive_*) cat <<'CSV'
{RAW_NAIVE}CSV
    ;; *) cat <<'CSV'
{RAW_FLASH}CSV
    ;; esac
    exit 0
fi
while [ $# -gt 0 ]; do if [ "$1" = -o ]; then echo report > "$2.ncu-rep"; fi; shift; done
'''


def _fake_ncu(tmp_path: Path) -> Path:
    ncu = tmp_path / "ncu"
    ncu.write_text(FAKE_NCU)
    ncu.chmod(ncu.stat().st_mode | stat.S_IXUSR)
    return ncu


def _script(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    base = {**os.environ, "PYTHON": sys.executable, "FAKE_NCU_LOG": str(tmp_path / "ncu.log")}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          env={**base, **env})


def test_script_without_ncu_exits_3_saying_so(tmp_path):
    proc = _script(tmp_path, {"NCU": str(tmp_path / "missing-ncu")}, str(tmp_path / "out"))
    assert proc.returncode == 3
    assert "ncu not found" in proc.stderr and proc.stderr.startswith("kbench: error: ")


def test_script_usage_exits_2(tmp_path):
    proc = _script(tmp_path, {"NCU": str(_fake_ncu(tmp_path))})
    assert proc.returncode == 2 and "usage" in proc.stderr


def test_script_without_a_gpu_says_so_once_and_stops(tmp_path):
    """The first run's driver finds no GPU: one line and exit 4, not a failure block for each kernel and N."""
    proc = _script(tmp_path, {"NCU": str(_fake_ncu(tmp_path)), "FAKE_NO_GPU": "1", "NSIGHT_SEQ": "512 1024"},
                   str(tmp_path / "out"))
    assert proc.returncode == 4
    assert proc.stderr == "kbench: nsight drive needs a GPU: no CUDA device (fake); stopped after the first ncu run\n"
    assert len((tmp_path / "ncu.log").read_text().splitlines()) == 1


def test_script_profiles_each_kernel_and_n_then_folds(tmp_path):
    out = tmp_path / "out"
    proc = _script(tmp_path, {"NCU": str(_fake_ncu(tmp_path)), "NSIGHT_SEQ": "512 1024"}, str(out))
    assert proc.returncode == 0, proc.stderr
    calls = (tmp_path / "ncu.log").read_text().splitlines()
    profiles = [call for call in calls if not call.startswith("--import")]
    assert len(profiles) == 4 and all("--clock-control none" in call for call in profiles)
    assert all(nsight.METRICS[0] in call and "drive --kernel" in call for call in profiles)
    assert any("--kernel-name regex:^naive_(scores|softmax|pv) --launch-skip 3 --launch-count 3" in call
               for call in profiles)
    assert sum("--page raw --print-units base" in call for call in calls) == 4
    with (out / nsight.SUMMARY_NAME).open() as f:
        rows = list(csv.DictReader(f))
    assert [(row["kernel"], row["N"]) for row in rows] == [("flash", "512"), ("flash", "1024"), ("naive", "512"),
                                                          ("naive", "1024")]
    assert (out / nsight.PLOT_NAME).exists()


# ---------------------------------------------------------------------------------------------------------- fake GPU

def test_the_whole_sweep_on_the_fake_gpu(monkeypatch, tmp_path, capsys):
    """The sweep on kernels/fake.py: one results-schema row per cell with its verdict, a wrong tile `wrong` (exit 1),
    a tile over the shrunk shared-memory limit `skipped`, a failing launch `error`, the heatmap, the summary."""
    from kernels import fake

    def flash_with_faults(q, k, v, out, problem, br, bc, parts=0):
        if (br, bc) == (8, 8):
            raise RuntimeError("launch failed (fake)")
        fake.flash(q, k, v, out, problem, br, bc)
        if (br, bc) == (16, 8):
            out += np.float32(1.0)

    monkeypatch.setitem(fake.KERNEL_MATH, "flash", flash_with_faults)
    small = dataclasses.replace(H200, smem_per_block_optin=budget.flash_smem_bytes(128, 128, 64) - 1)
    monkeypatch.setattr(budget, "PROFILES", {**budget.PROFILES, "h200": small})
    out = tmp_path / "sweep"
    args = ["--gpu-device", "fake", "--br", "8,16,128", "--bc", "8,128", "--seq", "17,64", "--heads", "2",
            "--iters", "3", "--out", str(out)]
    assert sweep.main(args) == 1
    rows = ResultsFile(out / sweep.RESULTS_NAME).read()
    assert len(rows) == 2 * 3 * 2 and all(row.target == "gpu" and row.kernel == "flash" for row in rows)
    status = {(row.seq, row.br, row.bc): row for row in rows}
    assert status[17, 8, 8].status == "error" and "launch failed (fake)" in status[17, 8, 8].message
    assert status[17, 16, 8].status == "wrong" and status[17, 16, 8].rel_l2 > 0.1 and status[17, 16, 8].p50_ms > 0
    assert status[64, 128, 128].status == "skipped" and "opt-in limit" in status[64, 128, 128].message
    ok = status[64, 16, 128]
    assert ok.status == "ok" and ok.iters == 3 and ok.gflops == pytest.approx(
        AttentionProblem(heads=2, seq=64, dim=64).flops() / (ok.p50_ms / 1e3) / 1e9)
    assert (out / sweep.HEATMAP_NAME).read_bytes()[:8] == PNG_SIGNATURE
    assert "python -m kernels.sweep --gpu-device fake" in (out / sweep.RUNS_NAME).read_text()
    printed = capsys.readouterr()
    assert "best Br×Bc" in printed.out and "N=64 Br=16 Bc=128" in printed.err
    assert report.render(out)  # the one schema: host.report reads a sweep folder


def test_merge_folds_measured_bytes_only_into_rows_that_ran_the_profiled_kernel(tmp_path):
    """drive profiles float32 self-attention on a GPU, flash at the FFMA kernel's tile: a causal, 16-bit, decode,
    grouped, fake-GPU or differently tiled row (3xTF32's 128×32) of the same (kernel, N, d, heads, batch) gets
    nothing."""
    from host.results import Result
    from host.results_file import ResultsFile
    from kernels.nsight import merge_measured

    base = dict(run_id="r", timestamp="t", git_rev="g", host="h", dim=64, seed=0, batch=1, heads=16, target="gpu")
    h200, fake = "NVIDIA H200", "fake GPU (numpy on the CPU, NVIDIA H200 limits, 1024 MiB)"
    naive = dict(base, kernel="naive", seq=512, dtype="float32", causal=False, device=h200)
    flash = dict(base, kernel="flash", seq=1024, dtype="float32", causal=False, device=h200)
    results = ResultsFile(tmp_path / "results.csv")
    rows = [Result(**naive),  # 0: measured
            Result(**dict(naive, causal=True)),
            Result(**dict(naive, device=fake)),
            Result(**dict(naive, q_len=1)),
            Result(**dict(naive, kv_heads=4)),
            Result(**dict(flash, br=32, bc=64)),  # 5: measured
            Result(**dict(flash, br=128, bc=32)),  # 3xTF32's tile
            Result(**dict(flash, dtype="float16", br=32, bc=64)),
            Result(**dict(base, kernel="numpy", target="cpu", seq=512, dtype="float32", causal=False, device="cpu"))]
    for row in rows:
        results.append(row)
    summary = tmp_path / "nsight.csv"
    summary.write_text("kernel,N,d,heads,batch,dram_bytes,Br,Bc\nnaive,512,64,16,1,39925504.0,,\n"
                       "flash,1024,64,16,1,5e6,32,64\nflash,2048,64,16,1,5.0,32,64\n")
    assert merge_measured(results.path, summary) == 2
    assert [row.measured_bytes for row in results.read()] == [39925504, None, None, None, None, 5_000_000, None,
                                                              None, None]


@pytest.mark.parametrize("summary_text, results_name, message", [
    (None, "results.csv", "cannot read .*nope.csv"),
    ("kernel,N,d,heads,batch,dram_bytes\nnaive,512,64,16,1,1.0\n", "results.csv", "lacks column.*Br, Bc"),
    ("kernel,N,d,heads,batch,dram_bytes,Br,Bc\nnaive,x,64,16,1,1.0,,\n", "results.csv", "not a number"),
    ("kernel,N,d,heads,batch,dram_bytes,Br,Bc\n", "missing.csv", "--results .*missing.csv is not a file")])
def test_merge_refuses_a_bad_summary_or_results_in_one_line_and_creates_nothing(tmp_path, capsys, summary_text,
                                                                                results_name, message):
    summary = tmp_path / ("nsight.csv" if summary_text is not None else "nope.csv")
    if summary_text is not None:
        summary.write_text(summary_text)
    (tmp_path / "results.csv").write_text("")
    assert nsight.main(["merge", "--summary", str(summary), "--results", str(tmp_path / results_name)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err), err
    assert not (tmp_path / "missing.csv").exists()
