"""The explorer's energy as issue 33 made it honest (codesign/explore.py `_energy`, `_refused`): the logic at the
supply its clock allows (DVFS), every idle PE-cycle of every array charged, the clock tree on top, and the points
whose clock the node cannot reach or whose banked buffer cannot be read within a clock period skipped with the
reason. Expected values are derived by hand from codesign/technology.toml's figures, each step in a comment."""

from __future__ import annotations

import numpy as np
import pytest

from codesign import energy
from codesign.datapath import Datapath
from codesign.explore import check_space, explore
from codesign.groups import problem_cycles
from codesign.technology import Technology
from host.problem import AttentionProblem

TECH = Technology.load()
#: One datapath: 8×8 os, 16 lanes, 8 dividers, the default buffers, 256 GB/s, 40-bit accumulators, HBM.
ONE = {"array": ["8x8"], "dataflow": ["os"], "exp_lanes": [16], "dividers": [8], "div_latency": [18],
       "buffers_kb": [[32, 64, 64, 128]], "dram_gbps": [256], "acc_bits": [40], "overflow": ["wrap"],
       "dram": ["hbm2"]}
#: Two heads of 64 keys, d 16, not causal: one key block of the contract's Bc 64 per head.
PROBLEM_SHAPE = {"seq": 64, "dim": 16, "causal": False}


def _problem():
    return AttentionProblem(batch=1, heads=2, dtype="q15", **PROBLEM_SHAPE)


def test_two_arrays_at_250_mhz_pay_the_lower_supply_idle_pes_and_the_clock_tree():
    """At 45 nm: f_max = 1e12 / (40 FO4 × 0.36 ps/nm × 45 nm) = 1,543 MHz ([voltage]). 250 MHz needs the alpha-power
    speed (V − 0.3)^1.3 / V to be 250 / 1543 = 0.162 of the nominal 1.0 V's 0.7^1.3 / 1 = 0.629, i.e. 0.102; the
    floor v_min = 0.5 V already gives 0.2^1.3 / 0.5 = 0.247, so the logic runs at 0.5 V: its energy × (0.5/1.0)² =
    0.25. Idle PE-cycles: both arrays' 8 × 8 PEs over the busiest array's cycles, less the MACs done, 2 heads × 2
    GEMMs × 64 × 64 × 16 = 262,144. An idle PE burns 0.1..0.5 ([idle_pe]) of a busy cell's registers, 40 + 32 bits
    at Aladdin's 0.009 pJ a bit. The clock tree adds s / (1 − s) of the logic, s = 0.25..0.40 ([clock_energy]): 1/3
    at the low end, 2/3 at the high."""
    space = check_space({**ONE, "clock_mhz": [250], "node_nm": [45], "arrays": [2]}, TECH)
    problem = _problem()
    result = explore(problem, space, TECH)
    c = result.columns
    assert len(result) == 1 and c["skipped"][0] == ""
    dp = Datapath(rows=8, cols=8, exp_lanes=16, dividers=8, dram_bytes_per_cycle=256e9 / 250e6, clock_hz=250_000_000,
                  arrays=2)
    model = problem_cycles(dp, 64, 16, False, heads=2)
    assert c["latency_s"][0] == pytest.approx(model.cycles / 250e6)
    macs = 2 * 2 * 64 * 64 * 16
    assert model.traffic["macs"] == macs
    idle_pe_cycles = model.cycles * 2 * 8 * 8 - macs
    assert idle_pe_cycles > 0
    traffic = {k: float(v) for k, v in model.traffic.items()}
    buffers = (32.0, 64.0, 64.0, 128.0)
    # the cycle-free parts at the nominal supply, without idle PEs: the table's figures times the traffic
    plain = energy.head_energy(TECH, traffic, 8, 8, 40, 18, buffers, 45, "hbm2")
    units = energy.area(TECH, 8, 8, 40, 16, 8, buffers, 45)
    leak = energy.leakage_w(TECH, units, buffers, 8, 8, 45) * 2  # two copies of the datapath
    latency = model.cycles / 250e6
    for end, fraction, share in (("low", 0.1, 0.25), ("high", 0.5, 0.40)):
        def at(part, end=end):
            return float(getattr(plain[part], end))
        idle = 0.009 * (40 + 32) * fraction * idle_pe_cycles
        logic = at("array") + at("score") + at("softmax") + at("dividers") + idle
        pj = 0.25 * logic * (1 + share / (1 - share)) + at("buffers") + at("dram")
        assert c[f"energy_j_{end}"][0] == pytest.approx(pj * 1e-12 + float(getattr(leak, end)) * latency, rel=1e-9)
    shares = {part: c[f"share_{part}"][0] for part in (*energy.PARTS, "leakage")}
    assert sum(shares.values()) == pytest.approx(1.0)
    # idle over array (geometric means): 72 bits × 0.009 × sqrt(0.1 × 0.5) per idle PE-cycle against a MAC's mid
    mac_mid = float(energy.mac_cell(TECH, 40, 45, "energy").mid)
    assert shares["idle"] / shares["array"] == pytest.approx(
        72 * 0.009 * np.sqrt(0.05) * idle_pe_cycles / (mac_mid * macs), rel=1e-9)


