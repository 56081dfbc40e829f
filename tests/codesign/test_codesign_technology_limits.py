"""Issue 33's honest energy: TPUv4i's 7 nm logic beside the scaled sources, the alpha-power-law supply at a clock
(DVFS), f_max refused, clock-tree and idle-PE energy, HBM at the system level, SRAM banks from the array's
operand bandwidth and the clock their access time allows. Every expected value is computed here by hand from the
figures technology.toml cites (written out beside each check), not read back from the code under test."""

from __future__ import annotations

import math
import tomllib

import numpy as np
import pytest

from codesign import energy
from codesign.cycles import head_cycles
from codesign.datapath import Datapath
from codesign.technology import TABLE, Technology
from codesign.technology_limits import operand_bytes_per_cycle, sram_timing_reasons
from host.errors import SpecError

TECH = Technology.load()
LIMITS = TECH.limits


def _factor_45_to_7() -> float:
    """Stillmaker-Baas at 0.8 V: a·V² + b·V + c of the 7 nm row over the 45 nm row (technology.toml [scaling])."""
    v = 0.8
    at45 = 1.103 * v * v - 0.362 * v + 0.2767
    at7 = 0.1776 * v * v - 0.09097 * v + 0.02447
    return at7 / at45


def test_tpuv4i_logic_widens_the_7nm_band_and_is_used_at_7nm_only():
    f = _factor_45_to_7()  # 0.0943
    band = TECH.energy("multiply", 32, 7)
    assert float(band.low) == pytest.approx(3.1 * f)  # Horowitz's 32-bit multiply, scaled
    assert float(band.high) == pytest.approx(1.48)  # TPUv4i's int32 multiply, above Aladdin's scaled 12.68 × f
    assert 12.68 * f < 1.48
    # 16 bits is the log-midpoint of TPUv4i's 8 and 32: its log-log figure there is the geometric mean
    assert float(TECH.energy("multiply", 16, 7).high) == pytest.approx(math.sqrt(0.07 * 1.48))
    # a 32-bit add at 7 nm: Horowitz 0.1 × f = 0.0094, Aladdin 0.21 × f = 0.0198, TPUv4i 0.03 (the high end)
    assert float(TECH.energy("add", 32, 7).low) == pytest.approx(0.1 * f)
    assert float(TECH.energy("add", 32, 7).high) == pytest.approx(0.03)
    # at 45 nm the band is the other sources' alone: Horowitz 3.1 to Aladdin 12.68
    at45 = TECH.energy("multiply", 32, 45)
    assert (float(at45.low), float(at45.high)) == pytest.approx((3.1, 12.68))


def test_hbm_runs_from_the_device_alone_to_the_system_level():
    band = TECH.dram("hbm2")
    assert (float(band.low), float(band.high)) == (3.9, 13.1)  # CACTI's device figure; the A100 at the HBM level


def test_fmax_is_forty_fo4_capped_at_2_ghz():
    assert float(LIMITS.fmax(45)) == pytest.approx(1e12 / (40 * 0.36 * 45))  # 1 / (40 × 16.2 ps) = 1.543 GHz
    assert float(LIMITS.fmax(130)) == pytest.approx(1e12 / (40 * 0.36 * 130))  # 534 MHz
    assert float(LIMITS.fmax(32)) == 2e9  # the rule's 2.17 GHz, capped
    assert float(LIMITS.fmax(7)) == 2e9


def _speed(v: float) -> float:
    return (v - 0.3) ** 1.3 / v  # the alpha-power law with the table's v_th and alpha


def test_the_supply_at_a_clock_follows_the_alpha_power_law():
    # 45 nm at 0.6 V runs f_max × speed(0.6) / speed(1.0): 1.543 GHz × 0.4085 = 630 MHz; its energy is 0.36×
    clock = 1e12 / (40 * 0.36 * 45) * _speed(0.6) / _speed(1.0)
    assert float(LIMITS.voltage(45, clock)) == pytest.approx(0.6, abs=1e-9)
    assert float(LIMITS.energy_scale(45, clock)) == pytest.approx(0.36, abs=1e-8)
    # at f_max the nominal supply, at any slower clock than v_min gives: v_min
    assert float(LIMITS.voltage(7, 2e9)) == pytest.approx(0.7)
    slowest = 2e9 * _speed(0.5) / _speed(0.7)  # 1.137 GHz at 7 nm
    assert float(LIMITS.voltage(7, slowest * 0.5)) == 0.5
    assert float(LIMITS.energy_scale(7, 1e8)) == pytest.approx((0.5 / 0.7) ** 2)
    clocks = np.array([2e8, 5e8, 1e9, 1.5e9])
    scales = LIMITS.energy_scale(45, clocks)
    assert np.all(np.diff(scales) >= 0) and scales[-1] < 1  # slower: never more energy per action


