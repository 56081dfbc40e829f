"""The explorer's cycle table (codesign/explore.py): one row per distinct cycle configuration of the space (array,
dataflow, lanes, dividers, divider latency and kind, buffers, clock, DRAM bandwidth, arrays, schedule; a reciprocal
divider's once, since no figure of it depends on the divider latency: `configurations`), the whole
problem's cycles under the datapath's best mapping (codesign/groups.py `problem_cycles`, the mapper off the default
datapath), its utilisation, traffic and mapping, and for each configuration whether a smaller array with everything
else equal is faster, and why (codesign/mapper.py `slower_reason`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np

from codesign.cycles import TRAFFIC_KEYS
from codesign.datapath import Datapath
from codesign.groups import ProblemCycles, problem_cycles
from codesign.mapper import slower_reason
from host.errors import SpecError
from host.problem import AttentionProblem
from host.q15 import BC

#: Keys whose values change cycles (one cycle-model call per combination); the rest change energy, area or bits.
CYCLE_KEYS = ("array", "dataflow", "exp_lanes", "dividers", "div_latency", "divider", "buffers_kb", "clock_mhz",
              "dram_gbps", "arrays", "schedule")
#: The table's parameter columns, one per value a cycle configuration has (the array as rows and cols).
PARAMETERS = ("rows", "cols", "dataflow", "exp_lanes", "dividers", "div_latency", "divider", "q_kb", "k_kb", "v_kb",
              "o_kb", "clock_hz", "dram_gbps", "arrays", "schedule")


#: Divider kinds none of whose figures depend on div_latency: a reciprocal lane's latencies are its own
#: (datapath.RECIPROCAL_LATENCY, PRODUCT_LATENCY; divider_cycles.tile_cycles), its area is D lanes (explore.py) and its
#: energy its reciprocals and products (energy.divider_energy). The space evaluates such a configuration once, at the
#: space's first div_latency, and points.csv leaves its div_latency empty: it does not apply (`div_latency_applies`).
NO_DIV_LATENCY = ("reciprocal",)


def configurations(space: dict) -> Iterator[tuple]:
    """The space's cycle configurations, values in CYCLE_KEYS' order: every combination, except that a divider kind
    of NO_DIV_LATENCY comes once, at the space's first div_latency."""
    latency, kind, first = CYCLE_KEYS.index("div_latency"), CYCLE_KEYS.index("divider"), space["div_latency"][0]
    for combo in itertools.product(*(space[k] for k in CYCLE_KEYS)):
        if combo[kind] not in NO_DIV_LATENCY or combo[latency] == first:
            yield combo


def configuration_count(space: dict) -> int:
    """len(list(configurations(space))), without walking them."""
    kinds = space["divider"]
    per_kind = sum(1 if kind in NO_DIV_LATENCY else len(space["div_latency"]) for kind in kinds)
    return per_kind * math.prod(len(space[k]) for k in CYCLE_KEYS if k not in ("div_latency", "divider"))


def div_latency_applies(divider: np.ndarray) -> np.ndarray:
    """Per point, whether its div_latency means anything (False for the kinds of NO_DIV_LATENCY)."""
    return ~np.isin(np.asarray(divider), NO_DIV_LATENCY)


def _shape(problem: AttentionProblem) -> tuple:
    return (problem.seq, problem.dim, problem.causal, BC, problem.queries, problem.heads, problem.kv_head_count,
            problem.batch)


def cycle_table(problem: AttentionProblem, space: dict, progress) -> dict[str, np.ndarray]:
    """One row per cycle configuration: its parameters, the whole problem's cycles, utilisation and traffic (every
    head, a group's query heads sharing their K/V head where it stays on chip), its mapping, '' or why it cannot
    run, and '' or why a smaller array is faster (`slower_than`)."""
    rows: dict[str, list] = {k: [] for k in (*PARAMETERS, "cycles", "utilisation", "stall_cycles", "skipped",
                                             "mapping", *TRAFFIC_KEYS)}
    models: list[ProblemCycles | None] = []
    datapaths: list[Datapath] = []
    for (r, c), flow, lanes, dividers, latency, kind, buffers, mhz, gbps, arrays, schedule in configurations(space):
        clock = int(round(mhz * 1e6))
        dp = Datapath(rows=r, cols=c, dataflow=flow, exp_lanes=lanes, dividers=dividers, div_latency=latency,
                      q_buffer_kb=buffers[0], k_buffer_kb=buffers[1], v_buffer_kb=buffers[2], o_buffer_kb=buffers[3],
                      dram_bytes_per_cycle=max(gbps * 1e9 / clock, 0.001), clock_hz=clock, arrays=arrays,
                      schedule=schedule, divider=kind)
        try:
            model = problem_cycles(dp, *_shape(problem))
            values = {"cycles": model.cycles, "utilisation": model.utilisation, "stall_cycles": model.stall_cycles,
                      "skipped": "", "mapping": model.describe(), **model.traffic}
        except SpecError as exc:
            model = None
            values = {"cycles": 0, "utilisation": 0.0, "stall_cycles": 0, "skipped": str(exc), "mapping": "",
                      **dict.fromkeys(TRAFFIC_KEYS, 0)}
        models.append(model)
        datapaths.append(dp)
        for key, value in zip(PARAMETERS, (r, c, flow, lanes, dividers, latency, kind, *buffers, clock, gbps, arrays,
                                           schedule)):
            rows[key].append(value)
        for key, value in values.items():
            rows[key].append(value)
        if progress is not None:
            progress.update()
    # texts as objects: each point then holds a reference, not a fixed-width copy of the longest text
    table = {k: np.array(v, dtype=object if k in ("skipped", "mapping") else None) for k, v in rows.items()}
    table["slower_than"], table["slower_pairs"], table["array_pairs"] = _slower(problem, datapaths, models)
    return table


def _slower(problem: AttentionProblem, datapaths: list[Datapath],
            models: list[ProblemCycles | None]) -> tuple[np.ndarray, int, int]:
    """Per configuration '' or why a smaller array (no more rows and columns, everything else equal, runnable) is
    faster; and of the (smaller, bigger) array pairs with everything else equal, both runnable, how many have the
    bigger slower, and how many there are."""
    groups: dict[tuple, list[int]] = {}
    for i, dp in enumerate(datapaths):
        if models[i] is not None:
            other = tuple(getattr(dp, name) for name in Datapath.__dataclass_fields__ if name not in ("rows", "cols"))
            groups.setdefault(other, []).append(i)
    why = np.full(len(datapaths), "", dtype=object)
    slower = pairs = 0
    for members in groups.values():
        for small, big in itertools.permutations(members, 2):
            a, b = datapaths[small], datapaths[big]
            if (a.rows, a.cols) == (b.rows, b.cols) or a.rows > b.rows or a.cols > b.cols:
                continue
            pairs += 1
            if models[big].cycles > models[small].cycles:
                slower += 1
                if not why[big]:
                    why[big] = (slower_reason(b, models[small], *_shape(problem))
                                or f"slower than the {a.rows}x{a.cols} array for a reason the model does not name")
    return why, slower, pairs
