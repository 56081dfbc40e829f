"""Decode (q_len < seq, the causal mask aligned to the bottom right) and grouped K/V heads on the datapath model: the
bits of awkward shapes on several arrays and dataflows equal host/q15.py's model (Quantized.expected, an independent
implementation) and the same rows of the square head; a decode step's cycles derived by hand; the cycle model against
a walk over every (tile, block) step; K/V traffic once per group when the K/V buffers hold it, else once per query
head; the asic target's rows; `codesign explore|run --workload|--q-len|--kv-heads`; and measured rows matched by q_len
and kv_heads."""

from __future__ import annotations

import csv
import subprocess
import sys

import numpy as np
import pytest

from codesign import target
from codesign.__main__ import main as codesign_main
from codesign.bits import run_head
from codesign.cycles import head_cycles
from codesign.groups import problem_cycles
from codesign.datapath import EXP_LATENCY, RESCALE_LATENCY, SCORE_LATENCY, Datapath
from codesign.evaluate import evaluate
from codesign.explore import check_space, explore
from codesign.measured import load
from codesign.technology import Technology
from helpers.datapath_steps import walk_steps
from host import q15
from host.errors import SpecError
from host.problem import AttentionProblem
from host.results import Result
from host.results_file import ResultsFile
from host.target_api import Inputs

#: (seq, q_len, heads, kv_heads, dim): decode rows of one and a few queries, a chunk of 17, K/V heads 2 of 6
SHAPES = [(17, 1, 6, 2, 59), (17, 3, 6, 2, 59), (97, 1, 6, 2, 59), (97, 3, 6, 3, 59), (97, 17, 6, 2, 59),
          (97, 97, 6, 2, 59), (17, 17, 2, 1, 3)]
#: (rows, cols, dataflow): one cell, rows below and above q_len, C below and above the contract's Bc 64
ARRAYS = [(1, 1, "os"), (4, 8, "os"), (32, 32, "os"), (16, 5, "ws"), (8, 128, "is")]


def _problem(seq, q_len, heads, kv_heads, dim, causal, seed=3) -> AttentionProblem:
    return AttentionProblem(batch=1, heads=heads, kv_heads=kv_heads, seq=seq, q_len=q_len, dim=dim, causal=causal,
                            dtype="q15", seed=seed)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_decode_and_grouped_bits_equal_the_contract_model(shape, causal):
    problem = _problem(*shape, causal)
    inputs = Inputs(problem)
    # the model's own answer, computed here from host/q15.py alone
    expected = q15.prepare(problem, inputs.q, inputs.k, inputs.v).expected()
    for rows, cols, dataflow in ARRAYS:
        result = evaluate(problem, inputs, Datapath(rows=rows, cols=cols, dataflow=dataflow))
        assert result.out.same_bits(expected), (rows, cols, dataflow, result.out.first_difference(expected))
        assert result.verdict.status == "ok" and result.verdict.bit_exact, result.verdict.message


@pytest.mark.parametrize("causal", [False, True])
def test_a_decode_heads_rows_are_the_last_rows_of_its_square_head(causal):
    # the same head computed whole (all seq rows, row0 0) and as its last q_len rows (row0 = seq − q_len): tiles start
    # at other rows, causal tiles skip other blocks, and the rows must still agree, bit for bit
    rng = np.random.default_rng(11)
    seq, dim = 97, 59
    q, k, v = (rng.integers(-20000, 20000, (seq, dim)).astype(np.int16) for _ in range(3))
    params = q15.Q15Params(seq, dim, causal, q15.BC, *q15.score_scale(0, 0, dim))
    for rows in (1, 4, 32):
        whole = run_head(q, k, v, params, Datapath(rows=rows, cols=16)).out
        for q_len in (1, 3, 17):
            part = run_head(q[seq - q_len:], k, v, params, Datapath(rows=rows, cols=16), row0=seq - q_len).out
            assert part.same_bits(q15.Q15Out(whole.o[seq - q_len:], whole.shift[seq - q_len:])), (rows, q_len)
    if causal:  # the alignment matters: the same queries taken as rows 0..2 see other keys
        top_left = run_head(q[seq - 3:], k, v, params, Datapath(rows=4, cols=16)).out
        assert not top_left.same_bits(q15.attention_q15(q[seq - 3:], k, v, params, seq - 3))


