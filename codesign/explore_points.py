"""The explorer's operating points (codesign/explore.py) as a grid, and what each costs besides cycles: the cycle
table's configurations along one axis and each broadcast key (node, accumulator width, overflow rule, DRAM kind) along
its own, so that a figure is evaluated over only the axes it depends on and then spread over every point; the points
the node's clock or the banked buffers' access times refuse; and the energy per inference with its parts (DVFS, idle
PEs, the clock tree: codesign/energy.py, codesign/technology_limits.py)."""

from __future__ import annotations

import numpy as np

from codesign.cycles import TRAFFIC_KEYS
from codesign.energy import PARTS, head_energy, leakage_w
from codesign.technology import Band, Technology
from codesign.technology_limits import sram_timing_reasons

#: The keys `every_point` repeats every cycle configuration over, in the order of the point grid's axes after it.
BROADCAST = ("node_nm", "acc_bits", "overflow", "dram")


def every_point(table: dict[str, np.ndarray], space: dict) -> dict[str, np.ndarray]:
    """The cycle table's rows repeated for every node, accumulator width, overflow rule and DRAM kind: one column
    per parameter, one entry per operating point."""
    grids = np.meshgrid(np.arange(len(table["cycles"])), *(np.arange(len(space[k])) for k in BROADCAST),
                        indexing="ij")
    config = grids[0].ravel()
    cols = {name: values[config] for name, values in table.items()}
    for key, index in zip(BROADCAST, grids[1:]):
        cols[key] = np.array(space[key])[index.ravel()]
    return cols


def grid_of(table: dict[str, np.ndarray], space: dict) -> tuple[dict[str, np.ndarray], tuple[int, ...]]:
    """The points as a grid: the cycle table's columns along axis 0, each of BROADCAST's keys along its own axis
    (size 1 on every other), and the grid's shape; `flat` of a figure computed on it is that figure for the points
    in `every_point`'s order."""
    shape = (len(table["cycles"]), *(len(space[k]) for k in BROADCAST))
    ones = (1,) * len(BROADCAST)
    grid = {name: values.reshape(-1, *ones) for name, values in table.items()}
    for axis, key in enumerate(BROADCAST, start=1):
        grid[key] = np.array(space[key]).reshape([-1 if a == axis else 1 for a in range(len(shape))])
    return grid, shape


def flat(values, shape: tuple[int, ...]) -> np.ndarray:
    """A figure over the grid's axes, one entry per point (`every_point`'s order)."""
    return np.broadcast_to(values, shape).ravel()


def flat_band(band: Band, shape: tuple[int, ...]) -> Band:
    return Band(flat(band.low, shape), flat(band.high, shape))


def refusals(tech: Technology, grid: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per (cycle configuration, node) '' or why the point cannot run at its clock: above the node's f_max
    (technology_limits `clock_reasons`); a banked Q, K, V or O buffer whose fastest access time is over the clock
    period (`sram_timing_reasons`). As objects: each point then holds a reference, not a fixed-width copy."""
    clock = tech.limits.clock_reasons(grid["node_nm"], grid["clock_hz"])
    buffers = (grid["q_kb"], grid["k_kb"], grid["v_kb"], grid["o_kb"])
    timing = sram_timing_reasons(tech, buffers, grid["rows"], grid["cols"], grid["node_nm"], grid["clock_hz"])
    return clock.astype(object), timing.astype(object)


def point_energy(tech: Technology, grid: dict, shape: tuple[int, ...], units: dict, latency: np.ndarray,
                 ok: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(low, high) energy per inference in J per point (NaN where the point cannot run), and each part's energy
    (energy.PARTS and 'leakage') from the geometric means of the bands, for its share. The logic's energy is taken
    at the supply the point's clock allows (DVFS), and every PE-cycle of the P arrays without a MAC is charged as an
    idle PE (the busiest array's cycles × P × R × C − the MACs done: an array the mapping leaves unused idles too).
    `units` is codesign/energy.py `area` on the grid; `latency` and `ok` are per point."""
    buffers = (grid["q_kb"], grid["k_kb"], grid["v_kb"], grid["o_kb"])
    node, acc = grid["node_nm"], grid["acc_bits"]
    traffic = {k: grid[k].astype(float) for k in TRAFFIC_KEYS}
    pe_cycles = grid["cycles"].astype(float) * grid["arrays"]  # head_energy multiplies by R × C
    low, high = np.zeros(shape), np.zeros(shape)
    shares = {part: np.zeros(shape) for part in PARTS}
    dram_axis = 1 + BROADCAST.index("dram")
    for index, kind in enumerate(grid["dram"].ravel().tolist()):
        parts = head_energy(tech, traffic, grid["rows"], grid["cols"], acc, grid["div_latency"], buffers, node,
                            kind, clock_hz=grid["clock_hz"], cycles=pe_cycles, divider=grid["divider"])
        here = (slice(None),) * dram_axis + (slice(index, index + 1),)
        sub = shape[:dram_axis] + (1,) + shape[dram_axis + 1:]
        low[here] = np.broadcast_to(parts["total"].low, sub)  # the traffic is the whole problem's
        high[here] = np.broadcast_to(parts["total"].high, sub)
        for part, share in shares.items():
            share[here] = np.broadcast_to(parts[part].mid, sub)
    leak = flat_band(leakage_w(tech, units, buffers, grid["rows"], grid["cols"], node) * grid["arrays"], shape)
    shares = {part: share.ravel() * 1e-12 for part, share in shares.items()}
    shares["leakage"] = leak.mid * latency
    energy_low = np.where(ok, low.ravel() * 1e-12 + leak.low * latency, np.nan)  # a refused clock's supply is NaN
    energy_high = np.where(ok, high.ravel() * 1e-12 + leak.high * latency, np.nan)
    return energy_low, energy_high, shares
