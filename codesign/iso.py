"""The explorer's answer at equal cost (issue 33): the modelled ASIC points against a measured target at the same
area (iso-area), the same power (iso-power) and at least its accuracy.

A measured point (codesign/measured.py) brings its latency and energy per inference; its power is their quotient
(the H200's is NVML's board power over the timed calls) and its area the die's where one is published (the H200:
814 mm²; the STM32F407's is not, so it takes no iso-area comparison). At a budget, an ASIC point is copied n =
⌊budget / its own area (or power)⌋ times, each copy a whole datapath taking an equal share of the problem's U =
B·kv_heads independent units, a K/V head with its query heads (B·H heads when each has its own K/V head): a group
stays on one copy, so its K and V are read as the point's own mapping reads them. min(n, U) copies are used, the
busiest running u = ⌈U / n⌉ units, and the latency is that copy's: the cycle model under the datapath's best
mapping (codesign/groups.py `problem_cycles`, the mapper's search on arrays or the overlap schedule) of u units at
the point's clock, DRAM stalls included (`MappedShare`). A copy holding fewer units overlaps fewer heads' prologues
and may leave some of its arrays idle (one head on a four-array point runs on one array when the mapper spreads heads
over arrays), so its latency is at least the point's own times u / U (`copied_latency`, the proportional share):
`compare` ranks points by that lower bound and runs the cycle model only until no unevaluated point's bound can beat
the best evaluated latency, so the answer is the exact fastest at the price of a few mapper searches. The energy per
inference is the point's own (the same work; each copy leaks over its own time, stated as an approximation). A
point that does not fit the budget once (n = 0) is out.

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
import time
from dataclasses import dataclass, field

import numpy as np

from codesign.datapath import Datapath
from codesign.groups import problem_cycles
from host.errors import SpecError
from host.problem import AttentionProblem
from host.q15 import BC

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
    latency_s: float  # of the copies together: the busiest copy's, by `share`
    energy_j: float
    reference_latency_s: float
    reference_energy_j: float
    dram_cap_gbps: float | None = None  # the copies' DRAM bandwidth held to the reference's, or None
    exact: bool = True  # latency_s from the cycle model (MappedShare); False: the proportional lower bound

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


#: The most copies counted (2⁵³, float64's last exact integer): a budget beyond it (an absurd measured figure) is
#: as good as unlimited, and ⌊budget / each⌋ must not wrap round int64 to a negative count.
COPIES_MAX = float(2**53)


def copies(budget: float, each: np.ndarray) -> np.ndarray:
    """⌊budget / each⌋ per point, at most COPIES_MAX (0 where a point does not fit once, or its figure is
    missing)."""
    each = np.asarray(each, dtype=np.float64)
    fits = np.isfinite(each) & (each > 0) & (each <= budget)
    with np.errstate(over="ignore"):  # an overflow to inf is clipped below
        quotient = np.minimum(np.floor(budget / np.where(fits, each, 1.0)), COPIES_MAX)
    return np.where(fits, quotient, 0).astype(np.int64)


def copied_latency(latency_s: np.ndarray, n: np.ndarray, units: int) -> np.ndarray:
    """The proportional share, a lower bound on the latency of n copies sharing `units` independent units (K/V
    groups, or heads): latency · ⌈units / min(n, units)⌉ / units (inf where n is 0)."""
    return np.where(n > 0, latency_s * units_per_copy(n, units) / units, np.inf)


def units_per_copy(n: np.ndarray, units: int) -> np.ndarray:
    """⌈units / min(n, units)⌉: the units the busiest of n copies runs (n ≥ 1)."""
    return np.ceil(units / np.maximum(np.minimum(n, units), 1)).astype(np.int64)


#: How far under its proportional bound a copy's latency may come: the rounding of a latency read back from points.csv
#: (six significant figures, up to 5·10⁻⁶ off); issue-33 spaces: ratios ≥ 1 − 4.5·10⁻⁶ from the CSVs.
BOUND_SLACK = 1e-5
#: The explorer's columns a point's datapath is rebuilt from (codesign/explore.py `explore`; points.csv alike).
DATAPATH_COLUMNS = ("array", "dataflow", "exp_lanes", "dividers", "div_latency", "divider", "buffers_kb",
                    "clock_mhz", "dram_gbps", "arrays", "schedule")


class ProportionalShare:
    """A copy's latency as the point's own times u / U: the lower bound, for columns that carry no datapath (the
    tests' synthetic points)."""

    evaluations = 0
    seconds = 0.0
    exact = False

    def __init__(self, columns: dict[str, np.ndarray], problem: AttentionProblem):
        self.latency = columns["latency_s"]
        self.total = units(problem)

    def __call__(self, index: int, per_copy: int) -> float:
        return float(self.latency[index] * per_copy / self.total)


@dataclass
class MappedShare:
    """A copy's latency from the cycle model: u of the problem's units (u K/V groups with their query heads, one
    batch) under the point's datapath and its best mapping, at its clock. Memoised by datapath and u; counts its
    cycle-model calls and their time, which the iso table states."""

    columns: dict[str, np.ndarray]
    problem: AttentionProblem
    evaluations: int = 0
    seconds: float = 0.0
    exact: bool = True
    _memo: dict = field(default_factory=dict, repr=False)

    def datapath(self, index: int) -> Datapath:
        """The point's datapath (the accumulator, which changes no cycle, at its default)."""
        c, i = self.columns, index
        rows, cols = (int(x) for x in str(c["array"][i]).split("x"))
        q, k, v, o = (float(x) for x in str(c["buffers_kb"][i]).split("/"))
        clock = int(round(float(c["clock_mhz"][i]) * 1e6))
        latency = c["div_latency"][i]  # empty (nan once read) where it does not apply: a reciprocal divider's
        latency = int(latency) if str(latency) not in ("", "nan") else Datapath.div_latency
        return Datapath(rows=rows, cols=cols, dataflow=str(c["dataflow"][i]), exp_lanes=int(c["exp_lanes"][i]),
                        dividers=int(c["dividers"][i]), div_latency=latency,
                        divider=str(c["divider"][i]), q_buffer_kb=q, k_buffer_kb=k, v_buffer_kb=v, o_buffer_kb=o,
                        dram_bytes_per_cycle=max(float(c["dram_gbps"][i]) * 1e9 / clock, 0.001), clock_hz=clock,
                        arrays=int(c["arrays"][i]), schedule=str(c["schedule"][i]))

    def __call__(self, index: int, per_copy: int) -> float:
        p, total = self.problem, units(self.problem)
        if per_copy >= total:  # one copy runs the whole problem: the point's own latency
            return float(self.columns["latency_s"][index])
        key = (tuple(str(self.columns[name][index]) for name in DATAPATH_COLUMNS), per_copy)
        if key not in self._memo:
            start = time.perf_counter()
            dp = self.datapath(index)
            group = p.heads // p.kv_head_count  # query heads a K/V head serves
            kv_heads = None if p.kv_heads is None else per_copy
            try:
                cycles = problem_cycles(dp, p.seq, p.dim, p.causal, BC, p.q_len, per_copy * group, kv_heads, 1).cycles
                self._memo[key] = cycles / dp.clock_hz
            except SpecError:  # fewer units never need more buffer than the point's own, which ran: not expected
                self._memo[key] = math.inf
            self.evaluations += 1
            self.seconds += time.perf_counter() - start
        return self._memo[key]


def share_for(columns: dict[str, np.ndarray], problem: AttentionProblem):
    """The copy latency `compare` uses: the cycle model's (MappedShare) where the columns carry the datapath, else
    the proportional bound (ProportionalShare), whose rows the table marks as bounds."""
    if all(name in columns for name in DATAPATH_COLUMNS):
        return MappedShare(columns, problem)
    return ProportionalShare(columns, problem)


def units(problem: AttentionProblem) -> int:
    """The problem's independent units copies share: B · kv_heads (a K/V head with its query heads stays on one
    copy), B · H when every head has its own K/V head."""
    return problem.batch * (problem.heads if problem.kv_heads is None else problem.kv_heads)


def exact_for_all_inputs(columns: dict[str, np.ndarray]) -> np.ndarray:
    """The points whose arithmetic is bit-exact with the contract for every input (points.csv's bit_exact "all
    inputs"): the only ones an answer may name, as only they enter the fronts. A point exact on the probe head alone
    ("probe"), or not even there ("no"), is never one; columns without the label (a test's) count as exact."""
    if "bit_exact" not in columns:
        return np.ones(len(columns["latency_s"]), dtype=bool)
    return columns["bit_exact"] == "all inputs"


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
            allowed: np.ndarray | None = None, share=None) -> list[IsoRow]:
    """For each measured point and budget (its die area, its power), the fastest allowed ASIC point, bit-exact for
    every input and at least as accurate as `accuracy_bound` (rel-L2), of equally fast ones the least energy, copied
    to the budget (index −1 where none fits it once); each budget again with the copies' DRAM interfaces held to the
    point's bandwidth where it has one (`dram_cap_gbps`); none for a budget the point has no figure for (the board's
    area). `share(index, u)` gives a copy's latency running u units (default `share_for`: the cycle model where the
    columns carry the datapath)."""
    if not (math.isfinite(accuracy_bound) and accuracy_bound > 0):
        raise SpecError(f"accuracy_bound={accuracy_bound} is out of range; allowed: a positive rel-L2")
    share = share_for(columns, problem) if share is None else share
    shared = units(problem)
    ok = exact_for_all_inputs(columns) & (within(columns) if allowed is None else allowed)
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
            found = fastest(columns, n, shared, share)
            if found is None:  # said in the table: none of the points fits this budget once
                rows.append(IsoRow(point.label, budget, float(value), -1, 0, 0, math.inf, math.nan, point.latency_s,
                                   point.energy_j, cap))
                continue
            best, latency = found
            rows.append(IsoRow(point.label, budget, float(value), best, int(n[best]), int(min(n[best], shared)),
                               latency, float(columns["energy_j"][best]), point.latency_s, point.energy_j, cap,
                               share.exact))
    return rows