def test_query_rows_outside_the_head_are_refused():
    params = q15.Q15Params(8, 2, True, 4, *q15.score_scale(0, 0, 2))
    x = np.zeros((8, 2), dtype=np.int16)
    with pytest.raises(SpecError, match=r"query rows 6\.\.8 are outside 0\.\.7 \(seq=8\)"):
        run_head(x[:3], x, x, params, Datapath(rows=4, cols=4), row0=6)


def test_a_decode_step_by_hand():
    dp = Datapath(rows=4, cols=4, dataflow="os", exp_lanes=4, dividers=4, div_latency=18, dram_bytes_per_cycle=32)
    head = head_cycles(dp, seq=8, dim=4, causal=True, bc=4, queries=1)
    # One query (row 7, the bottom right: it sees keys 0..7) against 8 keys in two blocks of Bc = 4; one tile of
    # 1 row on the 4-row array. Each step: QKᵀ = gemm(M 1, N 4, K 4) on 4x4 os, one fold of T + R + C − 2 =
    # 4 + 4 + 4 − 2 = 10 cycles with 1 of 4 rows mapped; P·V = gemm(M 1, N 4, K 4): 10 → 20 array cycles a step.
    # Softmax, block 0: 4 compares / 4 lanes = 1, 4 p + 1 α = 5 exps / 4 = 2, no rescale, + 3 (score) + ⌈log₂ 4⌉ = 2
    # (max tree) + 4 (EXP2) = 12; block 1: 1 + 2 + ⌈1·(4 + 1)/4⌉ = 2 (rescale l and 4 accumulators) + 3 + 2 + 4 + 2
    # (rescale latency) = 16, of which the rescale pass is 2 + 2 = 4. Serial windows (codesign/serial_windows.py): the
    # first QKᵀ (10); block 0's window max(0 + 10 (block 1's QKᵀ), 12) = 12; block 1's max(10 (block 0's P·V) + 0,
    # max(12, 10) + 4) = 16; the last P·V (10): the tile's windows 28.
    # DRAM at 32 B/cycle, K and V resident (8·4·2 = 64 B each): the prologue loads Q (1·4·2 = 8 B) and block 0's K and
    # V (2·4·4·2 = 64 B): ⌈72/32⌉ = 3; block 1's K and V (64 B, 2 cycles) hide under the tile's 28; the epilogue
    # writes O (4·2 B + a shift byte = 9 B): 1. Divider: the peak pass (d = 4) + ⌈4/4⌉ waves of 18 = 22, exposed.
    # 3 + 10 + 28 + 10 + 22 + 1 = 74; stalls 3 + 1 = 4.
    assert (SCORE_LATENCY, EXP_LATENCY, RESCALE_LATENCY) == (3, 4, 2)
    assert head.cycles == 74 and head.stall_cycles == 4
    assert head.stages["array"].busy_cycles == 40 and head.stages["softmax"].busy_cycles == 28
    assert head.stages["divider"].busy_cycles == 22
    assert head.traffic["dram_read_k_bytes"] == 64 and head.traffic["dram_read_q_bytes"] == 8
    assert head.traffic["dram_write_o_bytes"] == 9 and head.traffic["divisions"] == 4
    # 8 visible keys × d 4 × both GEMMs; every computed MAC is useful; 1 of the 4 rows of each fold is busy
    assert head.useful_macs == head.traffic["macs"] == 64
    assert head.stages["array"].utilisation == pytest.approx(64 / (40 * 16))
    # Two query heads on one K/V head: the second finds K and V on chip, so its prologue is Q alone (⌈8/32⌉ = 1)
    # and block 1 loads nothing: 1 + 10 + 28 + 10 + 22 + 1 = 72; the pair 74 + 72 = 146 cycles, K read once (64 B).
    pair = problem_cycles(dp, 8, 4, True, 4, queries=1, heads=2, kv_heads=1)
    assert pair.later.cycles == 72 and pair.cycles == 146 and pair.kv_shared
    assert pair.traffic["dram_read_k_bytes"] == 64 and pair.traffic["dram_read_q_bytes"] == 16


