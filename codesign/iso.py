"""The explorer's answer at equal cost (issue 33): the modelled ASIC points against a measured target at the same
area (iso-area), the same power (iso-power) and at least its accuracy.

A measured point (codesign/measured.py) brings its latency and energy per inference; its power is their quotient
(the H200's is NVML's board power over the timed calls) and its area the die's where one is published (the H200:
814 mm²; the STM32F407's is not, so it takes no iso-area comparison). At a budget, an ASIC point is copied n =
⌊budget / its own area (or power)⌋ times, each copy a whole datapath taking an equal share of the problem's B·H
independent heads: n copies run ⌈BH / n⌉ heads each, so the latency is the point's times ⌈BH / n⌉ / BH (no gain
past one copy a head: min(n, BH) copies are used), and the energy per inference is unchanged (the same work; each
copy leaks over a proportionally shorter time). That latency is a bound from below: the point's own latency has its
BH heads pipelined one into the next (their prologues and tails overlapped), which a copy holding fewer heads
overlaps less. A point that does not fit the budget once (n = 0) is out. "At equal accuracy" keeps
the points whose rel-L2 against the float64 golden is at most fp16 attention's on the same probe head (the
explorer's bit probe: min(seq, 256) keys, its last q_len rows; host/fp16_reference.py), so the ASIC is never
credited with a lower-precision answer than the GPU row it beats.
"""

from __future__ import annotations

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
    fit: int  # copies within the budget, ⌊budget / the point's⌋
    copies: int  # of them used: min(fit, B·H)
    latency_s: float  # of the copies together
    energy_j: float
    reference_latency_s: float
    reference_energy_j: float

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


def copied_latency(latency_s: np.ndarray, n: np.ndarray, heads: int) -> np.ndarray:
    """The latency of n copies sharing `heads` independent heads: latency · ⌈heads / min(n, heads)⌉ / heads."""
    share = np.ceil(heads / np.maximum(np.minimum(n, heads), 1))
    return np.where(n > 0, latency_s * share / heads, np.inf)


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
    accurate as `accuracy_bound` (rel-L2), copied to the budget (index −1 where none fits it once); none for a budget
    the point has no figure for (the board's area)."""
    if not (math.isfinite(accuracy_bound) and accuracy_bound > 0):
        raise SpecError(f"accuracy_bound={accuracy_bound} is out of range; allowed: a positive rel-L2")
    heads = problem.batch * problem.heads
    ok = within(columns) if allowed is None else allowed
    ok = ok & np.isfinite(columns["rel_l2"]) & (columns["rel_l2"] <= accuracy_bound)
    power = columns["energy_j"] / columns["latency_s"]
    rows = []
    for point in measured:
        budgets = {"iso-area": (point.area_mm2, columns["area_mm2"]),
                   "iso-power": (point.energy_j / point.latency_s, power)}
        for budget in BUDGETS:
            value, each = budgets[budget]
            if value is None or not value > 0:
                continue
            n = np.where(ok, copies(value, each), 0)
            latency = copied_latency(columns["latency_s"], n, heads)
            if not np.isfinite(latency).any():  # said in the table: none of the points fits this budget once
                rows.append(IsoRow(point.label, budget, float(value), -1, 0, 0, math.inf, math.nan, point.latency_s,
                                   point.energy_j))
                continue
            best = int(np.argmin(latency))
            rows.append(IsoRow(point.label, budget, float(value), best, int(n[best]), int(min(n[best], heads)),
                               float(latency[best]),
                               float(columns["energy_j"][best]), point.latency_s, point.energy_j))
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
        if i < 0:
            lines.append(f"| {row.reference} | {row.budget} {row.budget_value:.3g} {unit[row.budget]} | none of the "
                         "allowed, accurate points fits once | | | | | | |")
            continue
        point = (f"{columns['array'][i]} {columns['dataflow'][i]}, {columns['clock_mhz'][i]:.0f} MHz, "
                 f"{columns['node_nm'][i]:.0f} nm")
        lines.append(f"| {row.reference} | {row.budget} {row.budget_value:.3g} {unit[row.budget]} | {point} | "
                     f"{row.copies} ({row.fit}) | {row.latency_s * 1e6:.3g} µs | {row.speedup:.3g} | "
                     f"{row.energy_j * 1e6:.3g} µJ | {row.energy_gain:.3g} | {columns['rel_l2'][i]:.2e} |")
    if not rows:
        lines.append("| (no measured point with an area or a power, or no ASIC point fits) | | | | | | | | |")
    return "\n".join(lines) + "\n"