def test_a_clock_above_fmax_is_refused_in_one_line_and_flagged_per_point():
    reasons = LIMITS.clock_reasons(np.array([45, 45, 7]), np.array([1.5e9, 1.6e9, 2.5e9]))
    assert reasons[0] == ""
    assert reasons[1] == "clock 1600 MHz is above 45 nm's f_max 1543 MHz"
    assert reasons[2] == "clock 2500 MHz is above 7 nm's f_max 2000 MHz"
    assert np.isnan(LIMITS.voltage(45, 1.6e9))
    with pytest.raises(SpecError, match=r"^clock=1.6e\+09 Hz is above 45 nm's f_max; allowed: up to 1.543e\+09 Hz"):
        LIMITS.check_clock(45, 1.6e9)
    assert LIMITS.check_clock(45, 1.5e9) == 1.5e9


DP = Datapath(rows=16, cols=32, exp_lanes=8, dividers=8)
BUFFERS = (DP.q_buffer_kb, DP.k_buffer_kb, DP.v_buffer_kb, DP.o_buffer_kb)
HEAD = head_cycles(DP, 512, 64, False)
TRAFFIC = {k: float(v) for k, v in HEAD.traffic.items()}


def _parts(node=45, **kw):
    return energy.head_energy(TECH, TRAFFIC, DP.rows, DP.cols, 40, DP.div_latency, BUFFERS, node, "hbm2", **kw)


def test_a_lower_clock_lowers_the_logic_energy_per_op_by_v_squared():
    full, slow = _parts(), _parts(clock_hz=5e8)
    # 500 MHz at 45 nm: under what v_min gives (1.543 GHz × speed(0.5)/speed(1.0) = 605 MHz), so 0.5 V: 0.25×
    assert 1e12 / (40 * 0.36 * 45) * _speed(0.5) / _speed(1.0) > 5e8
    for name in ("array", "score", "softmax", "dividers", "clock"):
        assert float(slow[name].low) == pytest.approx(0.25 * float(full[name].low))
    for name in ("buffers", "dram"):  # SRAM and DRAM keep their own figures
        assert float(slow[name].high) == float(full[name].high)
    assert float(slow["total"].high) < float(full["total"].high)


def test_clock_tree_energy_is_the_cited_share_of_the_logic():
    parts = _parts(cycles=HEAD.cycles)
    logic = parts["array"] + parts["score"] + parts["softmax"] + parts["dividers"] + parts["idle"]
    # share s of (logic + clock): clock = logic × s / (1 - s); s from 0.25 (Duarte) to 0.40 (Gowan)
    assert float(parts["clock"].low) == pytest.approx(float(logic.low) * 0.25 / 0.75)
    assert float(parts["clock"].high) == pytest.approx(float(logic.high) * 0.40 / 0.60)


def test_idle_pes_burn_their_fraction_of_a_busy_cells_registers():
    parts = _parts(cycles=HEAD.cycles)
    idle_pe_cycles = HEAD.cycles * 16 * 32 - HEAD.traffic["macs"]
    assert idle_pe_cycles > 0
    per_pe = 0.009 * (40 + 32)  # Aladdin's 0.009 pJ per register bit (the only source) × 72 bits at 45 nm
    assert float(parts["idle"].low) == pytest.approx(idle_pe_cycles * per_pe * 0.1)
    assert float(parts["idle"].high) == pytest.approx(idle_pe_cycles * per_pe * 0.5)
    assert float(_parts()["idle"].high) == 0  # no cycles given: not charged


def test_banks_come_from_the_operand_bandwidth():
    need = operand_bytes_per_cycle(256, 256)
    assert float(need["q"]) == 512 and float(need["k"]) == 512 and float(need["o"]) == 1536  # 2 B, 2 B, 6 B
    banks, bank_kb, ports = LIMITS.banks(64, 64)  # 64 B/cycle of 8-byte ports: 8 banks of 8 KB
    assert (float(banks), float(bank_kb), float(ports)) == (8, 8, 64)
    banks, bank_kb, ports = LIMITS.banks(64, 1024)  # 128 ports wanted, 8 banks at most: 1024-bit ports
    assert (float(banks), float(bank_kb), float(ports)) == (8, 8, 1024)
    banks, bank_kb, ports = LIMITS.banks(32, 4)  # less than one port: one bank of the whole buffer
    assert (float(banks), float(bank_kb), float(ports)) == (1, 32, 64)


