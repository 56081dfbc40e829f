"""codesign/iso.py: the explorer's points against a measured target at equal area, equal power and at least fp16's
accuracy. Every expected figure is worked out by hand in the test from the synthetic columns it builds."""

from pathlib import Path

import numpy as np
import pytest

from codesign import iso
from codesign.measured import MeasuredPoint
from host.errors import SpecError
from host.problem import AttentionProblem

PROBLEM = AttentionProblem(batch=1, heads=16, seq=1024, dim=64)


def columns():
    # A: 100 mm², 4 ms, 10 mJ (2.5 W); B: 10 mm², 10 ms, 2 mJ (0.2 W); C: the fastest (0.1 ms, 50 mm², 10 W) but
    # less accurate than the bound (rel-L2 1e-2); D: skipped
    return {"area_mm2": np.array([100.0, 10.0, 50.0, np.nan]), "latency_s": np.array([4e-3, 1e-2, 1e-4, np.nan]),
            "energy_j": np.array([1e-2, 2e-3, 1e-3, np.nan]), "rel_l2": np.array([1e-4, 1e-4, 1e-2, np.nan]),
            "skipped": np.array(["", "", "", "buffers too small"], dtype=object),
            "array": np.array(["32x32", "8x8", "64x64", "8x8"]), "dataflow": np.array(["os"] * 4),
            "clock_mhz": np.array([1000.0] * 4), "node_nm": np.array([7.0] * 4)}


GPU = MeasuredPoint("gpu", "H200 flash float16", latency_s=1e-3, energy_j=0.5, timing_source="measured: CUDA events",
                    energy_source="measured: NVML", area_mm2=814.0)
BOARD = MeasuredPoint("mcu", "STM32F407 (twin) q15", latency_s=2.0, energy_j=0.2, timing_source="modelled: twin",
                      energy_source="datasheet", area_mm2=None)


def test_copies_and_their_latency_by_hand():
    # ⌊10 / 3⌋ = 3, ⌊10 / 10⌋ = 1; 11 does not fit once; a missing or zero figure never fits
    assert iso.copies(10.0, np.array([3.0, 10.0, 11.0, np.nan, 0.0])).tolist() == [3, 1, 0, 0, 0]
    # an absurd budget (a measured 1e300 J row's power) is as good as unlimited, never an int64 wrapped negative
    assert iso.copies(1e305, np.array([1.0, 1e-10])).tolist() == [2**53, 2**53]
    # 16 heads: 4 copies run 4 each (1 s · 4/16); 32 copies no better than 16 (one a head); 0 copies: out
    assert iso.copied_latency(np.array([1.0, 1.0, 1.0]), np.array([4, 32, 0]), 16).tolist() == [0.25, 1 / 16, np.inf]
    # 3 copies over 16 heads: ⌈16/3⌉ = 6 heads the busiest copy runs
    assert iso.copied_latency(np.array([1.0]), np.array([3]), 16)[0] == pytest.approx(6 / 16)


def test_the_fastest_accurate_point_at_the_gpus_area_and_power():
    rows = iso.compare(columns(), [GPU, BOARD], PROBLEM, accuracy_bound=1e-3)
    by = {(r.reference, r.budget): r for r in rows}
    # iso-area, 814 mm²: A copies ⌊814/100⌋ = 8 → 4 ms · 2/16 = 0.5 ms; B 81 copies → one a head: 10 ms / 16 =
    # 0.625 ms; C is faster but less accurate than fp16's bound: A, 2× the GPU's 1 ms, 50× less energy (0.5 J / 10 mJ)
    area = by[("H200 flash float16", "iso-area")]
    assert (area.index, area.fit, area.copies, area.latency_s) == (0, 8, 8, pytest.approx(5e-4))
    assert area.speedup == pytest.approx(2.0) and area.energy_gain == pytest.approx(50.0)
    # iso-power, 0.5 J / 1 ms = 500 W: A ⌊500 / 2.5⌋ = 200 copies → 16 → 0.25 ms (4×); B 2,500 → 0.625 ms
    power = by[("H200 flash float16", "iso-power")]
    assert (power.index, power.fit, power.copies, power.latency_s, power.budget_value) == \
        (0, 200, 16, pytest.approx(2.5e-4), 500.0)  # 16 of the 200 used: one a head
    # the board has no published die area: iso-power only, 0.2 J / 2 s = 0.1 W: A (2.5 W) does not fit, B (0.2 W)
    # does not either: a row saying so
    assert ("STM32F407 (twin) q15", "iso-area") not in by
    assert by[("STM32F407 (twin) q15", "iso-power")].index == -1
    text = iso.table(rows, columns(), 1e-3)
    assert "| STM32F407 (twin) q15 | iso-power 0.1 W | none of the allowed, accurate points fits once |" in text
    assert "| H200 flash float16 | iso-area 814 mm² | 32x32 os, 1000 MHz, 7 nm | 8 (8) | 500 µs (bound) | 2 |" in text


