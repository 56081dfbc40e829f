"""Issue 33's energy headline, before and after the honest energy model (reports/issue-33/energy/README.md).

For seq 1024 and seq 128 (d 64, 16 heads, not causal) over the explorer's default space: the fastest and the
least-energy bit-exact point at 7 nm and at 45 nm, with its energy per inference and per head against the H200's
measured fp16 flash (reports/codesign/explore-gpu: 6.66 mJ at seq 1024, 1.16 mJ at seq 128). 'explorer' is the
energy `codesign explore` reports (head_energy called as the explorer calls it); where the checkout has
codesign/technology_limits.py, 'full' is the whole model evaluated here on its own, point by point: idle PEs (the
point's cycles on every array) and the supply its clock allows, the points whose clock or banked SRAM access time
cannot be met left out. Before the explorer was wired to it (commit bea04c9) the two differ; since, the last line
says how closely they agree.

Run from a checkout's root: python reports/issue-33/energy/headline.py
"""

from __future__ import annotations

import sys
import time

import numpy as np

from codesign import energy, explore
from codesign.technology import Technology
from host.problem import AttentionProblem

H200_MJ = {1024: 6.66, 128: 1.16}  # measured fp16 flash, whole problem (docs/codesign.md "The answer")
HEADS = 16


def full_energy(tech: Technology, cols: dict, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Energy per inference in J (the band's geometric mean, its low and high ends) and '' or why the point cannot
    run at its clock."""
    from codesign.technology_limits import sram_timing_reasons

    buffers = (cols["q_kb"], cols["k_kb"], cols["v_kb"], cols["o_kb"])
    node = cols["node_nm"]
    from codesign.cycles import TRAFFIC_KEYS

    traffic = {k: cols[k].astype(float) for k in TRAFFIC_KEYS}
    latency = np.where(ok, cols["cycles"] / cols["clock_hz"], np.nan)
    arrays = cols.get("arrays", 1)  # every array's PEs idle when not busy; each a whole datapath that leaks
    parts = energy.head_energy(tech, traffic, cols["rows"], cols["cols"], cols["acc_bits"], cols["div_latency"],
                               buffers, node, "hbm2", clock_hz=cols["clock_hz"], cycles=cols["cycles"] * arrays)
    units = energy.area(tech, cols["rows"], cols["cols"], cols["acc_bits"], cols["exp_lanes"], cols["dividers"],
                        buffers, node)
    leak = energy.leakage_w(tech, units, buffers, cols["rows"], cols["cols"], node) * arrays
    total = parts["total"] * 1e-12 + leak * latency
    reasons = np.char.add(tech.limits.clock_reasons(node, cols["clock_hz"]),
                          sram_timing_reasons(tech, buffers, cols["rows"], cols["cols"], node, cols["clock_hz"]))
    return (np.where(ok, total.mid, np.nan), np.where(ok, total.low, np.nan), np.where(ok, total.high, np.nan),
            reasons)


def every_point(problem: AttentionProblem, space: dict) -> dict:
    """The explorer's per-point columns of the cycle table, in its own order (before and after the split of
    codesign/explore.py into explore_cycles.py and explore_points.py)."""
    if hasattr(explore, "_cycle_table"):
        return explore._every_point(explore._cycle_table(problem, space, None), space)
    from codesign.explore_cycles import cycle_table
    from codesign.explore_points import every_point as spread
    table = cycle_table(problem, space, None)
    for count in ("slower_pairs", "array_pairs"):  # the table's two totals, not columns
        table.pop(count)
    return spread(table, space)


def describe(c: dict, i: int) -> str:
    return (f"{c['array'][i]} {c['dataflow'][i]}, {c['exp_lanes'][i]} lanes, {c['dividers'][i]} dividers, "
            f"{c['clock_mhz'][i]:g} MHz, {c['dram_gbps'][i]:g} GB/s, acc {c['acc_bits'][i]}, "
            f"buffers {c['buffers_kb'][i]}")


def main() -> int:
    tech = Technology.load()
    has_limits = hasattr(tech, "limits")
    space = explore.check_space(dict(explore.DEFAULT_SPACE), tech)
    print("| seq | node | pick | datapath | latency µs | energy model | mJ per inference (band) | µJ per head | "
          "H200 ÷ ASIC (band) |")
    print("|---|---|---|---|---:|---|---:|---:|---:|")
    notes = []
    for seq in (1024, 128):
        start = time.perf_counter()
        problem = AttentionProblem(heads=HEADS, seq=seq, dim=64, causal=False, dtype="q15")
        result = explore.explore(problem, space, tech)
        c = result.columns
        models = {"explorer": (c["energy_j"], c["energy_j_low"], c["energy_j_high"], np.full(len(result), ""))}
        if has_limits:
            cols = every_point(problem, space)
            ok = cols["skipped"] == ""
            ran = np.isfinite(c["latency_s"])  # the wired explorer also skips the points 'full' refuses
            assert np.allclose(cols["cycles"][ran] / cols["clock_hz"][ran], c["latency_s"][ran])  # the same points
            models["full"] = full_energy(tech, cols, ok)
            both = ran & (models["full"][3] == "")
            gap = float(np.max(np.abs(c["energy_j"][both] / models["full"][0][both] - 1)))
            notes.append(f"seq {seq}: the explorer's energy against 'full' on the {int(both.sum()):,} points both "
                         f"run: largest relative difference {gap:.2g}; points 'full' refuses that the explorer "
                         f"runs: {int((ran & (models['full'][3] != '')).sum()):,}")
        for node in (7, 45):
            for name, (joules, low, high, reasons) in models.items():
                allowed = (c["bit_exact"] == "all inputs") & (c["node_nm"] == node) & np.isfinite(joules) \
                          & (reasons == "")
                idx = np.flatnonzero(allowed)
                fastest = idx[np.lexsort((joules[idx], c["latency_s"][idx]))[0]]
                least = idx[np.argmin(joules[idx])]
                for pick, i in (("fastest", fastest), ("least energy", least)):
                    mj, lo, hi = joules[i] * 1e3, low[i] * 1e3, high[i] * 1e3
                    ratio = H200_MJ[seq]
                    print(f"| {seq} | {node} nm | {pick} | {describe(c, i)} | {c['latency_s'][i] * 1e6:.1f} | "
                          f"{name} | {mj:.3g} ({lo:.3g}–{hi:.3g}) | {mj / HEADS * 1e3:.3g} | "
                          f"{ratio / mj:.1f}× ({ratio / hi:.1f}–{ratio / lo:.1f}) |")
                if name == "full":
                    flagged = (c["node_nm"] == node) & (c["bit_exact"] == "all inputs") & (reasons != "")
                    total = int(((c["node_nm"] == node) & (c["bit_exact"] == "all inputs")).sum())
                    notes.append(f"seq {seq}, {node} nm: {int(flagged.sum())} of {total} bit-exact points flagged "
                                 "by the clock or SRAM timing check")
        print(f"seq {seq}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    print()
    for note in notes:
        print(f"- {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