def test_a_decode_step_on_the_overlap_schedule_by_hand():
    dp = Datapath(rows=4, cols=4, dataflow="os", exp_lanes=4, dividers=4, div_latency=18, dram_bytes_per_cycle=32,
                  schedule="overlap")
    head = head_cycles(dp, seq=8, dim=4, causal=True, bc=4, queries=1)
    # The decode step above with its folds pipelined. QKᵀ = gemm(1, 4, 4) on 4x4 os: one fold, Sr = 1 row, Sc = 4
    # keys, T = 4: it holds the array max(T, r) = max(4, 1) = 4 cycles, tail r + c − 2 = 1 + 4 − 2 = 3; transposed,
    # gemm(4, 1, 4), max(4, 4) = 4 and 4 + 1 − 2 = 3, a tie, so as it is. P·V = gemm(1, 4, 4): 4 and 3 likewise. A
    # step holds the array 8 cycles: max(8, 12) + max(8, 16) = 28 for the two blocks; the tails once, 3 + 3 = 6.
    # DRAM and the divider as before (3, 22, 1; block 1's 2 cycles of K and V under the 28): 3 + 12 + 28 + 6 + 22 + 1
    # = 72 against 78.
    assert head.cycles == 72 and head.array_tail == 6 and head.stages["array"].busy_cycles == 2 * 8 + 6
    # Two query heads on one K/V head, the mapper's best: the second finds K and V on chip (prologue Q alone, ⌈8/32⌉
    # = 1; block 1 loads nothing): 1 + 12 + 28 + 6 + 22 + 1 = 70. It starts during the first one's tail: its
    # prologue and fill, 1 + 12 = 13, under the first's array and divider tail, 6 + 22 = 28; its body after the
    # first's O is out, max(28, 1) + 1 = 29: gap 29 instead of 28 + 1 + 13 = 42, 13 saved: 72 + 70 − 13 = 129.
    # (Each head reading its own K and V: 72 + 72 − 15 = 129 too, the tie going to the shared K/V head; folds back
    # to back: 78 + 76 − 13 = 141.)
    pair = problem_cycles(dp, 8, 4, True, 4, queries=1, heads=2, kv_heads=1)
    assert pair.later.cycles == 70 and pair.pipelined_saving == 13 and pair.cycles == 129
    assert pair.mapping.share_kv and pair.mapping.overlap and pair.kv_shared


@pytest.mark.parametrize("seq,queries", [(17, 1), (17, 3), (97, 1), (97, 3), (97, 17), (1025, 33)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(32, 32, "os", 64), (8, 24, "ws", 64), (16, 5, "is", 64), (4, 128, "os", 20)])
def test_decode_steps_equal_a_walk_over_every_step(seq, queries, causal, shape):
    rows, cols, dataflow, bc = shape
    dp = Datapath(rows=rows, cols=cols, dataflow=dataflow)
    head = head_cycles(dp, seq, 59, causal, bc, queries)
    walked = walk_steps(dp, seq, 59, causal, bc, queries)
    assert head.stages["array"].busy_cycles == walked["array"]
    assert head.stages["softmax"].busy_cycles == walked["softmax"]
    assert head.traffic["macs"] == walked["macs"]
    row0 = seq - queries
    pairs = sum(row0 + i + 1 for i in range(queries)) if causal else queries * seq
    assert head.useful_macs == 2 * pairs * 59 <= head.traffic["macs"]


def test_one_decode_row_uses_one_of_the_arrays_rows():
    # output-stationary: M = q_len on the rows, so q_len 1 maps 1 of 32 rows in every fold; 32 queries fill them
    one = head_cycles(Datapath(), 4096, 128, True, queries=1)
    full_tile = head_cycles(Datapath(), 4096, 128, True, queries=32)
    assert 0 < one.stages["array"].utilisation <= 1 / 32
    assert full_tile.stages["array"].utilisation > 16 * one.stages["array"].utilisation