def test_a_looser_bound_admits_the_less_accurate_point():
    rows = iso.compare(columns(), [GPU], PROBLEM, accuracy_bound=2e-2)
    # C: ⌊814/50⌋ = 16 copies → 0.1 ms / 16 = 6.25 µs at iso-area
    assert {(r.budget, r.index) for r in rows} == {("iso-area", 2), ("iso-power", 2)}


def test_constraints_keep_points_within_area_and_power():
    c = columns()
    assert iso.within(c).tolist() == [True, True, True, False]
    assert iso.within(c, max_area_mm2=50).tolist() == [False, True, True, False]  # A is 100 mm²
    assert iso.within(c, max_power_w=1.0).tolist() == [False, True, False, False]  # A 2.5 W, C 10 W
    with pytest.raises(SpecError, match=r"max_area_mm2=-1 is out of range; allowed: a positive number"):
        iso.within(c, max_area_mm2=-1)
    with pytest.raises(SpecError, match=r"accuracy_bound=nan is out of range"):
        iso.compare(c, [GPU], PROBLEM, accuracy_bound=float("nan"))


def test_fp16s_error_on_the_probe_head_is_fp16_sized_and_above_the_contracts():
    # N(0,1) at d 64: fp16 rounds Q, K, V, P and O at 2^-11 ≈ 4.9e-4 relative; its rel-L2 lands a small multiple of
    # that under it, and the Q15 contract's exact-width rows are more accurate (docs/q15.md §8: 0.2-0.5 of fp16's)
    from codesign.explore import bit_labels

    bound = iso.fp16_rel_l2(PROBLEM)
    assert 5e-5 < bound < 2e-3
    [(label, contract)] = bit_labels(PROBLEM, [48], ["wrap"]).values()
    assert label == "all inputs" and contract < bound
    decode = iso.fp16_rel_l2(PROBLEM.with_(q_len=1, seq=4096))
    assert 0 < decode < 2e-3  # one row, the probe's last, against 256 keys


def gpu_results(folder: Path) -> Path:
    """A results folder holding one H200 row of B 1, H 2, N 97, d 16, causal: 20 µs and 5 mJ (250 W)."""
    from host.results import Result
    from host.results_file import ResultsFile

    ResultsFile(folder / "results.csv").append(Result(
        run_id="r", timestamp="t", git_rev="g", host="h", device="NVIDIA H200 (132 SMs)", target="gpu",
        kernel="flash", dtype="float16", batch=1, heads=2, seq=97, dim=16, causal=True, seed=0, status="ok",
        p50_ms=0.02, energy_j=0.005, energy_source="measured (NVML)", timing_source="measured: CUDA events"))
    return folder


