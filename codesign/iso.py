"""The explorer's answer at equal cost (issue 33): the modelled ASIC points against a measured target at the same
area (iso-area), the same power (iso-power) and at least its accuracy.

A measured point (codesign/measured.py) brings its latency and energy per inference; its power is their quotient
(the H200's is NVML's board power over the timed calls) and its area the die's where one is published (the H200:
814 mm²; the STM32F407's is not, so it takes no iso-area comparison). At a budget, an ASIC point is copied n =
⌊budget / its own area (or power)⌋ times, each copy a whole datapath taking an equal share of the problem's U =
B·kv_heads independent units, a K/V head with its query heads (B·H heads when each has its own K/V head): a group
stays on one copy, so its K and V are read as the point's own mapping reads them. n copies run ⌈U / n⌉ units
each, so the latency is the point's times ⌈U / n⌉ / U (no gain past one copy a unit: min(n, U) copies are used),
and the energy per inference is unchanged (the same work; each copy leaks over a proportionally shorter time).
That latency is a bound from below: the point's own latency has its heads pipelined one into the next (their
prologues and tails overlapped), which a copy holding fewer heads overlaps less. A point that does not fit the
budget once (n = 0) is out.

Each copy has its own DRAM interface at the point's rate, so n copies draw n times it: where the measured device's
peak DRAM bandwidth is known (the H200's HBM3e, 4.8 TB/s), each budget is given a second time with the copies also
held to it (n ≤ ⌊that / the point's GB/s⌋): at equal area or power and equal memory bandwidth, the comparison a
memory-bound decode step needs. "At equal accuracy" keeps
the points whose rel-L2 against the float64 golden is at most fp16 attention's on the same probe head (the
explorer's bit probe: min(seq, 256) keys, its last q_len rows; host/fp16_reference.py), so the ASIC is never
credited with a lower-precision answer than the GPU row it beats.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from host.errors import SpecError
from host.problem import AttentionProblem

#: Budgets an ASIC point is compared at.
BUDGETS = ("iso-area", "iso-power")


@dataclass(frozen=True)
class IsoRow:
    """The fastest ASIC point within one budget of one measured point, and how it compares."""

    reference: str  # the measured point's label
    budget: str  # "iso-area" or "iso-power"
    budget_value: float  # mm² or W
    index: int  # the point's row in the explorer's columns
    fit: int  # copies within the budget (and the DRAM cap), ⌊budget / the point's⌋
    copies: int  # of them used: min(fit, units)
    latency_s: float  # of the copies together
    energy_j: float
    reference_latency_s: float
    reference_energy_j: float
    dram_cap_gbps: float | None = None  # the copies' DRAM bandwidth held to the reference's, or None

    @property
    def speedup(self) -> float:
        """The reference's latency over the copies'."""
        return self.reference_latency_s / self.latency_s

    @property
    def energy_gain(self) -> float:
        """The reference's energy per inference over the point's."""
        return self.reference_energy_j / self.energy_j


def fp16_rel_l2(problem: AttentionProblem, seed: int = 0) -> float:
    """rel-L2 of fp16 attention (host/fp16_reference.py) against the float64 golden on the explorer's probe head:
    the same N(0,1) inputs and rows codesign.explore.bit_labels measures the contract on."""
    from codesign.explore import PROBE_SEQ_MAX
    from codesign.widths import inputs
    from host.fp16_reference import attention_fp16
    from host.reference import attention

    seq = min(problem.seq, PROBE_SEQ_MAX)
    q, k, v = inputs("normal", seq, problem.dim, seed)
    rows = min(problem.queries, seq)
    q = q[seq - rows:]
    gold = attention(q[None, None], k[None, None], v[None, None], problem.causal, np.float64)[0, 0]
    # the probe's rows are the head's last: query i sits at key position seq − rows + i (bottom-right mask)
    half = attention_fp16(q, k, v, problem.causal, row0=seq - rows)
    return float(np.linalg.norm(half - gold) / np.linalg.norm(gold))


def copies(budget: float, each: np.ndarray) -> np.ndarray:
    """⌊budget / each⌋ per point (0 where a point does not fit once, or its figure is missing)."""
    each = np.asarray(each, dtype=np.float64)
    fits = np.isfinite(each) & (each > 0) & (each <= budget)
    return np.where(fits, np.floor(budget / np.where(fits, each, 1.0)), 0).astype(np.int64)


def copied_latency(latency_s: np.ndarray, n: np.ndarray, units: int) -> np.ndarray:
    """The latency of n copies sharing `units` independent units (K/V groups, or heads): latency · ⌈units /
    min(n, units)⌉ / units."""
    share = np.ceil(units / np.maximum(np.minimum(n, units), 1))
    return np.where(n > 0, latency_s * share / units, np.inf)


def units(problem: AttentionProblem) -> int:
    """The problem's independent units copies share: B · kv_heads (a K/V head with its query heads stays on one
    copy), B · H when every head has its own K/V head."""
    return problem.batch * (problem.heads if problem.kv_heads is None else problem.kv_heads)


def within(columns: dict[str, np.ndarray], max_area_mm2: float | None = None,
           max_power_w: float | None = None) -> np.ndarray:
    """The points the explorer may answer with under `--max-area` and `--max-power` (one copy: its area in mm² and
    its average power, energy per inference over latency), never a skipped one."""
    for name, value in (("max_area_mm2", max_area_mm2), ("max_power_w", max_power_w)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise SpecError(f"{name}={value} is out of range; allowed: a positive number")
    ok = (columns["skipped"] == "") & np.isfinite(columns["latency_s"])
    if max_area_mm2 is not None:
        ok &= columns["area_mm2"] <= max_area_mm2
    if max_power_w is not None:
        ok &= columns["energy_j"] / columns["latency_s"] <= max_power_w
    return ok


def compare(columns: dict[str, np.ndarray], measured, problem: AttentionProblem, accuracy_bound: float,
            allowed: np.ndarray | None = None) -> list[IsoRow]:
    """For each measured point and budget (its die area, its power), the fastest allowed ASIC point at least as
    accurate as `accuracy_bound` (rel-L2), of equally fast ones the least energy, copied to the budget (index −1 where
    none fits it once); each budget again with the copies' DRAM interfaces held to the point's bandwidth where it has
    one (`dram_cap_gbps`); none for a budget the point has no figure for (the board's area)."""
    if not (math.isfinite(accuracy_bound) and accuracy_bound > 0):
        raise SpecError(f"accuracy_bound={accuracy_bound} is out of range; allowed: a positive rel-L2")
    shared = units(problem)
    ok = within(columns) if allowed is None else allowed
    ok = ok & np.isfinite(columns["rel_l2"]) & (columns["rel_l2"] <= accuracy_bound)
    power = columns["energy_j"] / columns["latency_s"]
    rows = []
    for point in measured:
        budgets = {"iso-area": (point.area_mm2, columns["area_mm2"]),
                   "iso-power": (point.energy_j / point.latency_s, power)}
        caps = [None] + ([point.dram_gbps] if point.dram_gbps else [])
        for budget, cap in itertools.product(BUDGETS, caps):
            value, each = budgets[budget]
            if value is None or not value > 0:
                continue
            n = np.where(ok, copies(value, each), 0)
            if cap is not None:  # the copies' DRAM interfaces together within the reference's bandwidth
                n = np.minimum(n, copies(cap, columns["dram_gbps"]))
            latency = copied_latency(columns["latency_s"], n, shared)
            if not np.isfinite(latency).any():  # said in the table: none of the points fits this budget once
                rows.append(IsoRow(point.label, budget, float(value), -1, 0, 0, math.inf, math.nan, point.latency_s,
                                   point.energy_j, cap))
                continue
            best = int(np.lexsort((columns["energy_j"], latency))[0])  # the fastest; of equally fast, least energy
            rows.append(IsoRow(point.label, budget, float(value), best, int(n[best]), int(min(n[best], shared)),
                               float(latency[best]),
                               float(columns["energy_j"][best]), point.latency_s, point.energy_j, cap))
    return rows


def table(rows: list[IsoRow], columns: dict[str, np.ndarray], accuracy_bound: float) -> str:
    """A Markdown table of `compare`'s rows: the budget, the point (array, clock, node, mapping), its copies, and
    the ratios against the reference."""
    lines = [f"At equal cost and at least fp16's accuracy (rel-L2 ≤ {accuracy_bound:.2e} on the probe head):", "",
             "| reference | budget | ASIC point | copies used (fit) | latency (bound) | × faster | energy | "
             "× less energy | rel-L2 |",
             "|---|---|---|---|---|---|---|---|---|"]
    unit = {"iso-area": "mm²", "iso-power": "W"}
    for row in rows:
        i = row.index
        budget = f"{row.budget} {row.budget_value:.3g} {unit[row.budget]}" + (
            f", DRAM ≤ {row.dram_cap_gbps:,.0f} GB/s" if row.dram_cap_gbps else "")
        if i < 0:
            lines.append(f"| {row.reference} | {budget} | none of the allowed, accurate points fits once | | | | | "
                         "| |")
            continue
        arrays = f"{columns['arrays'][i]} × " if "arrays" in columns and columns["arrays"][i] > 1 else ""
        dram = f", {columns['dram_gbps'][i]:g} GB/s" if "dram_gbps" in columns else ""
        point = (f"{arrays}{columns['array'][i]} {columns['dataflow'][i]}, {columns['clock_mhz'][i]:.0f} MHz, "
                 f"{columns['node_nm'][i]:.0f} nm{dram}")
        lines.append(f"| {row.reference} | {budget} | {point} | "
                     f"{row.copies} ({row.fit}) | {row.latency_s * 1e6:.3g} µs | {row.speedup:.3g} | "
                     f"{row.energy_j * 1e6:.3g} µJ | {row.energy_gain:.3g} | {columns['rel_l2'][i]:.2e} |")
    if not rows:
        lines.append("| (no measured point with an area or a power, or no ASIC point fits) | | | | | | | | |")
    return "\n".join(lines) + "\n"