def test_a_banked_buffer_costs_between_a_bank_and_the_whole():
    read = energy.banked_read(TECH, 64, 64, 45)  # 8 banks of 8 KB
    assert float(read.low) == pytest.approx(float(TECH.sram_read(8, 45).low))
    assert float(read.high) == pytest.approx(float(TECH.sram_read(64, 45).high))
    area = energy.banked_area(TECH, 64, 64, 45)
    assert float(area.low) <= float(area.high)
    assert float(area.high) == pytest.approx(max(8 * float(TECH.sram_area(8, 45).high),
                                                 float(TECH.sram_area(64, 45).high)))


def test_an_sram_the_clock_outruns_is_flagged_with_its_reason():
    # 32 nm lstp-hp 512 KB: 1.2516 ns, scaled to 45 nm by f_max(32) / f_max(45) = 2000 / 1543.2 MHz: 1.622 ns,
    # under 45 nm's own 1.6776 ns, so the fastest figure; an 8×8 array takes 2 × 8 = 16 B/cycle from Q: two
    # 8-byte ports, so a 1 MB Q buffer is 2 banks of 512 KB
    access = 1.2516 * 2e9 / (1e12 / (40 * 0.36 * 45))
    assert float(TECH.sram_access_ns(512, 45).low) == pytest.approx(access)
    buffers = (1024.0, 8.0, 8.0, 8.0)
    fast = sram_timing_reasons(TECH, buffers, 8, 8, 45, 1.5e9)
    assert str(fast) == f"Q buffer bank of 512 KB takes {access:.3g} ns, over the clock period of 0.667 ns"
    assert str(sram_timing_reasons(TECH, buffers, 8, 8, 45, 5e8)) == ""  # 2 ns: met
    grid = sram_timing_reasons(TECH, BUFFERS, np.array([8, 256]), np.array([8, 256]), 45, 1.5e9)
    assert grid.shape == (2,)
    # 256×256 needs 512 B/cycle from K (64 KB): 8 banks of 8 KB, 0.446 ns at 45 nm (CACTI lstp-hp): met
    assert float(TECH.sram_access_ns(8, 45).low) == pytest.approx(0.4461) and grid[1] == ""


def test_every_new_band_is_ordered():
    for band in (TECH.energy("multiply", 16, 7), TECH.dram("hbm2"), TECH.sram_access_ns(256, 7),
                 _parts(cycles=HEAD.cycles)["idle"], _parts(cycles=HEAD.cycles)["clock"],
                 energy.banked_read(TECH, 128, 512, 7), energy.banked_area(TECH, 128, 512, 7)):
        assert np.all(np.asarray(band.low) <= np.asarray(band.high))


@pytest.mark.parametrize("change,message", [
    (lambda d: d["voltage"].update(v_min=0.2), r"v_th = 0.3, v_min = 0.2; allowed: v_th < v_min"),
    (lambda d: d["voltage"].update(v_nom=[1.0]), r"v_nom = \[1.0\]; allowed: 10 volts, one per node"),
    (lambda d: d["clock_energy"].update(share=[0.5, 0.3]), r"share = \[0.5, 0.3\]; allowed: \[low, high\]"),
    (lambda d: d["clock_energy"].update(low_source="nobody"), "low_source = 'nobody' names no known source"),
    (lambda d: d["idle_pe"].update(register_fraction=[0.1, 2.0]),
     r"register_fraction = \[0.1, 2.0\]; allowed: \[low, high\] with 0 < low <= high <= 1"),
    (lambda d: d["clock_energy"].update(share=[0.25, 1.0]), r"share = \[0.25, 1.0\]; allowed: .* high < 1"),
    (lambda d: d["banking"].update(port_bits=12), "port_bits = 12; allowed: a whole number of bytes"),
    (lambda d: d.pop("voltage"), "missing or malformed voltage/clock/banking entry"),
])
def test_a_broken_limits_table_is_refused_in_one_line(change, message):
    data = tomllib.loads(TABLE.read_text())
    change(data)
    with pytest.raises(SpecError, match=message):
        Technology(data)


def test_the_new_arguments_broadcast_over_points_as_the_explorer_passes_them():
    clocks, nodes = np.array([5e8, 1.5e9, 1e9]), np.array([45, 45, 7])
    traffic = {k: np.full(3, v) for k, v in TRAFFIC.items()}
    cycles = np.full(3, float(HEAD.cycles))
    many = energy.head_energy(TECH, traffic, DP.rows, DP.cols, 40, DP.div_latency, BUFFERS, nodes, "hbm2",
                              clock_hz=clocks, cycles=cycles)
    for i in range(3):
        one = _parts(int(nodes[i]), clock_hz=float(clocks[i]), cycles=HEAD.cycles)
        for name in (*energy.PARTS, "total"):
            assert many[name].low[i] == pytest.approx(float(one[name].low))
            assert many[name].high[i] == pytest.approx(float(one[name].high))