def test_a_clock_above_the_nodes_f_max_is_skipped_with_the_reason():
    """1,600 MHz is above 45 nm's 1,543 MHz (see above) but below 7 nm's, where 1e12 / (40 × 0.36 × 7) = 9.9 GHz is
    capped at 2 GHz (f_cap_ghz). At 7 nm its buffers keep up: at 1.6 GHz (0.625 ns) Q's 16 B a cycle come from 2 banks
    of 16 KB, K's and V's from 2 of 32 KB, O's 48 B from 6 of 21.3 KB; CACTI's fastest 32 nm cells (technology.toml,
    scaled by the ratio of f_max, 2 GHz at both nodes) take 0.387 and 0.518 ns at 16 and 32 KB."""
    space = check_space({**ONE, "clock_mhz": [1600], "node_nm": [45, 7]}, TECH)
    result = explore(_problem(), space, TECH)
    c = result.columns
    assert result.refused == {"clock": 1, "sram_timing": 0}
    at45, at7 = np.flatnonzero(c["node_nm"] == 45), np.flatnonzero(c["node_nm"] == 7)
    assert c["skipped"][at45].tolist() == ["clock 1600 MHz is above 45 nm's f_max 1543 MHz"]
    assert c["skipped"][at7].tolist() == [""]
    assert np.isnan(c["energy_j"][at45]).all() and np.isnan(c["latency_s"][at45]).all()
    assert np.isfinite(c["energy_j"][at7]).all()


def test_a_buffer_bank_slower_than_the_clock_period_is_skipped_with_the_reason():
    """A 1 MB Q buffer on an 8×8 array: 8 rows × 2 B = 16 B a cycle over 8-byte ports, 2 banks of 512 KB. CACTI's
    512 KB access time at 45 nm is 1.68 ns (lstp-hp, technology.toml); the band's fastest is 32 nm's 1.25 ns scaled
    by the ratio of the nodes' f_max, 2000 / 1543 MHz (32 nm's capped at 2 GHz): 1.62 ns, over 1 GHz's 1 ns, under
    500 MHz's 2 ns. Only the clock changes between the two points."""
    space = check_space({**ONE, "buffers_kb": [[1024, 64, 64, 128]], "clock_mhz": [500, 1000], "node_nm": [45]},
                        TECH)
    result = explore(_problem(), space, TECH)
    c = result.columns
    assert result.refused == {"clock": 0, "sram_timing": 1}
    fast, slow = np.flatnonzero(c["clock_mhz"] == 1000), np.flatnonzero(c["clock_mhz"] == 500)
    reason = str(c["skipped"][fast[0]])
    assert reason == "Q buffer bank of 512 KB takes 1.62 ns, over the clock period of 1 ns"
    assert c["skipped"][slow].tolist() == [""] and np.isfinite(c["energy_j"][slow]).all()


def test_a_buffer_too_small_for_a_tile_keeps_its_own_reason_when_the_clock_is_refused_too():
    """1 KB buffers hold less than a tile at d 256; at 45 nm and 1,600 MHz the clock is refused as well: the tile's
    reason (the cycle model's) comes first."""
    space = check_space({**ONE, "buffers_kb": [[1, 1, 1, 1]], "clock_mhz": [1600], "node_nm": [45]}, TECH)
    result = explore(AttentionProblem(batch=1, heads=1, seq=64, dim=256, causal=False, dtype="q15"), space, TECH)
    assert "holds less than one query tile" in str(result.columns["skipped"][0])
    assert result.refused == {"clock": 0, "sram_timing": 0}  # counted once, as the tile's
