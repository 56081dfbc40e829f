"""The energy and area model: the cited table (codesign/technology.toml) read and checked, its bands at every node,
and the per-head energy and area (codesign/energy.py) rebuilt from the table's primitives and held to published
sanity bands (shared/research/codesign.md: a bare 16-bit MAC ~0.9 pJ at 45 nm, Eyeriss ~12 pJ per MAC chip-level)."""

from __future__ import annotations

import math
import tomllib

import numpy as np
import pytest

from codesign import energy
from codesign.cycles import head_cycles
from codesign.datapath import Datapath
from codesign.technology import TABLE, Technology, _loglog
from host.errors import SpecError

RAW = tomllib.loads(TABLE.read_text())
TECH = Technology.load()


def test_every_number_of_the_table_names_a_source_with_a_citation():
    cited = {name for name, source in RAW["sources"].items() if len(source.get("cite", "")) > 40}
    entries = [*RAW["logic"], *RAW["sram"], *RAW.get("sram_cacti", []), *RAW["dram"]]
    assert entries and all(entry["source"] in cited for entry in entries)
    assert RAW["scaling"]["source"] in cited and RAW["assumptions"]["source"] in cited
    for entry in entries:
        for key in ("points", "area", "read", "area_um2", "leakage_nw"):
            for x, y in entry.get(key, []):
                assert x > 0 and y > 0 and math.isfinite(y)


def test_node_factors_come_from_the_listed_table_only():
    scaling = RAW["scaling"]
    for node, area in zip(scaling["nodes_nm"], scaling["area_from_45"]):
        assert TECH.area_factor(45, node) == pytest.approx(area)
    energies = [float(TECH.energy_factor(45, n)) for n in scaling["nodes_nm"]]
    assert energies == sorted(energies, reverse=True)  # smaller nodes: less energy per operation
    assert TECH.energy_factor(45, 45) == 1.0
    with pytest.raises(SpecError, match=r"node=28 nm is not in the scaling table; allowed: 130, 90, .*, 7"):
        TECH.check_node(28)


def test_two_sources_make_a_band_and_neither_is_picked_silently():
    horowitz, aladdin = ([e for e in RAW["logic"] if e["action"] == "multiply" and e["source"] == s][0]
                         for s in ("horowitz", "aladdin"))
    band = TECH.energy("multiply", 32, 45)
    assert float(band.low) == pytest.approx(horowitz["points"][1][1])  # 3.1 pJ
    assert float(band.high) == pytest.approx(aladdin["points"][0][1])  # 12.68 pJ
    at7 = TECH.energy("multiply", 32, 7)
    assert float(at7.low) == pytest.approx(float(band.low) * float(TECH.energy_factor(45, 7)))
    dram = TECH.dram("hbm2")  # the device alone (CACTI's 3.9) to the HBM level with PHY and controller (13.1)
    assert (float(dram.low), float(dram.high)) == (3.9, 13.1)
    with pytest.raises(SpecError, match="dram='sram' is not in the technology table; allowed: hbm2"):
        TECH.dram("sram")


def test_loglog_goes_through_its_points_and_is_monotone_between():
    points = [[8, 10.0], [32, 20.0], [1024, 100.0]]
    assert _loglog(points, [8, 32, 1024], None) == pytest.approx([10, 20, 100])
    between = _loglog(points, np.geomspace(8, 1024, 50), None)
    assert np.all(np.diff(between) > 0)
    assert _loglog([[32, 12.68]], 16, 2.0) == pytest.approx(12.68 / 4)


@pytest.mark.parametrize("change,message", [
    (lambda d: d["logic"][0].update(source="nobody"), "names no known source"),
    (lambda d: d.pop("scaling"), "missing or malformed entry"),
    (lambda d: d["logic"][1].pop("exponent"), "has one point and no exponent"),
    (lambda d: d["logic"][0].update(action="divide"), "logic action 'divide' is unknown"),
])
def test_a_broken_table_is_refused_in_one_line(change, message):
    data = tomllib.loads(TABLE.read_text())
    change(data)
    with pytest.raises(SpecError, match=message):
        Technology(data)


def test_a_garbage_table_file_is_refused_in_one_line(tmp_path):
    path = tmp_path / "t.toml"
    path.write_bytes(b"\x00\xff not toml [")
    with pytest.raises(SpecError, match="not a readable technology table"):
        Technology.load(path)


DP = Datapath(rows=16, cols=32, exp_lanes=8, dividers=8)
BUFFERS = (DP.q_buffer_kb, DP.k_buffer_kb, DP.v_buffer_kb, DP.o_buffer_kb)


def _head_energy(node: int, acc: int = 40, kind: str = "hbm2"):
    head = head_cycles(DP, 512, 64, False)
    traffic = {k: float(v) for k, v in head.traffic.items()}
    return head, energy.head_energy(TECH, traffic, DP.rows, DP.cols, acc, DP.div_latency, BUFFERS, node, kind)


def test_the_parts_add_up_and_each_is_count_times_its_primitive():
    head, parts = _head_energy(45)
    names = ("array", "buffers", "score", "softmax", "dividers", "idle", "clock", "dram")
    assert set(parts) == {*names, "total"}
    total = sum((parts[p] for p in names[1:]), parts["array"])
    assert float(parts["total"].low) == pytest.approx(float(total.low))
    assert float(parts["total"].high) == pytest.approx(float(total.high))
    mac = (TECH.energy("multiply", 16, 45) + TECH.energy("add", 40, 45) + TECH.energy("register", 1, 45) * 72)
    assert float(parts["array"].high) == pytest.approx(float(mac.high) * head.traffic["macs"])
    dram_bytes = sum(head.traffic[k] for k in ("dram_read_q_bytes", "dram_read_k_bytes", "dram_read_v_bytes",
                                                "dram_write_o_bytes"))
    assert float(parts["dram"].low) == pytest.approx(dram_bytes * 8 * 3.9)
    assert float(parts["dram"].high) == pytest.approx(dram_bytes * 8 * 13.1)
    for part in parts.values():
        assert np.all(part.low <= part.high)


