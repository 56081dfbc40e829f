"""The reciprocal-and-multiply divider as a Datapath choice (`divider="reciprocal"`): its cycles by hand
(codesign/divider_cycles.py), its bits against host/q15.py on awkward shapes through the datapath's bit model, its
area and energy from the table's primitives (codesign/energy.py), the explorer taking it, and bad values refused in one
line naming the allowed ones."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from codesign import divider_cycles, energy
from codesign.bits import run_head
from codesign.cycles import head_cycles
from codesign.datapath import Datapath
from codesign.explore import SWEPT, check_space, explore, sensitivity, space_size
from codesign.explore_cli import as_written, write_points
from codesign.technology import Technology
from host import q15
from host.errors import SpecError
from host.problem import AttentionProblem

TECH = Technology.load()


def test_tile_cycles_by_hand():
    dp = Datapath(dividers=8, divider="reciprocal")
    # 32 rows, d 16 on 8 lanes: the reciprocals take ⌈32/8⌉ = 4 rounds of 34 cycles = 136, longer than the 16-cycle
    # peak pass they run beside; then ⌈32·16/8⌉ = 64 waves of products, the last out 3 − 1 cycles after it entered:
    # 136 + 64 + 2 = 202. A tile of 5 rows: one round of 34 (> 16), ⌈80/8⌉ = 10 waves: 34 + 10 + 2 = 46.
    assert divider_cycles.tile_cycles(dp, 16, np.array([32, 5])).tolist() == [202, 46]
    # d 128, 8 rows on 8 lanes: the peak pass (128) is longer than one round of reciprocals (34): 128 + 128 + 2
    assert divider_cycles.tile_cycles(dp, 128, np.array([8])).tolist() == [258]
    assert divider_cycles.reciprocals(dp, 97) == 97 and divider_cycles.reciprocals(Datapath(), 97) == 0


def test_a_reciprocal_divider_head_by_hand():
    dp = Datapath(rows=4, cols=4, dataflow="os", exp_lanes=4, dividers=4, div_latency=18, dram_bytes_per_cycle=32,
                  divider="reciprocal")
    head = head_cycles(dp, seq=4, dim=4, causal=False, bc=4)
    # test_codesign_cycles' first case (one tile of 4 rows, one block of 4 keys, d 4; prologue 3, fill 18, the step
    # 20, epilogue 2) with reciprocal lanes: max(peak pass 4, ⌈4/4⌉ · 34) = 34, then ⌈16/4⌉ = 4 waves, + 3 − 1:
    # 40, all exposed (the only tile). 3 + 18 + 20 + 40 + 2 = 83: slower than the pipelined divider's 68 on so short
    # a row, where one reciprocal's 34 cycles are not amortised over d = 4 products.
    assert head.cycles == 83 and head.stages["divider"].busy_cycles == 40
    assert head.stages["divider"].utilisation == 16 / (40 * 4)  # one multiplier-cycle per quotient
    assert head.traffic["reciprocals"] == 4 and head.traffic["divisions"] == 16


def test_the_default_datapath_with_each_divider_by_hand():
    # seq 64, d 64 on the default 32x32 with 32 dividers: two tiles of 32 rows; a tile's divider stage is
    #   iterative   64 + ⌈32·64/32⌉ · 18 = 64 + 64 · 18 = 1216
    #   pipelined   64 + 64 + 18 − 1 = 145
    #   reciprocal  max(64, ⌈32/32⌉ · 34) + 64 + 3 − 1 = 130
    # Everything else is the same datapath, and the last tile's stage is exposed whole, the first tile's beside the
    # second's steps: the heads differ by the exposed part only.
    heads = {kind: head_cycles(Datapath(divider=kind), 64, 64, False) for kind in ("iterative", "pipelined",
                                                                                  "reciprocal")}
    busy = {kind: head.stages["divider"].busy_cycles for kind, head in heads.items()}
    assert busy == {"iterative": 2 * 1216, "pipelined": 2 * 145, "reciprocal": 2 * 130}
    assert heads["reciprocal"].divider_tail == 130
    assert heads["pipelined"].cycles - heads["reciprocal"].cycles == 145 - 130  # both fit beside the next tile


def _inputs(kind: str, problem: AttentionProblem):
    """(B, H, q_len, d), (B, H, seq, d) ×2 floats: the problem's seeded N(0,1), or extremes on the Q15 grid
    (−1.0 and 0 alternating, so scores tie and l is large; V random at full scale)."""
    q, k, v = problem.inputs()
    if kind == "normal":
        return q, k, v
    rng = np.random.default_rng(problem.seed)
    q = -np.ones(q.shape)
    k = np.zeros(k.shape)
    k[..., 0::2, :] = -1.0
    v = rng.integers(-32768, 32768, v.shape) / 32768.0
    return q, k, v


@pytest.mark.parametrize("seq,q_len", [(1, None), (17, None), (97, None), (97, 1), (97, 17)])
@pytest.mark.parametrize("dim", [1, 59, 64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", ["normal", "extreme"])
def test_reciprocal_bits_equal_the_contract_on_awkward_shapes(seq, q_len, dim, causal, kind):
    problem = AttentionProblem(batch=1, heads=2, seq=seq, q_len=q_len, dim=dim, causal=causal, dtype="q15", seed=3)
    quantized = q15.prepare(problem, *_inputs(kind, problem))
    expected = quantized.expected()
    for dp in (Datapath(divider="reciprocal"), Datapath(rows=5, cols=3, dividers=7, divider="reciprocal")):
        for h in range(problem.heads):
            head = run_head(*quantized.head(0, h), quantized.params, dp, quantized.row0)
            want = q15.Q15Out(expected.o[0, h], expected.shift[0, h])
            assert head.out.same_bits(want), (dp.name, h)


def test_area_and_energy_from_the_tables_primitives():
    # At 45 nm, from the table's sources (codesign/technology.toml):
    # - a 33-bit add: Horowitz 137 µm² at 32 bits, log-log with 8 bits' 36 (slope ln(137/36)/ln 4 = 0.964):
    #   137 · (33/32)^0.964 = 141.1; Aladdin 278 at 32 bits, ∝ width: 286.7. 0.1 pJ · (33/32)^0.86.. and 0.21·33/32.
    # - a register bit: Aladdin, 5.98 µm², 0.009 pJ.
    # - a 31 × 33 multiply, costed as a square one of √1023 = 31.98 bits: Horowitz 3,495 µm² and 3.1 pJ at 32 bits
    #   (∝ bits^1.98 from 8 bits' 0.2 pJ), Aladdin 6,350 µm² and 12.68 pJ at 32×32, ∝ the bits' product (× 1023/1024).
    # reciprocal cycle = add33 + 82 register bits: 141.1 + 490.4 = 631.5 .. 286.7 + 490.4 = 777.1 µm²;
    # product lane = mult + add32 + 144 register bits: 3,492 + 137 + 861.1 = 4,490 .. 6,344 + 278 + 861.1 = 7,483 µm².
    lane = energy.reciprocal_lane(TECH, 45)
    assert float(lane.low) == pytest.approx(631.5 + 4490, rel=1e-3)
    assert float(lane.high) == pytest.approx(777.1 + 7483, rel=1e-3)
    # An iterative divider is 137 + 96 · 5.98 = 711 .. 278 + 574 = 852 µm²: a reciprocal lane is 7.2–9.7 of them,
    # a pipelined divider of 18 stages 18.
    stage = energy.divider_cycle(TECH, 45, "area")
    assert 7 < float(lane.low / stage.low) < float(lane.high / stage.high) < 10
    # Energy per quotient at d = 64: 34 reciprocal cycles a row (0.841 .. 0.955 pJ each: 0.1 · (33/32)^0.86 = 0.103 or
    # 0.21 · 33/32 = 0.217, + 82 · 0.009 = 0.738) shared by 64 quotients, plus a product (3.097 + 0.1 + 144 · 0.009 =
    # 4.493 .. 12.668 + 0.21 + 1.296 = 14.174 pJ): 4.94 .. 14.68 pJ, against an iterative division's 18 cycles of
    # 0.1 + 0.864 = 0.964 .. 0.21 + 0.864 = 1.074 pJ: 17.35 .. 19.33 pJ.
    traffic = {"divisions": np.array([64 * 64, 64 * 64]), "reciprocals": np.array([0, 64])}
    parts = energy.divider_energy(TECH, traffic, 18, np.array(["iterative", "reciprocal"]), 45)
    per_quotient_low, per_quotient_high = parts.low / 4096, parts.high / 4096
    assert per_quotient_low.tolist() == pytest.approx([17.35, 34 * 0.841 / 64 + 4.493], rel=1e-3)
    assert per_quotient_high.tolist() == pytest.approx([19.33, 34 * 0.9546 / 64 + 14.174], rel=1e-3)


def test_the_explorer_takes_the_reciprocal_divider():
    space = check_space({"array": ["16x16"], "dataflow": ["os"], "exp_lanes": [16], "dividers": [8],
                         "buffers_kb": [[32, 64, 64, 128]], "clock_mhz": [1000], "dram_gbps": [256], "node_nm": [45],
                         "acc_bits": [40], "divider": ["iterative", "pipelined", "reciprocal"]}, TECH)
    problem = AttentionProblem(batch=1, heads=2, seq=128, dim=64, causal=False, dtype="q15", seed=0)
    c = explore(problem, space, TECH).columns
    at = {kind: int(np.flatnonzero(c["divider"] == kind)[0]) for kind in ("iterative", "pipelined", "reciprocal")}
    stage = energy.divider_cycle(TECH, 45, "area")
    lane = energy.reciprocal_lane(TECH, 45)
    for end, share in (("low", 0), ("high", 1)):  # 8 reciprocal lanes in place of 8 iterative dividers
        extra = c[f"area_mm2_{end}"][at["reciprocal"]] - c[f"area_mm2_{end}"][at["iterative"]]
        expected = 8 * (getattr(lane, end) - getattr(stage, end)) * TECH.overhead[share] * 1e-6
        assert extra == pytest.approx(float(expected))
    # the reciprocal point's latency: 2 heads of 8 tiles of 16 rows, d 64 on 8 lanes; a tile's stage is
    # max(64, 2 · 34) + 128 + 2 = 198 against the pipelined 64 + 128 + 17 = 209 and the iterative 64 + 128 · 18
    from codesign.divider_cycles import tile_cycles

    stages = {kind: int(tile_cycles(Datapath(rows=16, cols=16, dividers=8, divider=kind), 64, np.array([16]))[0])
              for kind in ("iterative", "pipelined", "reciprocal")}
    assert stages == {"iterative": 64 + 128 * 18, "pipelined": 209, "reciprocal": 198}
    assert c["latency_s"][at["iterative"]] > c["latency_s"][at["pipelined"]] > c["latency_s"][at["reciprocal"]]
    assert (c["bit_exact"] == "all inputs").all()
    from codesign.explore_cli import _point_line  # the console names each kind; a reciprocal one has no div_latency

    assert [_point_line(c, at[kind]).split()[3] for kind in ("iterative", "pipelined", "reciprocal")] == \
        ["div8x18", "pdiv8x18", "rdiv8"]
    assert Datapath(divider="reciprocal").name == "sa32x32-os-acc40-rdiv"


def test_a_reciprocal_configuration_is_evaluated_once_whatever_the_div_latency(tmp_path):
    """No figure of a reciprocal divider depends on div_latency: a space of two latencies holds each reciprocal point
    once (points.csv: div_latency empty, it does not apply), each iterative point twice, varying with it."""
    space = check_space({"array": ["8x8", "16x16"], "dataflow": ["os"], "exp_lanes": [16], "dividers": [8],
                         "div_latency": [18, 40], "buffers_kb": [[32, 64, 64, 128]], "clock_mhz": [1000],
                         "dram_gbps": [256], "node_nm": [45, 7], "acc_bits": [40],
                         "divider": ["iterative", "reciprocal"]}, TECH)
    problem = AttentionProblem(batch=1, heads=2, seq=97, dim=16, causal=True, dtype="q15", seed=0)
    result = explore(problem, space, TECH)
    c = result.columns
    # 2 arrays × (iterative at 2 latencies + reciprocal once) cycle configurations, × 2 nodes
    assert space_size(space) == (2 * 3, 2 * 3 * 2) and result.cycle_configs == 6 and len(result) == 12
    others = [name for name in SWEPT if name != "div_latency"]
    for kind, copies in (("iterative", 2), ("reciprocal", 1)):
        idx = np.flatnonzero(c["divider"] == kind)
        keys = [tuple(str(c[name][i]) for name in others) for i in idx]
        assert len(keys) == 4 * copies and len(set(keys)) == 4, kind  # 2 arrays × 2 nodes, each `copies` times
        if kind == "iterative":  # its cycles and energy move with the latency (its area, one stage, does not)
            for key in set(keys):
                pair = [i for i, k in zip(idx, keys) if k == key]
                assert sorted(c["div_latency"][pair].tolist()) == [18, 40]
                slow, fast = sorted(pair, key=lambda i: -c["div_latency"][i])
                assert c["latency_s"][slow] > c["latency_s"][fast] and c["energy_j"][slow] > c["energy_j"][fast]
                assert c["area_mm2"][slow] == c["area_mm2"][fast]
    # the reciprocal point is the one an explorer of that latency alone gives, at either latency
    for latency in (18, 40):
        alone = explore(problem, {**space, "div_latency": [latency], "divider": ["reciprocal"]}, TECH).columns
        mine = c["divider"] == "reciprocal"
        for metric in ("latency_s", "energy_j", "area_mm2", "synth_area_mm2"):
            assert c[metric][mine].tolist() == alone[metric].tolist(), metric
    # the files say the latency does not apply; the sensitivity around an iterative point still varies the kind
    write_points(as_written(c), tmp_path / "points.csv")
    with open(tmp_path / "points.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["divider"], r["div_latency"]) for r in rows} == {("iterative", "18"), ("iterative", "40"),
                                                                ("reciprocal", "")}
    base = int(np.flatnonzero((c["divider"] == "iterative") & (c["div_latency"] == 40))[0])
    [kinds] = [row for row in sensitivity(result, base) if row["parameter"] == "divider"]
    assert kinds["values"] == 2
    # the console's sensitivity header names the base point's div_latency only where it applies, as the files do
    from codesign.explore_cli import _sensitivity_lines

    recip = int(np.flatnonzero(c["divider"] == "reciprocal")[0])
    assert "div_latency" not in _sensitivity_lines(c, recip, [])[0]
    assert "div_latency 40, " in _sensitivity_lines(c, base, [])[0]


@pytest.mark.parametrize("value", ["recip", "Reciprocal", ""])
def test_a_bad_divider_is_refused_in_one_line(value):
    with pytest.raises(SpecError) as info:
        Datapath(divider=value)
    assert str(info.value) == f"divider={value!r} is unknown; allowed: iterative, pipelined, reciprocal"
    with pytest.raises(SpecError) as info:
        check_space({"divider": [value]}, TECH)
    assert str(info.value) == f"space: divider={value!r} is unknown; allowed: iterative, pipelined, reciprocal"


def test_the_rtl_refuses_the_reciprocal_divider_in_one_line(capsys):
    from codesign import rtl
    from codesign.__main__ import main as codesign_main

    ok, why = rtl.available()
    if not ok:  # without Amaranth, --rtl is refused for that first
        pytest.skip(why)
    code = codesign_main(["run", "--seq", "8", "--dim", "4", "--array", "4x64", "--divider", "reciprocal", "--rtl"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0] == ("kbench: error: --rtl: divider='reciprocal' has no RTL; allowed: 'iterative' "
                      "(docs/codesign_rtl.md)")


@pytest.mark.slow  # seconds: the asic target on seq 97 heads, bit-exact checks
def test_the_asic_target_runs_the_reciprocal_divider(tmp_path):
    """host.compare --asic-divider reciprocal: rows named after the datapath, judged bit-exact like every Q15 row."""
    from host.results_file import ResultsFile
    from host.sweep import cli as compare

    out = tmp_path / "asic"
    assert compare.main(["--targets", "asic", "--seq", "17", "--dim", "59", "--heads", "2", "--causal", "both",
                         "--asic-divider", "reciprocal", "--out", str(out)]) == 0
    rows = ResultsFile(out / "results.csv").read()
    assert [(row.kernel, row.status, row.bit_exact) for row in rows] == [("sa32x32-os-acc40-rdiv", "ok", True)] * 2
