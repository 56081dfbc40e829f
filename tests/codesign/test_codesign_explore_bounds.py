"""--max-area and --max-power bound every answer of `codesign explore`: the fronts (front.csv and the console), the
sensitivity table, both plots and iso.md, while points.csv keeps every point. The fronts are checked against a
brute-force dominance test over the points within the bounds; the plots by what they draw."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from codesign import explore_plots, iso
from codesign.__main__ import main as codesign_main
from codesign.explore import check_space, explore, fronts, sensitivity
from codesign.technology import Technology
from host.problem import AttentionProblem

TECH = Technology.load()
PROBLEM = AttentionProblem(batch=1, heads=2, seq=97, dim=16, causal=True)
SPACE = {"array": ["8x8", "16x16", "32x32"], "dataflow": ["os"], "exp_lanes": [16], "dividers": [8],
         "div_latency": [18], "buffers_kb": [[32, 64, 64, 128]], "clock_mhz": [500, 1000], "dram_gbps": [256],
         "node_nm": [45, 7], "acc_bits": [24, 40], "overflow": ["wrap"], "dram": ["hbm2"]}


def _dominated(objectives: np.ndarray, i: int, among: np.ndarray) -> bool:
    """Whether any point of `among` is no worse than point i in every objective and better in one."""
    others = objectives[among]
    return bool(((others <= objectives[i]).all(axis=1) & (others < objectives[i]).any(axis=1)).any())


def test_the_fronts_hold_only_points_within_the_bounds():
    result = explore(PROBLEM, check_space(SPACE, TECH), TECH)
    c = result.columns
    exact = c["bit_exact"] == "all inputs"  # the 40-bit points; the 24-bit ones are below the exact width
    unbounded = fronts(result)[0][1]
    # a bound below the unbounded front's largest point, so that it must move
    bound = float(np.sort(c["area_mm2"][unbounded])[-1]) * 0.99
    allowed = iso.within(c, max_area_mm2=bound)
    assert (~allowed[unbounded]).any() and allowed.any()
    objectives = np.column_stack((c["latency_s"], c["energy_j"], c["area_mm2"]))
    candidates = np.flatnonzero(allowed & exact)
    brute = {int(i) for i in candidates if not _dominated(objectives, i, candidates)}
    for name, idx in fronts(result, allowed):
        assert (c["area_mm2"][idx] <= bound).all(), name
        if name == "all nodes":
            assert set(idx.tolist()) == brute
    base = int(fronts(result, allowed)[0][1][0])
    # at the base's node, clock and width, only arrays below the bound vary: the bound is under the unbounded
    # front's largest point, so at least that array drops out of the sensitivity table's array row
    same = np.ones(len(c["array"]), dtype=bool)
    for key in ("clock_mhz", "node_nm", "acc_bits"):
        same &= c[key] == c[key][base]
    rows = {row["parameter"]: row for row in sensitivity(result, base, allowed)}
    free = {row["parameter"]: row for row in sensitivity(result, base)}
    assert free["array"]["values"] == 3  # 8x8, 16x16, 32x32
    assert rows.get("array", {"values": 1})["values"] == int((same & allowed).sum()) < 3


@pytest.mark.slow  # seconds: an explore run with its plots
def test_explore_applies_the_bounds_to_front_csv_the_console_and_the_plots(tmp_path, capsys, monkeypatch):
    figures = []
    make = explore_plots._figure
    monkeypatch.setattr(explore_plots, "_figure", lambda *size: figures.append(make(*size)) or figures[-1])
    (tmp_path / "space.toml").write_text("\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in SPACE.items()))
    out = tmp_path / "out"
    args = ["explore", "--seq", "97", "--dim", "16", "--heads", "2", "--causal", "1", "--space",
            str(tmp_path / "space.toml"), "--out", str(out)]
    assert codesign_main(args) == 0
    with open(out / "points.csv", newline="") as handle:
        points = list(csv.DictReader(handle))
    areas = sorted({float(p["area_mm2"]) for p in points if p["bit_exact"] == "all inputs"})
    # halfway between two areas (each shared by both clocks), clear of points.csv's 6-digit rounding
    bound = (areas[len(areas) // 2 - 1] + areas[len(areas) // 2]) / 2
    power = max(float(p["energy_j"]) / float(p["latency_s"]) for p in points)  # no power bound bites
    figures.clear()
    capsys.readouterr()
    assert codesign_main([*args, "--max-area", f"{bound:.17g}", "--max-power", f"{power * 2:.17g}"]) == 0
    printed = capsys.readouterr().out
    with open(out / "points.csv", newline="") as handle:
        assert len(list(csv.DictReader(handle))) == len(points)  # points.csv keeps every point
    with open(out / "front.csv", newline="") as handle:
        front = list(csv.DictReader(handle))
    assert front and all(float(row["area_mm2"]) <= bound for row in front)
    assert f"front all nodes (points within area ≤ {bound:g} mm² and power ≤ {power * 2:g} W):" in printed
    inside = sum(1 for p in points if p["bit_exact"] == "all inputs" and float(p["area_mm2"]) <= bound)
    runnable = sum(1 for p in points if not p["skipped"])
    outside_all = sum(1 for p in points if not p["skipped"] and float(p["area_mm2"]) > bound)
    outside_exact = sum(1 for p in points if p["bit_exact"] == "all inputs" and float(p["area_mm2"]) > bound)
    energy_latency, efficiency = figures
    for figure, outside in ((energy_latency, outside_all), (efficiency, outside_exact)):
        ax = figure.axes[0]
        drawn = [len(col.get_offsets()) for col in ax.collections if len(col.get_offsets())]
        silver = (0.753, 0.753, 0.753)  # matplotlib's "silver", #c0c0c0
        faint = [len(col.get_offsets()) for col in ax.collections
                 if len(col.get_offsets()) and np.allclose(col.get_edgecolor()[:, :3], silver, atol=1e-2)]
        assert faint == [outside], (drawn, outside)
        assert "points within area ≤" in ax.get_title()
    coloured = [col for col in energy_latency.axes[0].collections if col.get_array() is not None]
    assert len(coloured[0].get_offsets()) == inside <= runnable


def test_a_bound_no_point_meets_empties_the_fronts_and_says_why(tmp_path, capsys):
    (tmp_path / "space.toml").write_text("\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in SPACE.items()))
    out = tmp_path / "out"
    assert codesign_main(["explore", "--seq", "97", "--dim", "16", "--heads", "2", "--causal", "1", "--space",
                          str(tmp_path / "space.toml"), "--max-area", "1e-6", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert ("front all nodes (points within area ≤ 1e-06 mm²): empty: no point lies within area ≤ 1e-06 mm²: "
            "raise --max-area or --max-power") in printed
    iso_text = (out / "iso.md").read_text()
    assert "Points within area ≤ 1e-06 mm²: 0 of 24, 0 of them bit-exact for every input" in iso_text
    assert not (out / "sensitivity.csv").exists()


@pytest.mark.parametrize("bound", ["max_area_mm2", "max_power_w"])
def test_a_bound_beyond_every_point_changes_nothing(bound):
    result = explore(PROBLEM, check_space(SPACE, TECH), TECH)
    everything = iso.within(result.columns, **{bound: 1e6})  # 1e6 mm² or W: above every point of this space
    assert [idx.tolist() for _, idx in fronts(result, everything)] == [idx.tolist() for _, idx in fronts(result)]


def test_the_dram_stall_share_is_over_every_arrays_cycles():
    """Stalls are summed over every array's heads (mapping.ProblemCycles.stall_cycles); the share divides them by the
    P arrays' cycles, so it stays a share: at most 1."""
    from codesign.datapath import Datapath
    from codesign.groups import problem_cycles

    space = check_space({**SPACE, "array": ["8x8"], "clock_mhz": [1000], "node_nm": [7], "acc_bits": [40],
                         "dram_gbps": [25.6], "arrays": [4], "schedule": ["overlap"]}, TECH)
    c = explore(PROBLEM, space, TECH).columns
    model = problem_cycles(Datapath(rows=8, cols=8, exp_lanes=16, dividers=8, clock_hz=1_000_000_000,
                                    dram_bytes_per_cycle=25.6, arrays=4, schedule="overlap"),
                           seq=97, dim=16, causal=True, heads=2)
    assert model.mapping.across * model.mapping.split == 4  # the four arrays each run a share, stalling side by side
    assert c["dram_stall_share"][0] == pytest.approx(model.stall_cycles / (4 * model.cycles))
    assert (c["dram_stall_share"] <= 1).all()