def fastest(columns: dict[str, np.ndarray], n: np.ndarray, shared: int, share) -> tuple[int, float] | None:
    """The point whose n copies finish first (of equally fast ones the least energy) and that latency, or None when
    no point fits once. Points are taken in the order of their proportional bound (`copied_latency`); each one's
    copy latency comes from `share`, and the search stops at the first point whose bound is above the best latency
    found, since no later one can beat it."""
    bound = copied_latency(columns["latency_s"], n, shared)
    if not np.isfinite(bound).any():
        return None
    per_copy = units_per_copy(n, shared)
    energy = columns["energy_j"]
    best, best_key = -1, (math.inf, math.inf)
    for i in np.lexsort((energy, bound)):
        if not np.isfinite(bound[i]) or bound[i] * (1 - BOUND_SLACK) > best_key[0]:
            break
        latency = share(int(i), int(per_copy[i]))
        # the bound holds by construction (fewer units overlap no more); a breach would make the search's stop wrong
        assert latency >= bound[i] * (1 - BOUND_SLACK), (int(i), latency, float(bound[i]))
        if (latency, energy[i]) < best_key:
            best, best_key = int(i), (latency, float(energy[i]))
    return best, best_key[0]


def table(rows: list[IsoRow], columns: dict[str, np.ndarray], accuracy_bound: float) -> str:
    """A Markdown table of `compare`'s rows: the budget, the point (array, clock, node, mapping), its copies, and
    the ratios against the reference."""
    lines = [f"At equal cost and at least fp16's accuracy (rel-L2 ≤ {accuracy_bound:.2e} on the probe head):", "",
             "| reference | budget | ASIC point | copies used (fit) | latency | × faster | energy | "
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
        point = (f"{arrays}{columns['array'][i]} {columns['dataflow'][i]}{_datapath_tags(columns, i)}, "
                 f"{columns['clock_mhz'][i]:.0f} MHz, {columns['node_nm'][i]:.0f} nm{dram}")
        lines.append(f"| {row.reference} | {budget} | {point} | "
                     f"{row.copies} ({row.fit}) | {row.latency_s * 1e6:.3g} µs{'' if row.exact else ' (bound)'} | "
                     f"{row.speedup:.3g} | "
                     f"{row.energy_j * 1e6:.3g} µJ | {row.energy_gain:.3g} | {columns['rel_l2'][i]:.2e} |")
    if not rows:
        lines.append("| (no measured point with an area or a power, or no ASIC point fits) | | | | | | | | |")
    return "\n".join(lines) + "\n"


def _datapath_tags(columns: dict[str, np.ndarray], i: int) -> str:
    """The point's schedule, divider (with its latency where that applies) and accumulator width, where the columns
    carry them: what tells apart the points that share an array, clock and node."""
    tags = []
    if "schedule" in columns:
        tags.append(str(columns["schedule"][i]))
    if "divider" in columns:
        kind = str(columns["divider"][i])
        latency = columns["div_latency"][i] if "div_latency" in columns else ""
        shown = kind != "reciprocal" and str(latency) not in ("", "nan")
        tags.append(f"{kind} divider" + (f" ({int(float(latency))} cycles)" if shown else ""))
    if "acc_bits" in columns:
        tags.append(f"{int(columns['acc_bits'][i])}-bit accumulators")
    return "".join(f", {tag}" for tag in tags)
