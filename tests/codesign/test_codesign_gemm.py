"""codesign.gemm: the closed-form GEMM counts, hand-derived, against every row SCALE-Sim v2 printed
(tests/data/scalesim/scalesim_v2.csv, made by tests/data/scalesim/regenerate.sh), and its command line."""

from __future__ import annotations

import csv
import dataclasses
import math

import pytest

from codesign.gemm import DATAFLOWS, GemmCounts, gemm, main
from helpers import ROOT, run_module
from host.errors import SpecError

ORACLE = ROOT / "tests" / "data" / "scalesim" / "scalesim_v2.csv"
COLUMNS = ["array_rows", "array_cols", "dataflow", "M", "N", "K", "total_cycles", "stall_cycles", "overall_util_pct",
           "mapping_efficiency_pct", "compute_util_pct", "sram_ifmap_reads", "sram_filter_reads", "sram_ofmap_writes"]
INTEGERS = ("total_cycles", "stall_cycles", "sram_ifmap_reads", "sram_filter_reads", "sram_ofmap_writes")


def _oracle() -> list[dict[str, str]]:
    with open(ORACLE, newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS
        return list(reader)


ROWS = _oracle()


def _counts(row: dict[str, str]) -> GemmCounts:
    return gemm(int(row["M"]), int(row["N"]), int(row["K"]), int(row["array_rows"]), int(row["array_cols"]),
                row["dataflow"])


def test_the_oracle_covers_the_shapes_asked_for():
    shapes = {(int(r["M"]), int(r["N"]), int(r["K"])) for r in ROWS}
    arrays = {(int(r["array_rows"]), int(r["array_cols"])) for r in ROWS}
    assert len(shapes) >= 14 and {(8, 16), (16, 4), (32, 8), (32, 32), (1, 1)} <= arrays
    per_gemm = {}
    for r in ROWS:
        per_gemm.setdefault((r["array_rows"], r["array_cols"], r["M"], r["N"], r["K"]), set()).add(r["dataflow"])
    assert all(dataflows == set(DATAFLOWS) for dataflows in per_gemm.values())
    assert any(m == 1 for m, _, _ in shapes) and any(n == 1 for _, n, _ in shapes) and any(k == 1 for *_, k in shapes)
    assert {(32, 32, 64), (32, 64, 32), (17, 97, 59)} <= shapes
    assert all(r["stall_cycles"] == "0" for r in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: "r{array_rows}c{array_cols}-{dataflow}-{M}x{N}x{K}".format(**r))
def test_scalesim_figures_equal_what_scalesim_v2_printed(row):
    counts = _counts(row)
    ours = counts.scalesim()
    assert list(ours) == COLUMNS[6:]
    for key in INTEGERS:
        assert ours[key] == int(row[key]), key
    # Overall util is one expression in SCALE-Sim, computed the same way here: equal to the bit.
    assert ours["overall_util_pct"] == float(row["overall_util_pct"])
    # The two means SCALE-Sim sums fold by fold (folds rounded quotients, folds−1 additions of positive terms, one
    # division, one ×100: at most folds+3 half-ulps of the result) against ours, rounded once and ×100: ≤ folds+3 ulps,
    # and equal for one fold, where both do the same two operations.
    for key in ("mapping_efficiency_pct", "compute_util_pct"):
        printed = float(row[key])
        ulps = 0 if counts.folds == 1 else counts.folds + 3
        assert abs(ours[key] - printed) <= ulps * math.ulp(printed), (key, ours[key], printed)


# Hand-derived: (Sr, Sc, T) = os (M, N, K), ws (K, N, M), is (K, M, N); folds = ceil(Sr/R)·ceil(Sc/C).
def test_os_one_fold_8x8_by_hand():
    c = gemm(8, 8, 8, 8, 8, "os")
    assert c.folds == 1                        # ceil(8/8)·ceil(8/8)
    assert c.fold_cycles == 22                 # T + R + C − 2 = 8 + 8 + 8 − 2
    assert c.cycles == 22 and c.macs == 512    # 1·22; 8·8·8
    assert (c.ifmap_reads, c.filter_reads, c.ofmap_writes) == (64, 64, 64)  # 8·8·ceil(8/8) each; C once
    assert c.utilisation() == 512 / (22 * 64)  # 8/22 = 36.36 %
    s = c.scalesim()
    assert s["total_cycles"] == 21                           # 22 − 1
    assert s["sram_ofmap_writes"] == 80                      # 64 + 1 fold·(8 + 8)
    assert s["overall_util_pct"] == 51200 / 1344             # 100·512 / (21·64) = 38.095 %
    assert s["compute_util_pct"] == 512 / (1 * 64 * 22) * 100  # os: the fold length of total cycles


def test_ws_many_folds_16x4_by_hand():
    c = gemm(32, 64, 32, 16, 4, "ws")           # Sr = K = 32, Sc = N = 64, T = M = 32
    assert c.folds == 32                        # ceil(32/16)·ceil(64/4) = 2·16
    assert c.fold_cycles == 66                  # 2R + C + T − 2 = 32 + 4 + 32 − 2
    assert c.cycles == 2112                     # 32·66
    assert c.ifmap_reads == 16_384              # M·K·ceil(N/C) = 32·32·16: A streams once per column fold
    assert c.filter_reads == 2048               # K·N = 32·64: each weight loaded once
    assert c.ofmap_writes == 4096               # M·N·ceil(K/R) = 2048·2 partial sums
    assert c.mapping_efficiency == 1.0          # 32·64 / (32·16·4)
    s = c.scalesim()
    assert s["total_cycles"] == 2111 and s["sram_ofmap_writes"] == 4096  # no os double count under ws
    # fold length of compute util: 2R + 2C + T − 3 = 32 + 8 + 32 − 3 = 69, so 65,536 / (32·64·69) = 46.38 %
    assert s["compute_util_pct"] == pytest.approx(100 * 65_536 / (32 * 64 * 69), rel=1e-15)


def test_is_partial_fold_8x8_by_hand():
    c = gemm(5, 7, 3, 8, 8, "is")               # Sr = K = 3, Sc = M = 5, T = N = 7
    assert c.folds == 1 and c.fold_cycles == 29  # 2·8 + 8 + 7 − 2
    assert (c.ifmap_reads, c.filter_reads, c.ofmap_writes) == (15, 21, 35)  # M·K; K·N·ceil(5/8); M·N·ceil(3/8)
    assert c.mapping_efficiency == 15 / 64      # 3 rows · 5 columns of 64 cells
    s = c.scalesim()
    assert s["total_cycles"] == 28
    assert s["overall_util_pct"] == 5.859375    # 100·105 / (28·64) = 10,500 / 1792
    assert s["compute_util_pct"] == 105 / (64 * 36) * 100  # fold length 16 + 16 + 7 − 3 = 36: 4.557 %


def test_a_1x1_os_array_reports_over_100_percent_and_a_1_cycle_gemm_has_no_scalesim_figures():
    c = gemm(2, 3, 1, 1, 1, "os")               # 6 folds of T + R + C − 2 = 1 cycle
    assert c.cycles == 6 and c.utilisation() == 1.0
    assert c.scalesim()["overall_util_pct"] == 120.0  # 100·6 / (5·1): SCALE-Sim printed 120.0 too
    with pytest.raises(SpecError, match="1-cycle GEMM"):
        gemm(1, 1, 1, 1, 1, "os").scalesim()


SHAPES = [(1, 1, 1), (1, 97, 59), (97, 1, 17), (17, 97, 59), (64, 64, 1), (59, 17, 1025), (256, 256, 256)]
ARRAYS = [(1, 1), (8, 8), (16, 4), (4, 16), (32, 32), (256, 256), (3, 17)]


@pytest.mark.parametrize("m, n, k", SHAPES)
@pytest.mark.parametrize("rows, cols", ARRAYS)
@pytest.mark.parametrize("dataflow", DATAFLOWS)
def test_properties(m, n, k, rows, cols, dataflow):
    c = gemm(m, n, k, rows, cols, dataflow)
    sr, sc, t = {"os": (m, n, k), "ws": (k, n, m), "is": (k, m, n)}[dataflow]
    assert c.folds == math.ceil(sr / rows) * math.ceil(sc / cols)
    assert c.fold_cycles == (t + rows + cols - 2 if dataflow == "os" else 2 * rows + cols + t - 2)
    assert c.cycles == c.folds * c.fold_cycles and c.macs == m * n * k
    assert c.ifmap_reads >= m * k and c.filter_reads >= k * n and c.ofmap_writes >= m * n
    if c.folds == 1:  # every operand element moves once
        assert (c.ifmap_reads, c.filter_reads, c.ofmap_writes) == (m * k, k * n, m * n)
    assert 0 < c.utilisation() <= c.mapping_efficiency <= 1
    if c.cycles == 1:
        return
    # SCALE-Sim's figures differ from ours by exactly the documented quirks.
    s = c.scalesim()
    assert s["total_cycles"] == c.cycles - 1 and s["stall_cycles"] == 0
    assert (s["sram_ifmap_reads"], s["sram_filter_reads"]) == (c.ifmap_reads, c.filter_reads)
    assert s["sram_ofmap_writes"] - c.ofmap_writes == (c.folds * (rows + cols) if dataflow == "os" else 0)
    assert s["overall_util_pct"] == pytest.approx(100 * c.utilisation() * c.cycles / (c.cycles - 1), rel=1e-14)
    assert s["mapping_efficiency_pct"] == pytest.approx(100 * c.mapping_efficiency, rel=1e-15)
    util_fold = c.fold_cycles if dataflow == "os" else c.fold_cycles + cols - 1  # 2R+2C+T−3 for ws, is
    assert s["compute_util_pct"] == pytest.approx(100 * c.utilisation() * c.fold_cycles / util_fold, rel=1e-14)


@pytest.mark.parametrize("m, n, k", SHAPES)
@pytest.mark.parametrize("rows, cols", ARRAYS)
def test_transposing_the_gemm_swaps_the_operands(m, n, k, rows, cols):
    # Cᵀ = Bᵀ·Aᵀ: input-stationary (M, N, K) is weight-stationary (N, M, K) with A and B swapped; output-stationary
    # on R×C is output-stationary of the transpose on C×R.
    is_, ws = gemm(m, n, k, rows, cols, "is"), gemm(n, m, k, rows, cols, "ws")
    assert (is_.cycles, is_.ofmap_writes) == (ws.cycles, ws.ofmap_writes)
    assert (is_.ifmap_reads, is_.filter_reads) == (ws.filter_reads, ws.ifmap_reads)
    os_, os_t = gemm(m, n, k, rows, cols, "os"), gemm(n, m, k, cols, rows, "os")
    assert (os_.cycles, os_.ofmap_writes) == (os_t.cycles, os_t.ofmap_writes)
    assert (os_.ifmap_reads, os_.filter_reads) == (os_t.filter_reads, os_t.ifmap_reads)


def test_the_largest_dims_stay_exact_integers():
    c = gemm(2**31, 2**31, 2**31, 1, 1, "os")
    assert c.folds == 2**62 and c.cycles == 2**62 * 2**31 and c.macs == 2**93
    assert c.scalesim()["total_cycles"] == 2**93 - 1


def test_counts_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        gemm(8, 8, 8, 8, 8, "os").cycles = 1  # type: ignore[misc]


@pytest.mark.parametrize("args, bad", [
    ((0, 8, 8, 8, 8, "os"), "M=0 is out of range; allowed: 1..2147483648"),
    ((8, 2**31 + 1, 8, 8, 8, "os"), "N=2147483649 is out of range"),
    ((8, 8, 1.5, 8, 8, "os"), "K=1.5 is not an integer"),
    ((8, 8, True, 8, 8, "os"), "K=True is not an integer"),
    ((8, 8, 8, 257, 8, "os"), "array rows=257 is out of range; allowed: 1..256"),
    ((8, 8, 8, 8, 0, "os"), "array cols=0 is out of range"),
    ((8, 8, 8, 8, 8, "rs"), "dataflow='rs' is unknown; allowed: os, ws, is"),
])
def test_gemm_rejects_bad_values_quoting_them(args, bad):
    with pytest.raises(SpecError, match=bad) as info:
        gemm(*args)
    assert "\n" not in str(info.value)


def test_cli_prints_our_counts_then_scalesims(capsys):
    assert main(["64", "64", "64", "--array", "32x32", "--dataflow", "os", "--scalesim"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == "GEMM M=64 N=64 K=64 on a 32x32 array, dataflow os (rows M, columns N, streamed K)"
    assert lines[1].split()[:2] == ["folds", "4"] and lines[3].split()[:2] == ["cycles", "504"]  # 4·(64+32+32−2)
    compat = lines.index("SCALE-Sim v2 compatible (its quirks included; tests/data/scalesim/README.md):")
    assert lines[compat + 1].split() == ["total_cycles", "503"]
    assert lines[-1].split() == ["sram_ofmap_writes", "4352"]  # 4096 + 4·(32 + 32)
    assert main(["17", "97", "59", "--array", "8x16", "--dataflow", "is"]) == 0
    assert "SCALE-Sim" not in capsys.readouterr().out


def test_python_m_codesign_gemm_runs():
    done = run_module("codesign", "gemm", "32", "64", "32", "--array", "16x4", "--dataflow", "ws", "--scalesim")
    assert done.returncode == 0, done.stderr
    assert "total_cycles            2111" in done.stdout


@pytest.mark.parametrize("argv, bad", [
    (["0", "8", "8", "--array", "8x8", "--dataflow", "os"], "argument M: M=0 is out of range"),
    (["8", "x", "8", "--array", "8x8", "--dataflow", "os"], "argument N: 'x' is not an integer"),
    (["8", "8", str(2**31 + 1), "--array", "8x8", "--dataflow", "os"], "argument K: K=2147483649 is out of range"),
    (["8", "8", "8", "--array", "8x300", "--dataflow", "os"], "argument --array: array '8x300' has a side of 300"),
    (["8", "8", "8", "--array", "8", "--dataflow", "os"], "argument --array: array '8' is not RxC"),
    (["8", "8", "8", "--array", "8x8", "--dataflow", "rs"], "argument --dataflow: invalid choice: 'rs'"),
    (["8", "8", "--array", "8x8", "--dataflow", "os"], "the following arguments are required: K"),
])
def test_cli_bad_arguments_exit_2_with_one_line(capsys, argv, bad):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("kbench: error: ") and bad in err and err.count("\n") == 1, err


def test_cli_a_gemm_scalesim_cannot_report_keeps_our_counts(capsys):
    assert main(["1", "1", "1", "--array", "1x1", "--dataflow", "os", "--scalesim"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "cycles                             1" in out
    assert "SCALE-Sim v2 compatible: none; SCALE-Sim v2 has no figures for a 1-cycle GEMM" in out