def test_explore_writes_the_iso_table_against_a_gpu_row(tmp_path, capsys):
    """`codesign explore --results DIR --max-area` writes OUT/iso.md and prints it: the GPU row's 20 µs and 5 mJ
    give 250 W; its die area 814 mm²; the row's point and copies are checked against points.csv."""
    import csv

    from codesign.__main__ import main as codesign_main

    problem = AttentionProblem(batch=1, heads=2, seq=97, dim=16, causal=True)
    results = gpu_results(tmp_path / "run")
    space = {"array": ["8x8", "16x16"], "dataflow": ["os"], "exp_lanes": [16], "dividers": [8], "div_latency": [18],
             "buffers_kb": [[32, 64, 64, 128]], "clock_mhz": [500, 1000], "dram_gbps": [256], "node_nm": [7],
             "acc_bits": [40], "overflow": ["wrap"], "dram": ["hbm2"]}
    (tmp_path / "space.toml").write_text("\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in space.items()))
    out = tmp_path / "out"
    code = codesign_main(["explore", "--seq", "97", "--dim", "16", "--heads", "2", "--causal", "1", "--space",
                          str(tmp_path / "space.toml"), "--results", str(results), "--max-area", "1e6",
                          "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    text = (out / "iso.md").read_text()
    assert text in printed and "Points within area ≤ 1e+06 mm²: 4 of 4, 4 of them bit-exact for every input" in text
    bound = iso.fp16_rel_l2(problem)
    with open(out / "points.csv", newline="") as handle:
        points = [p for p in csv.DictReader(handle) if not p["skipped"] and float(p["rel_l2"]) <= bound]
    assert points, "the 40-bit points are exact, so more accurate than fp16"
    # at 814 mm² every point fits more than 2 times: 2 copies, one a head: the fastest point's latency halved
    fastest = min(points, key=lambda p: float(p["latency_s"]))
    line = next(row for row in text.splitlines() if "| iso-area 814 mm² |" in row)
    cells = [c.strip() for c in line.split("|")[1:-1]]
    assert cells[0] == "H200 flash float16"
    assert cells[2] == (f"{fastest['array']} os, serial, iterative divider (18 cycles), 40-bit accumulators, "
                        f"{float(fastest['clock_mhz']):.0f} MHz, 7 nm, 256 GB/s")
    assert cells[3] == f"2 ({int(814 // float(fastest['area_mm2']))})"  # 2 heads: 2 copies used
    assert float(cells[4].split()[0]) == pytest.approx(float(fastest["latency_s"]) / 2 * 1e6, rel=1e-2)
    assert "| iso-power 250 W |" in text


@pytest.mark.parametrize("args,message", [
    (["--max-area", "0"], "argument --max-area: max-area=0 is out of range; allowed: 1e-06..1e+06"),
    (["--max-power", "lots"], "argument --max-power: max-power='lots' is not a number"),
])
def test_explore_refuses_a_bad_bound_in_one_line(args, message, capsys):
    from codesign.__main__ import main as codesign_main

    assert codesign_main(["explore", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def _datapath_columns(datapaths, problem):
    """Explorer-like columns for `datapaths`: the parameters MappedShare rebuilds each from, and the whole problem's
    latency by problem_cycles."""
    from codesign.groups import problem_cycles
    from host.q15 import BC

    def column(f):
        return np.array([f(dp) for dp in datapaths], dtype=object)

    latency = [problem_cycles(dp, problem.seq, problem.dim, problem.causal, BC, problem.q_len, problem.heads,
                              problem.kv_heads, problem.batch).cycles / dp.clock_hz for dp in datapaths]
    return {"array": column(lambda dp: f"{dp.rows}x{dp.cols}"), "dataflow": column(lambda dp: dp.dataflow),
            "exp_lanes": column(lambda dp: dp.exp_lanes), "dividers": column(lambda dp: dp.dividers),
            "div_latency": column(lambda dp: dp.div_latency), "divider": column(lambda dp: dp.divider),
            "buffers_kb": column(lambda dp: f"{dp.q_buffer_kb:g}/{dp.k_buffer_kb:g}/{dp.v_buffer_kb:g}/"
                                            f"{dp.o_buffer_kb:g}"),
            "clock_mhz": column(lambda dp: dp.clock_hz / 1e6),
            "dram_gbps": column(lambda dp: dp.dram_bytes_per_cycle * dp.clock_hz / 1e9),
            "arrays": column(lambda dp: dp.arrays), "schedule": column(lambda dp: dp.schedule),
            "latency_s": np.array(latency)}


def test_a_copys_latency_is_the_cycle_models_for_its_share():
    """A copy running u of the 16 heads takes problem_cycles of u heads on the point's datapath, never less than the
    proportional share (fewer heads pipeline fewer prologues; a four-array point's lone head has its rows split over
    the arrays, each fold shorter but its fill and tail the same); one copy of the whole problem is the point."""
    from codesign.datapath import Datapath
    from codesign.groups import problem_cycles
    from host.q15 import BC

    problem = AttentionProblem(batch=1, heads=16, seq=256, dim=64)
    dps = [Datapath(rows=32, cols=32, clock_hz=500_000_000),
           Datapath(rows=16, cols=16, arrays=4, schedule="overlap", divider="pipelined", exp_lanes=32, dividers=32)]
    c = _datapath_columns(dps, problem)
    mapped, bound = iso.MappedShare(c, problem), iso.ProportionalShare(c, problem)
    assert mapped.exact and not bound.exact
    for i, dp in enumerate(dps):
        assert mapped(i, 16) == c["latency_s"][i]
        for u in (1, 3, 8):
            own = problem_cycles(dp, 256, 64, False, BC, None, u, None, 1).cycles / dp.clock_hz
            assert mapped(i, u) == pytest.approx(own, rel=1e-12)
            assert mapped(i, u) >= bound(i, u)
    assert mapped.evaluations == 6  # memoised: asking again costs no run
    mapped(1, 3)
    assert mapped.evaluations == 6


def test_the_bounded_search_finds_what_trying_every_point_finds():
    """compare() stops once no point's proportional bound can beat the best copy latency found; over a small space
    of one- and four-array points on both schedules its answer at every budget is the brute-force minimum of
    MappedShare over all fitting points, at a fraction of their evaluations."""
    from codesign.explore import check_space, explore
    from codesign.technology import Technology

    tech = Technology.load()
    problem = AttentionProblem(batch=2, heads=8, kv_heads=4, seq=128, dim=32)
    space = {"array": ["8x8", "16x16", "32x32"], "dataflow": ["os"], "exp_lanes": [8, 32], "dividers": [16],
             "div_latency": [18], "buffers_kb": [[32, 64, 64, 128]], "clock_mhz": [500, 1000],
             "dram_gbps": [25.6, 204.8], "node_nm": [7, 16], "acc_bits": [40], "overflow": ["wrap"],
             "dram": ["hbm2"], "divider": ["pipelined"], "arrays": [1, 4], "schedule": ["serial", "overlap"]}
    c = explore(problem, check_space(space, tech), tech).columns
    ok = iso.within(c)
    for budget in (0.5, 2.0, 8.0):  # mm²: few copies to many (8 units: 2 batches × 4 K/V groups)
        n = np.where(ok, iso.copies(budget, c["area_mm2"]), 0)
        share = iso.MappedShare(c, problem)
        found = iso.fastest(c, n, iso.units(problem), share)
        brute = iso.MappedShare(c, problem)
        per = iso.units_per_copy(n, 8)
        every = [brute(i, int(per[i])) if n[i] > 0 else np.inf for i in range(len(n))]
        assert found is not None and found[1] == pytest.approx(min(every), rel=1e-12), budget
        assert share.evaluations <= brute.evaluations


def test_points_read_back_from_points_csv_give_the_same_answer(tmp_path):
    """points.csv holds latencies to six figures, so a copy's model latency can come up to 5·10⁻⁶ under the bound
    computed from the rounded latency: compare() on the columns read back (as reports/issue-33/iso/summary.py reads
    them) must not trip its bound check, and picks the point the in-memory columns pick."""
    import csv

    from codesign.__main__ import main as codesign_main
    from codesign.explore import check_space, explore
    from codesign.technology import Technology

    space = {"array": ["8x8", "16x16"], "dataflow": ["os"], "exp_lanes": [8, 32], "dividers": [16],
             "div_latency": [18], "buffers_kb": [[32, 64, 64, 128]], "clock_mhz": [700, 1000], "dram_gbps": [25.6],
             "node_nm": [7], "acc_bits": [40], "overflow": ["wrap"], "dram": ["hbm2"],
             "divider": ["iterative", "reciprocal"], "arrays": [1], "schedule": ["serial"]}
    (tmp_path / "space.toml").write_text("\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in space.items()))
    problem = AttentionProblem(batch=1, heads=6, seq=97, dim=16)
    assert codesign_main(["explore", "--seq", "97", "--dim", "16", "--heads", "6", "--space",
                          str(tmp_path / "space.toml"), "--out", str(tmp_path / "out")]) == 0
    with open(tmp_path / "out" / "points.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    text = ("array", "dataflow", "buffers_kb", "divider", "schedule", "skipped", "div_latency", "overflow", "dram",
            "mapping", "bit_exact", "slower_than")
    read = {name: np.array([r[name] for r in rows], dtype=object) if name in text
            else np.array([float(r[name]) if r[name] else np.nan for r in rows]) for name in rows[0]}
    tech = Technology.load()
    memory = explore(problem, check_space(space, tech), tech).columns
    gpu = MeasuredPoint("gpu", "H200", latency_s=1e-3, energy_j=0.5, timing_source="t", energy_source="e",
                        area_mm2=814.0)
    for a, b in zip(iso.compare(read, [gpu], problem, 1e-3), iso.compare(memory, [gpu], problem, 1e-3)):
        assert a.index == b.index and a.latency_s == pytest.approx(b.latency_s, rel=1e-12), a.budget
    # six figures move a latency by up to 5·10⁻⁶ up: the copies' model latencies then sit that far under the bound
    # (a serial one-array point's one-head copy is exactly 1/6 of its 6-head run), which the search must allow
    high = {**read, "latency_s": read["latency_s"] * (1 + 5e-6)}
    assert [r.index for r in iso.compare(high, [gpu], problem, 1e-3)] == [r.index for r in iso.compare(read, [gpu],
                                                                                                      problem, 1e-3)]


def test_the_table_names_what_tells_points_apart():
    """Points sharing an array, clock and node differ by schedule, divider and accumulator: the ASIC cell names them,
    a divider's latency only where it applies (not a reciprocal one's, which points.csv leaves empty)."""
    c = columns()
    c.update(schedule=np.array(["overlap", "serial", "serial", "serial"], dtype=object),
             divider=np.array(["reciprocal", "pipelined", "iterative", "iterative"], dtype=object),
             div_latency=np.array(["", "9", "18", "18"], dtype=object), acc_bits=np.array([40, 36, 40, 40]))
    rows = iso.compare(c, [GPU], PROBLEM, accuracy_bound=2e-2, share=iso.ProportionalShare(c, PROBLEM))
    text = iso.table(rows, c, 2e-2)
    assert "| 64x64 os, serial, iterative divider (18 cycles), 40-bit accumulators, 1000 MHz, 7 nm |" in text
    c["divider"][2], c["div_latency"][2] = "reciprocal", ""
    text = iso.table(rows, c, 2e-2)
    assert "| 64x64 os, serial, reciprocal divider, 40-bit accumulators, 1000 MHz, 7 nm |" in text


def test_a_point_not_exact_for_every_input_is_never_named(tmp_path):
    """16- and 34-bit accumulators are as fast as the 40-bit one, cheaper, and come first in the space, but 16 bits
    wrap (points.csv: bit_exact no) and 34 are exact on the probe head alone (probe; as accurate as 40 there): iso.md's
    fastest and least-energy lines and its table name only 40-bit points."""
    import csv

    from codesign.__main__ import main as codesign_main

    results = gpu_results(tmp_path / "run")
    space = {"array": ["8x8", "16x16"], "dataflow": ["os"], "exp_lanes": [16], "dividers": [8], "div_latency": [18],
             "buffers_kb": [[32, 64, 64, 128]], "clock_mhz": [1000], "dram_gbps": [256], "node_nm": [7],
             "acc_bits": [16, 34, 40], "overflow": ["wrap"], "dram": ["hbm2"]}
    (tmp_path / "space.toml").write_text("\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in space.items()))
    out = tmp_path / "out"
    assert codesign_main(["explore", "--seq", "97", "--dim", "16", "--heads", "2", "--causal", "1", "--space",
                          str(tmp_path / "space.toml"), "--results", str(results), "--out", str(out)]) == 0
    with open(out / "points.csv", newline="") as handle:
        labels = {p["acc_bits"]: p["bit_exact"] for p in csv.DictReader(handle)}
    assert labels == {"16": "no", "34": "probe", "40": "all inputs"}, labels
    text = (out / "iso.md").read_text()
    assert "Points within no area or power bound: 6 of 6, 2 of them bit-exact for every input" in text
    named = [line for line in text.splitlines() if line.startswith(("- fastest", "- least energy", "| H200"))]
    assert len(named) == 6, named  # two lines, four budgets
    assert all("acc40" in line for line in named[:2]) and all("40-bit accumulators" in line for line in named[2:])