def test_kv_is_read_once_per_group_when_resident_else_once_per_query_head():
    seq, dim, kv_bytes = 512, 64, 512 * 64 * 2  # K of one K/V head: 64 KB, the default K buffer's size
    resident = problem_cycles(Datapath(), seq, dim, True, queries=16, heads=8, kv_heads=2, batch=3)
    assert resident.first.buffering["kv"] == "resident" and resident.kv_shared
    assert resident.traffic["dram_read_k_bytes"] == 3 * 2 * kv_bytes  # batch × K/V heads, once each
    streamed = problem_cycles(Datapath(k_buffer_kb=16, v_buffer_kb=16), seq, dim, True, queries=16, heads=8,
                              kv_heads=2, batch=3)
    assert not streamed.kv_shared
    assert streamed.traffic["dram_read_v_bytes"] == 3 * 8 * kv_bytes  # every query head reads it again
    # 33 queries on 32 rows are two tiles; streamed, each tile reads all of K (its rows see every key)
    two_tiles = problem_cycles(Datapath(k_buffer_kb=16, v_buffer_kb=16), seq, dim, True, queries=33, heads=2,
                               kv_heads=1)
    assert two_tiles.traffic["dram_read_k_bytes"] == 2 * 2 * kv_bytes
    assert resident.cycles < problem_cycles(Datapath(), seq, dim, True, queries=16, heads=8, batch=3).cycles


def test_a_shared_kv_head_that_does_not_fit_is_refused():
    with pytest.raises(SpecError, match="do not fit the K/V buffers"):
        head_cycles(Datapath(k_buffer_kb=16, v_buffer_kb=16), 512, 64, True, queries=1, shared_kv=True)
    with pytest.raises(SpecError, match=r"q_len=98 is out of range; allowed: 1\.\.97"):
        head_cycles(Datapath(), 97, 64, True, queries=98)


def test_the_target_supports_every_shape_of_the_contract():
    assert target.supports(AttentionProblem(seq=97, q_len=1, heads=6, kv_heads=2)) == (True, "")
    runs, why = target.supports(AttentionProblem(seq=40000, q_len=1))
    assert not runs and "seq=40000" in why and "32768" in why


def test_asic_rows_for_decode_and_grouped_heads(tmp_path):
    from host.sweep import cli as compare

    code = compare.main(["--targets", "asic", "--seq", "97", "--q-len", "1,3", "--heads", "6", "--kv-heads", "2",
                         "--dim", "59", "--causal", "both", "--asic-array", "32x32,4x8", "--out", str(tmp_path)])
    rows = ResultsFile(tmp_path / "results.csv").read()
    assert code == 0 and len(rows) == 2 * 2 * 2
    for row in rows:
        assert row.status == "ok" and row.bit_exact is True, row.message
        assert (row.q_len, row.kv_heads) in ((1, 2), (3, 2))
        rows_, cols = (int(x) for x in row.kernel.split("-")[0][2:].split("x"))
        model = problem_cycles(Datapath(rows=rows_, cols=cols), 97, 59, row.causal, queries=row.q_len, heads=6,
                               kv_heads=2)
        assert row.cycles == model.cycles
        assert f"M = q_len = {row.q_len} query row(s) on {row.q_len} of the array's {rows_} rows" in row.message
        assert "each K/V head read from DRAM once for its 3 query heads" in row.message