def test_a_mac_costs_what_published_figures_say_and_shrinks_with_the_node():
    head, parts45 = _head_energy(45)
    per_mac = parts45["array"] * (1 / head.traffic["macs"])
    # a bare 16-bit MAC is ~0.9 pJ at 45 nm (Horowitz), Eyeriss' chip-level figure ~12 pJ: the cell sits between
    assert 0.9 <= float(per_mac.low) <= float(per_mac.high) <= 12
    _, parts7 = _head_energy(7)
    assert float(parts7["array"].high) < 0.2 * float(parts45["array"].high)
    # wider accumulators cost more, and DRAM kinds differ by their pJ/bit only
    _, wide = _head_energy(45, acc=48)
    assert float(wide["array"].low) > float(parts45["array"].low)
    _, lpddr = _head_energy(45, kind="lpddr4")
    assert float(lpddr["dram"].low) == pytest.approx(float(parts45["dram"].low) * 8.0 / 3.9)
    assert float(lpddr["array"].low) == float(parts45["array"].low)


def test_area_grows_with_the_array_and_the_overhead_band_is_applied():
    small = energy.area(TECH, 8, 8, 40, 8, 8, BUFFERS, 45)
    large = energy.area(TECH, 32, 32, 40, 8, 8, BUFFERS, 45)
    assert float(large["array"].low) == pytest.approx(16 * float(small["array"].low))
    low, high = RAW["assumptions"]["control_overhead"]
    for units in (small, large):
        raw = units["logic"] + units["buffers"]
        assert float(units["total"].low) == pytest.approx(low * float(raw.low))
        assert float(units["total"].high) == pytest.approx(high * float(raw.high))
    at7 = energy.area(TECH, 32, 32, 40, 8, 8, BUFFERS, 7)
    assert float(at7["array"].low) == pytest.approx(float(large["array"].low) * RAW["scaling"]["area_from_45"][-1])


def test_leakage_is_area_times_density_plus_the_srams_own():
    units = energy.area(TECH, 32, 32, 40, 8, 8, BUFFERS, 45)
    leak = energy.leakage_w(TECH, units, BUFFERS, 32, 32, 45)
    logic = units["logic"] * TECH.logic_leakage(45) * 1e-9
    assert float(leak.low) > float(logic.low) > 0
    assert float(leak.high) >= float(leak.low)


def test_a_source_marked_own_node_only_widens_the_band_at_its_node_alone():
    tpu = [e for e in RAW["sram"] if e["source"] == "tpuv4i"][0]
    assert tpu["own_node_only"]
    at7 = TECH.sram_read(8, 7)
    assert float(at7.high) == pytest.approx(tpu["read"][0][1])  # 7.5 pJ: above the scaled 45 nm sources
    without = tomllib.loads(TABLE.read_text())
    without["sram"] = [e for e in without["sram"] if e["source"] != "tpuv4i"]
    others = Technology(without)
    for node in (45, 32, 16):
        assert float(TECH.sram_read(8, node).high) == float(others.sram_read(8, node).high)
    assert float(others.sram_read(8, 7).high) < float(at7.high)


@pytest.mark.parametrize("change,message", [
    (lambda d: d["dram"][0].update(pj_per_bit=-3.9), r"pj_per_bit = -3.9; allowed: a finite number > 0"),
    (lambda d: d["sources"]["horowitz"].pop("cite"), "source 'horowitz' has no cite"),
    (lambda d: d["sources"]["horowitz"].update(node_nm=28), "source 'horowitz' is at node_nm=28"),
    (lambda d: d["assumptions"].update(control_overhead=[2.0, 1.0]), r"control_overhead=\[2.0, 1.0\]"),
    (lambda d: d["logic"][0].update(points=[[8, "x"]]), "allowed: a finite number > 0"),
    (lambda d: d["logic"][0].update(points=[]), "a non-empty list of"),
    (lambda d: d["sram"][0].update(read=[[32, 20.0], [8, 10.0]]), "not strictly increasing"),
])
def test_numbers_the_table_promises_are_checked(change, message):
    data = tomllib.loads(TABLE.read_text())
    change(data)
    with pytest.raises(SpecError, match=message):
        Technology(data)


def test_actions_prints_both_area_sources_unit_by_unit(capsys):
    from codesign import actions
    from codesign.technology import GateCalibration

    assert actions.main(["--node", "7", "--array", "8x8", "--exp-lanes", "4", "--dividers", "8"]) == 0
    out = capsys.readouterr().out.split("gate equivalents × NAND2 area")[1]
    gates, nand2 = GateCalibration.load(), TECH.nand2_area(7)
    divider = next(line for line in out.splitlines() if line.strip().startswith("divider"))
    table = energy.divider_cycle(TECH, 7, "area")
    assert f"{float(table.low):.3g} .. {float(table.high):.3g}" in divider  # the table's band
    assert f"{gates.divider:,.0f} GE: {float(nand2.low * gates.divider):.3g} .. " \
           f"{float(nand2.high * gates.divider):.3g}" in divider  # GE × NAND2 band
    total = next(line for line in out.splitlines() if line.strip().startswith("datapath logic"))
    ge = 64 * gates.mac(40, "wrap") * gates.array_overhead + 8 * gates.score_lane(40) \
        + 4 * (gates.exp2 + gates.rescale) + 8 * gates.divider
    assert f"{ge:,.0f} GE" in total