def test_explore_takes_a_workload_and_the_shape_options(tmp_path, capsys):
    space = tmp_path / "space.toml"
    space.write_text('array = ["8x8", "32x32"]\ndataflow = ["os"]\nexp_lanes = [16]\ndividers = [32]\n'
                     'buffers_kb = [[32, 64, 64, 128], [32, 8, 8, 128]]\nclock_mhz = [1000]\ndram_gbps = [204.8]\n'
                     'node_nm = [7]\nacc_bits = [40]\n')
    out = tmp_path / "out"
    assert codesign_main(["explore", "--workload", "gpt2-decode", "--space", str(space), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "B 16 H 12 N 1024 q_len 1 d 64 causal" in printed
    with open(out / "points.csv", newline="") as handle:
        points = list(csv.DictReader(handle))
    assert len(points) == 4 and {p["bit_exact"] for p in points} == {"all inputs"}
    for point in points:
        r, c = (int(x) for x in point["array"].split("x"))
        kb = [float(x) for x in point["buffers_kb"].split("/")]
        dp = Datapath(rows=r, cols=c, q_buffer_kb=kb[0], k_buffer_kb=kb[1], v_buffer_kb=kb[2], o_buffer_kb=kb[3],
                      dram_bytes_per_cycle=204.8)
        model = problem_cycles(dp, 1024, 64, True, queries=1, heads=12, batch=16)
        assert float(point["latency_s"]) == pytest.approx(model.cycles / 1e9, rel=1e-5)
    # the same problem from the shape options gives the same points
    same = tmp_path / "same"
    assert codesign_main(["explore", "--seq", "1024", "--q-len", "1", "--heads", "12", "--batch", "16", "--dim", "64",
                          "--causal", "1", "--space", str(space), "--out", str(same)]) == 0
    assert (same / "points.csv").read_text() == (out / "points.csv").read_text()


def test_explore_of_grouped_heads_counts_kv_once_per_group():
    space = check_space({"array": ["32x32"], "dataflow": ["os"], "exp_lanes": [16], "dividers": [32],
                         "buffers_kb": [[32, 64, 64, 128]], "clock_mhz": [1000], "dram_gbps": [204.8],
                         "node_nm": [7], "acc_bits": [40]}, Technology.load())
    grouped = AttentionProblem(heads=8, kv_heads=2, seq=512, q_len=4, dim=64, causal=True, dtype="q15")
    ungrouped = grouped.with_(kv_heads=None)
    a, b = (explore(p, space, Technology.load()).columns for p in (grouped, ungrouped))
    assert a["latency_s"][0] < b["latency_s"][0] and a["energy_j"][0] < b["energy_j"][0]


@pytest.mark.parametrize("args,needles", [
    (["--workload", "llama3-9b-decode"], ["--workload: unknown workload 'llama3-9b-decode'; allowed:",
                                          "llama3-8b-decode", "gpt2-decode", "(or list)"]),
    (["--workload", "gpt2-decode", "--seq", "64"], ["--workload sets the problem's shape; drop --seq"]),
    # an option typed at its default value is refused too: the workload's mask and heads are not the user's
    (["--workload", "gpt2-decode", "--causal", "0"], ["--workload sets the problem's shape; drop --causal"]),
    (["--workload", "gpt2-decode", "--batch", "1", "--q-len", "1"], ["drop --batch, --q-len (or drop --workload)"]),
    (["--seq", "97", "--q-len", "98"], ["--q-len 98 with --seq 97: q_len must be at most seq", "allowed: 1..97"]),
    (["--heads", "6", "--kv-heads", "4"], ["--kv-heads 4 with --heads 6: kv_heads must divide heads"]),
    (["--heads", "2", "--kv-heads", "4"], ["--kv-heads 4 with --heads 2: kv_heads must divide heads"]),
    (["--workload", "gpt2-decode,bert-base"], ["--workload gpt2-decode,bert-base: this command takes one workload"]),
    (["--workload", "list", "--seq", "5"], ["--workload list prints the table and runs nothing; drop --seq"]),
    (["--work", "list", "--batch=1"], ["--workload list prints the table and runs nothing; drop --batch"]),
    (["--q-len", "0"], ["q-len"]),
])
@pytest.mark.parametrize("command", ["explore", "run"])
def test_bad_shapes_and_workloads_exit_2_with_one_line(tmp_path, capsys, command, args, needles):
    code = codesign_main([command, *args, *(["--out", str(tmp_path / "o")] if command == "explore" else [])])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert all(needle in err for needle in needles), err


@pytest.mark.parametrize("command", ["explore", "run"])
def test_workload_list_prints_the_table(capsys, command):
    assert codesign_main([command, "--workload", "list"]) == 0
    printed = capsys.readouterr().out
    assert "llama3-8b-decode" in printed and "H32/8" in printed and "sources:" in printed


@pytest.mark.parametrize("module", ["codesign.explore", "codesign.run"])
def test_a_command_module_run_by_its_own_name_is_the_command(module):
    """`python -m codesign.explore` (a user's spelling of `python -m codesign explore`) checks its arguments and
    exits as the command does; it exited 0 saying nothing."""
    proc = subprocess.run([sys.executable, "-m", module, "--no-such-option"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stderr == "kbench: error: unrecognized arguments: --no-such-option\n"


def test_run_reports_the_mapping_and_the_groups_traffic(capsys):
    assert codesign_main(["run", "--seq", "97", "--q-len", "3", "--heads", "6", "--kv-heads", "2", "--dim", "59",
                          "--causal", "1", "--array", "8x8"]) == 0
    printed = capsys.readouterr().out
    assert "problem    B 1 H 6/2 N 97 q_len 3 d 59 causal" in printed
    assert "M = q_len = 3 query row(s) on 3 of the array's 8 rows" in printed
    assert "bit_exact  yes" in printed
    model = problem_cycles(Datapath(rows=8, cols=8), 97, 59, True, queries=3, heads=6, kv_heads=2)
    assert f"cycles     {model.cycles:,} " in printed


def _row(problem: AttentionProblem, q_len=None, kv_heads=None) -> Result:
    return Result(run_id="r", timestamp="t", git_rev="g", host="h", device="NVIDIA H200", target="gpu",
                  kernel="flash", dtype="float16", batch=problem.batch, heads=problem.heads, seq=problem.seq,
                  dim=problem.dim, causal=problem.causal, seed=0, q_len=q_len, kv_heads=kv_heads, status="ok",
                  p50_ms=0.02, energy_j=5e-3, energy_source="measured (NVML)", timing_source="measured: CUDA events")


def test_measured_rows_match_q_len_and_kv_heads(tmp_path):
    # one problem's five shapes, a row of each: every shape takes its own row only (a decode row never stands beside
    # the prefill problem, nor a grouped row beside heads with K/V heads of their own)
    rows = ResultsFile(tmp_path / "results.csv")
    square = AttentionProblem(batch=2, heads=8, seq=128, dim=64, causal=True)
    shapes = [(None, None), (1, None), (None, 2), (1, 2), (16, 2)]
    for q_len, kv_heads in shapes:
        rows.append(_row(square, q_len, kv_heads).replace(kernel=f"q{q_len}-kv{kv_heads}"))
    for q_len, kv_heads in shapes:
        points, left = load([tmp_path], square.with_(q_len=q_len, kv_heads=kv_heads))
        assert [point.label for point in points] == [f"H200 q{q_len}-kv{kv_heads} float16"]
        want = f"q_len {'seq' if q_len is None else q_len}, kv_heads {'heads' if kv_heads is None else kv_heads}"
        assert left == [f"4 row(s): another q_len or kv_heads than the problem's ({want})"]


@pytest.mark.parametrize("shape", [(97, 97, 2, 1, 59), (97, 17, 2, 2, 59), (1025, 1025, 1, 1, 8), (1025, 3, 1, 1, 8)])
@pytest.mark.parametrize("causal", [False, True])
def test_the_expected_output_in_row_chunks_is_the_models(shape, causal):
    from codesign.evaluate import expected_output

    problem = _problem(*shape, causal)
    quantized = q15.prepare(problem, *problem.inputs())
    whole = quantized.expected()
    for rows in (1, 5, 64, 512, 2048):
        got = expected_output(quantized, rows)
        assert got.same_bits(whole), (rows, got.first_difference(whole))


def test_the_rtl_refuses_a_decode_problem_in_one_line():
    from codesign import rtl
    from codesign.run import rtl_plan

    ok, why = rtl.available()
    if not ok:
        pytest.skip(why)
    with pytest.raises(SpecError, match=r"^--rtl: q_len=1 of seq=64: the RTL's head engine runs a head's every query"):
        rtl_plan(_problem(64, 1, 2, 1, 8, True), Datapath(rows=4, cols=64))


def test_a_head_split_over_arrays_is_not_called_its_q_len():
    """Self-attention, seq 32 on 4 arrays: the mapper splits the head's rows over several arrays, each taking
    ⌈32 / split⌉ of them, so the message names those rows per array, not "q_len = ..." (the problem has no q_len of
    its own)."""
    from codesign.evaluate import mapping_note
    from codesign.groups import problem_cycles

    model = problem_cycles(Datapath(rows=32, cols=32, arrays=4), 32, 8, False, heads=1)
    split = model.mapping.split
    assert split > 1 and model.first.queries == -(-32 // split), model.mapping  # the case this test is about
    note = mapping_note(model)
    assert (f"M = {model.first.queries} query row(s) per array (a head's rows split over {split} arrays) on "
            f"{model.first.queries} of the array's 32 rows") in note
    assert "q_len" not in note.split(";")[0]
