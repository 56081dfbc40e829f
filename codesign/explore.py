"""`python -m codesign explore`: the operating-point explorer. It sweeps a space of datapaths (array shape, dataflow,
exponent lanes, dividers, buffers, clock, DRAM bandwidth, technology node, accumulator width, DRAM kind) for one
attention problem and writes every point's latency, throughput, energy per inference and area (each with its band),
utilisation and the arithmetic's bit-exactness to points.csv (with a second, synthesis-based area beside the
table's: `synthesis_area`), the Pareto front of energy against latency to front.csv
(and the console), and two plots. With --results, the measured rows of host.compare runs (the GPU's NVML energy, the
MCU's datasheet energy) are placed on the same axes.

Evaluation is vectorised: the cycle model (codesign/cycles.py) runs once per distinct (array, dataflow, lanes,
dividers, divider latency and kind, buffers, clock, DRAM bandwidth, arrays, schedule), the only parameters cycles
depend on, a reciprocal divider's once whatever the div_latency values, since none of its figures depends on them
(codesign/explore_cycles.py `configurations`; points.csv leaves its div_latency empty); node, accumulator width and
DRAM kind change energy and area only and are evaluated as numpy arrays over the point grid's axes
(codesign/explore_points.py, codesign/energy.py): the logic at the supply the point's clock allows, idle PEs and the
clock tree charged; a point whose clock is above its node's f_max, or whose banked buffer's access time is over the
clock period, is skipped with the reason, as one whose buffers cannot hold a tile is. The bits are computed at the
contract's Bc (host.q15.BC) whatever the array's shape, so they depend on the accumulator alone (codesign/bits.py): a
width at or above the contract's exact width (codesign/widths.py `predicted_width`) is bit-exact for every input and
carries the contract v2 output's own rel-L2; below it, one seeded head is run through the bit model and the point
carries the measured rel-L2. Every array shape of one problem gets the same accuracy.
"""

from __future__ import annotations

import decimal
import functools
import itertools
import math
import re
import time
import tomllib
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from codesign.datapath import (ACC_BITS_MAX, ACC_BITS_MIN, ARRAY_MAX, ARRAYS_MAX, DATAFLOWS, DIVIDERS, OVERFLOWS,
                               SCHEDULES, Datapath)
from codesign.explore_cycles import CYCLE_KEYS, configuration_count, cycle_table, div_latency_applies
from codesign.energy import area, reciprocal_lane
from codesign.technology import Band, GateCalibration, Technology, default_gates
from codesign.explore_points import every_point, flat, flat_band, grid_of, point_energy, refusals
from codesign.tomlfile import read_toml
from host.errors import SpecError
from host.problem import AttentionProblem
from host.q15 import BC

#: The default space: 8×8 to 256×256 arrays (square, and 1:4 up to 128), three dataflows, 4 to 256 exponent lanes,
#: two buffer sets (the datapath's default, and one that holds a seq-1024 d-64 head's K and V), 200 MHz to 1.5 GHz,
#: DRAM from an LPDDR4 channel to an HBM stack, the Stillmaker-Baas nodes 45 to 7 nm, 24- to 48-bit accumulators;
#: one array on the serial schedule with an iterative divider (today's model, which the RTL runs). The issue-33 space
#: (reports/issue-33/model/space.toml) adds arrays, the overlap schedule and the mapper, and a pipelined divider: the
#: mapper costs some 1–50 ms a configuration (docs/codesign.md "Schedules and the mapper"), too slow for this space.
DEFAULT_SPACE = {
    "array": ["8x8", "16x16", "32x32", "64x64", "128x128", "256x256", "8x32", "32x8", "16x64", "64x16", "32x128",
              "128x32"],
    "dataflow": ["os", "ws", "is"],
    "exp_lanes": [4, 16, 64, 256],
    "dividers": [8, 32, 128],
    "div_latency": [18],
    "buffers_kb": [[32, 64, 64, 128], [64, 256, 256, 256]],
    "clock_mhz": [200, 500, 1000, 1500],
    "dram_gbps": [25.6, 204.8, 819.2],
    "node_nm": [45, 32, 16, 7],
    "acc_bits": [24, 32, 36, 38, 40, 48],
    "overflow": ["wrap"],
    "dram": ["hbm2"],
    "divider": ["iterative"],
    "arrays": [1],
    "schedule": ["serial"],
}
LIMITS = {"exp_lanes": (1, 4096), "dividers": (1, 4096), "div_latency": (1, 256), "arrays": (1, ARRAYS_MAX),
          "clock_mhz": (1, 10_000),
          "dram_gbps": (0.001, 100_000), "acc_bits": (ACC_BITS_MIN, ACC_BITS_MAX)}
#: The most points one exploration holds (about 1 KB of arrays per point, so some 2 GB at this size).
MAX_POINTS = 2_000_000
#: Seq of the head the bit model runs for widths below the exact one (the problem's own seq when shorter).
PROBE_SEQ_MAX = 256


def _array(text: object) -> tuple[int, int]:
    match = re.fullmatch(r"([0-9]+)x([0-9]+)", str(text).strip().lower(), flags=re.ASCII)
    if not isinstance(text, str) or match is None:
        raise SpecError(f"space: array {text!r} is not RxC (e.g. 32x32); allowed: 1..{ARRAY_MAX} each")
    rows, cols = int(match[1]), int(match[2])
    if not (1 <= rows <= ARRAY_MAX and 1 <= cols <= ARRAY_MAX):
        raise SpecError(f"space: array {text!r} is out of range; allowed: 1..{ARRAY_MAX} each")
    return rows, cols


def check_space(space: dict, tech: Technology) -> dict:
    """The space with every value parsed and checked: SpecError naming the first bad key or value and the range."""
    unknown = set(space) - set(DEFAULT_SPACE)
    if unknown:
        raise SpecError(f"space: unknown key {sorted(unknown)[0]!r}; allowed: {', '.join(DEFAULT_SPACE)}")
    full = {**DEFAULT_SPACE, **space}
    out = {}
    for key, values in full.items():
        if not isinstance(values, list) or not values:
            raise SpecError(f"space: {key} must be a non-empty list, got {values!r}")
        if key == "array":
            out[key] = list(dict.fromkeys(_array(v) for v in values))
        elif key in ("dataflow", "overflow", "dram", "divider", "schedule"):
            allowed = {"dataflow": DATAFLOWS, "overflow": OVERFLOWS, "dram": tech.dram_kinds, "divider": DIVIDERS,
                       "schedule": SCHEDULES}[key]
            for value in values:
                if value not in allowed:
                    raise SpecError(f"space: {key}={value!r} is unknown; allowed: {', '.join(allowed)}")
            out[key] = list(dict.fromkeys(values))
        elif key == "node_nm":
            for value in values:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise SpecError(f"space: node_nm={value!r} is not an integer node; allowed: "
                                    f"{', '.join(str(n) for n in tech.nodes)}")
                tech.check_node(value)
            out[key] = list(dict.fromkeys(values))
        elif key == "buffers_kb":
            for value in values:
                if not (isinstance(value, list) and len(value) == 4
                        and all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0.0625 <= x <= 1 << 20
                                for x in value)):
                    raise SpecError(f"space: buffers_kb entry {value!r} is not [Q, K, V, O] in KB; allowed: "
                                    "0.0625..1048576 each")
            out[key] = list(dict.fromkeys(tuple(float(x) for x in v) for v in values))
        else:
            low, high = LIMITS[key]
            whole = key not in ("dram_gbps", "clock_mhz")
            for value in values:
                if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
                    raise SpecError(f"space: {key}={value!r} is not {'an integer' if whole else 'a number'}; "
                                    f"allowed: {low:g}..{high:g}")
                if not math.isfinite(value) or not low <= value <= high:
                    raise SpecError(f"space: {key}={value!r} is out of range; allowed: {low:g}..{high:g}")
                if key == "clock_mhz" and (decimal.Decimal(repr(value)) * 1_000_000) % 1:  # exact, as written
                    raise SpecError(f"space: clock_mhz={value!r} is not a whole number of Hz; allowed: "
                                    f"{low:g}..{high:g} MHz in steps of 1 Hz (6 decimals)")
            out[key] = list(dict.fromkeys(values))
    for mhz, gbps in itertools.product(out["clock_mhz"], out["dram_gbps"]):
        per_cycle = gbps * 1e3 / mhz
        if not 0.001 <= per_cycle <= 65536:
            raise SpecError(f"space: dram_gbps={gbps:g} at clock_mhz={mhz:g} is {per_cycle:g} bytes per cycle; "
                            "allowed: 0.001..65536 (the datapath's DRAM interface)")
    configs, points = space_size(out)
    if points > MAX_POINTS:
        raise SpecError(f"space: {points:,} operating points ({configs:,} cycle-model configurations); allowed: up to "
                        f"{MAX_POINTS:,} (memory: about 1 KB per point); split the space into several runs")
    return out


def load_space(path: Path | None, tech: Technology) -> dict:
    """The default space, with the keys of a TOML file (if given) replacing the defaults."""
    if path is None:
        return check_space({}, tech)
    try:
        data = read_toml(Path(path))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"--space {path}: not a readable TOML file ({type(exc).__name__}: {exc})") from None
    return check_space(data, tech)


def space_size(space: dict) -> tuple[int, int]:
    """(cycle-model configurations, operating points): a reciprocal divider's configurations once, not once per
    div_latency (explore_cycles.configurations)."""
    configs = configuration_count(space)
    return configs, configs * math.prod(len(space[k]) for k in space if k not in CYCLE_KEYS)


@dataclass
class Exploration:
    """Every point as columns (numpy arrays of equal length), and how long the evaluation took."""

    columns: dict[str, np.ndarray]
    cycle_configs: int
    seconds: float
    cycle_seconds: float = 0.0  # of `seconds`, the cycle model's (the mapper's included)
    slower_pairs: int = 0  # (smaller, bigger) array pairs, all else equal, with the bigger slower
    array_pairs: int = 0  # such pairs in all
    #: points the cycle model can run that are skipped all the same: 'clock' above the node's f_max,
    #: 'sram_timing' a banked buffer slower than the clock period (the rest of `skipped`: a buffer below one tile)
    refused: dict[str, int] = dataclasses.field(default_factory=lambda: {"clock": 0, "sram_timing": 0})

    @property
    def cycle_free_points_per_s(self) -> float:
        """Points per second of everything but the cycle model (energy, area, bits, columns)."""
        return len(self) / max(self.seconds - self.cycle_seconds, 1e-9)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))


def bit_labels(problem: AttentionProblem, widths: list[int], overflows: list[str], seed: int = 0,
               bc: int = BC) -> dict[tuple[int, str], tuple[str, float]]:
    """(acc_bits, overflow) → (bit_exact label, rel-L2 against the float64 golden), measured on one seeded N(0,1)
    head of min(seq, 256) keys at the contract's Bc, its last min(q_len, that) rows as the queries (a decode
    problem's probe is a decode head): 'all inputs' at or above the exact width (the rel-L2 is then the contract's
    own, its v2 outputs with their row shifts), else 'probe' when the probe's output is still bit-exact, else 'no'.
    No array shape enters: the bits of every R×C are the same at one Bc (codesign/bits.py)."""
    from codesign.bits import run_head
    from codesign.widths import inputs, predicted_width
    from host import q15
    from host.reference import attention, errors

    seq = min(problem.seq, PROBE_SEQ_MAX)
    q, k, v = inputs("normal", seq, problem.dim, seed)
    q = q[seq - min(problem.queries, seq):]  # (q_len, d): the head's last rows, as a decode head's queries are
    gold = attention(q[None, None], k[None, None], v[None, None], problem.causal, np.float64)[0, 0]
    probe = AttentionProblem(batch=1, heads=1, seq=seq, q_len=len(q), dim=problem.dim, causal=problem.causal,
                             dtype="q15", seed=seed)
    labels = {}
    quantized = q15.prepare(probe, *(x[None, None] for x in (q, k, v)), bc)
    expected = quantized.expected()
    head_expected = q15.Q15Out(expected.o[0, 0], expected.shift[0, 0])
    exact_bits = predicted_width(problem.dim, bc)
    contract = errors(quantized.dequantize(head_expected), gold).rel_l2
    for bits, overflow in itertools.product(widths, overflows):
        if bits >= exact_bits:
            labels[bits, overflow] = ("all inputs", contract)
            continue
        head = run_head(*quantized.head(0, 0), quantized.params, Datapath(acc_bits=bits, overflow=overflow),
                        quantized.row0)
        exact = head.out.same_bits(head_expected)
        labels[bits, overflow] = ("probe" if exact else "no", errors(quantized.dequantize(head.out), gold).rel_l2)
    return labels


def synthesis_area(tech: Technology, gates: GateCalibration, units: dict[str, Band], rows, cols, acc_bits, overflow,
                   exp_lanes, dividers, node, reciprocal_lanes=0) -> dict:
    """The second area source: 'ge', the NAND2 gate equivalents of the logic the RTL synthesis covers (the array:
    R·C MAC cells × the array's overhead; C score lanes; E EXP2 and rescale lanes; the dividers); 'logic', µm²: GE ×
    the NAND2 area at the node, plus the E max comparators and any reciprocal lanes from the table (no RTL of their
    own); 'total': with the table-based area's SRAM (CACTI), times the same control-overhead band."""
    rows, cols, lanes = np.asarray(rows), np.asarray(cols), np.asarray(exp_lanes)
    ge = (rows * cols * gates.mac(acc_bits, overflow) * gates.array_overhead + cols * gates.score_lane(acc_bits)
          + lanes * (gates.exp2 + gates.rescale) + np.asarray(dividers) * gates.divider)
    logic = (tech.nand2_area(node) * ge + tech.area("compare", 32, node) * lanes
             + reciprocal_lane(tech, node) * np.asarray(reciprocal_lanes))
    low, high = tech.overhead
    return {"ge": ge, "logic": logic, "total": (logic + units["buffers"]) * Band(np.float64(low), np.float64(high))}


def explore(problem: AttentionProblem, space: dict, tech: Technology, progress=None,
            gates: GateCalibration | None = None) -> Exploration:
    """Every operating point of `space` for `problem` (heads run one after another on the one datapath, the cycle
    table's figures already the whole problem's); the area
    from the table (`area_mm2`, the default) and from the gate calibration (`synth_area_mm2`; default the shipped
    codesign/rtl_gates.toml)."""
    start = time.perf_counter()
    gates = gates or default_gates()
    table = cycle_table(problem, space, progress)
    slower_pairs, array_pairs = int(table.pop("slower_pairs")), int(table.pop("array_pairs"))
    cycle_seconds = time.perf_counter() - start
    cols = every_point(table, space)
    grid, shape = grid_of(table, space)
    spread = functools.partial(flat, shape=shape)
    copies = cols["arrays"]  # every array a whole datapath: its area and leakage counted once per copy
    # '' or why the node cannot reach the point's clock, or a banked buffer cannot be read within its period
    clock_reason, timing_reason = (spread(reason) for reason in refusals(tech, grid))
    runs = cols["skipped"] == ""  # the cycle model's own reasons (a buffer below one tile) come first
    refused = {"clock": int((runs & (clock_reason != "")).sum()),
               "sram_timing": int((runs & (clock_reason == "") & (timing_reason != "")).sum())}
    cols["skipped"] = np.where(~runs, cols["skipped"], np.where(clock_reason != "", clock_reason, timing_reason))
    ok = cols["skipped"] == ""
    latency = np.where(ok, cols["cycles"] / cols["clock_hz"], np.nan)
    buffers = (cols["q_kb"], cols["k_kb"], cols["v_kb"], cols["o_kb"])
    g_buffers = (grid["q_kb"], grid["k_kb"], grid["v_kb"], grid["o_kb"])
    # a pipelined divider is div_latency copies of the iterative one's stage (its adder and registers), one per cycle
    # of a division in flight: its area (and leakage) counted as that many dividers; a reciprocal divider is D lanes
    # of its own (energy.reciprocal_lane)
    kind = grid["divider"]
    stages = np.where(kind == "pipelined", grid["dividers"] * grid["div_latency"],
                      np.where(kind == "reciprocal", 0, grid["dividers"]))
    lanes = np.where(kind == "reciprocal", grid["dividers"], 0)
    # evaluated on the grid's axes (cycle configuration × node × accumulator × overflow × DRAM kind), each figure
    # over only the axes it depends on, then spread over every point
    g_units = area(tech, grid["rows"], grid["cols"], grid["acc_bits"], grid["exp_lanes"], stages, g_buffers,
                   grid["node_nm"], lanes)
    energy_low, energy_high, shares = point_energy(tech, grid, shape, g_units, latency, ok)
    synth = synthesis_area(tech, gates, g_units, grid["rows"], grid["cols"], grid["acc_bits"], grid["overflow"],
                           grid["exp_lanes"], stages, grid["node_nm"], lanes)
    synth = {"ge": spread(synth["ge"]) * copies, "logic": flat_band(synth["logic"], shape) * copies,
             "total": flat_band(synth["total"], shape) * copies}
    units = {"total": flat_band(g_units["total"], shape)}
    label, rel_l2 = _bit_columns(problem, space, cols)
    ops = problem.flops()
    columns = {
        "array": np.char.add(np.char.add(cols["rows"].astype(str), "x"), cols["cols"].astype(str)),
        "dataflow": cols["dataflow"], "exp_lanes": cols["exp_lanes"], "dividers": cols["dividers"],
        "div_latency": cols["div_latency"],
        "buffers_kb": np.array([f"{q:.10g}/{k:.10g}/{v:.10g}/{o:.10g}" for q, k, v, o in zip(*buffers)]),
        "clock_mhz": cols["clock_hz"] / 1e6, "dram_gbps": cols["dram_gbps"], "node_nm": cols["node_nm"],
        "acc_bits": cols["acc_bits"], "overflow": cols["overflow"], "dram": cols["dram"],
        "divider": cols["divider"], "arrays": cols["arrays"], "schedule": cols["schedule"], "mapping": cols["mapping"],
        "latency_s": latency, "inferences_per_s": 1 / latency, "gops": ops / latency / 1e9,
        "energy_j_low": energy_low, "energy_j_high": energy_high, "energy_j": np.sqrt(energy_low * energy_high),
        **_area_columns(units["total"] * (copies * 1e-6), synth, ok),
        "utilisation": np.where(ok, cols["utilisation"], np.nan),
        # stalls are summed over every array's heads (mapping.ProblemCycles.stall_cycles): over P arrays' cycles, and
        # at most 1 (a pipelined head's prologue stalls while the last one's tail runs)
        "dram_stall_share": np.where(ok, np.minimum(cols["stall_cycles"] / np.maximum(cols["cycles"] * copies, 1),
                                                    1.0), np.nan),
        "bit_exact": label, "rel_l2": rel_l2, "skipped": cols["skipped"], "slower_than": cols["slower_than"],
    }
    total_mid = sum(shares.values())
    for part, value in shares.items():
        columns[f"share_{part}"] = np.where(ok, value / np.where(total_mid > 0, total_mid, 1), np.nan)
    columns["gops_per_mm2"] = columns["gops"] / columns["area_mm2"]
    columns["gops_per_j"] = ops / 1e9 / columns["energy_j"]
    return Exploration(columns, len(table["cycles"]), time.perf_counter() - start, cycle_seconds, slower_pairs,
                       array_pairs, refused)


def _area_columns(table_mm2: Band, synth: dict, ok: np.ndarray) -> dict[str, np.ndarray]:
    """The table's area band and the synthesis-based one, mm² (NaN where the point cannot run)."""
    synth_mm2 = synth["total"] * 1e-6
    return {"area_mm2_low": np.where(ok, table_mm2.low, np.nan), "area_mm2_high": np.where(ok, table_mm2.high, np.nan),
            "area_mm2": np.where(ok, table_mm2.mid, np.nan),
            "synth_ge": np.where(ok, synth["ge"], np.nan),
            "synth_area_mm2_low": np.where(ok, synth_mm2.low, np.nan),
            "synth_area_mm2_high": np.where(ok, synth_mm2.high, np.nan),
            "synth_area_mm2": np.where(ok, synth_mm2.mid, np.nan)}


def _bit_columns(problem: AttentionProblem, space: dict, cols: dict) -> tuple[np.ndarray, np.ndarray]:
    """Each point's bit_exact label and rel-L2 (bit_labels, looked up by the point's width and overflow)."""
    labels = bit_labels(problem, space["acc_bits"], space["overflow"])
    label = np.empty(len(cols["cols"]), dtype=object)
    rel_l2 = np.empty(len(cols["cols"]))
    for (bits, overflow), (text, err) in labels.items():
        here = (cols["acc_bits"] == bits) & (cols["overflow"] == overflow)
        label[here], rel_l2[here] = text, err
    return label, rel_l2


def pareto(objectives: np.ndarray) -> np.ndarray:
    """Indices of the rows of `objectives` (points × criteria, lower is better, NaN rows ignored) that no other row
    dominates (no worse in every criterion, better in one), sorted by the first criterion."""
    finite = np.flatnonzero(np.isfinite(objectives).all(axis=1))
    order = finite[np.lexsort(objectives[finite].T[::-1])]
    kept: list[int] = []
    front = np.empty((0, objectives.shape[1]))
    for i in order:  # by the first criterion: only an earlier row can dominate a later one
        point = objectives[i]
        if len(front) and (front <= point).all(axis=1).any():
            continue  # dominated (or equal to a kept point)
        kept.append(int(i))
        front = np.vstack((front, point))
    return np.array(kept, dtype=np.int64)


def fronts(result: Exploration, allowed: np.ndarray | None = None) -> list[tuple[str, np.ndarray]]:
    """The Pareto fronts in latency, energy per inference and area (each the band's geometric mean) over the points
    whose arithmetic is bit-exact for every input (and, given `allowed`, within --max-area and --max-power:
    codesign/iso.py `within`): all nodes together, then each node alone (the front an architect tied to one process
    sees)."""
    c = result.columns
    exact = c["bit_exact"] == "all inputs"
    if allowed is not None:
        exact = exact & allowed
    objectives = np.column_stack((c["latency_s"], c["energy_j"], c["area_mm2"]))
    out = []
    for name, mask in [("all nodes", exact)] + [(f"{n} nm", exact & (c["node_nm"] == n))
                                                 for n in sorted(set(c["node_nm"].tolist()), reverse=True)]:
        idx = np.flatnonzero(mask)
        out.append((name, idx[pareto(objectives[idx])]))
    return out


#: The parameters a sensitivity table varies, as points.csv names them: every key of the space.
SWEPT = ("array", "dataflow", "exp_lanes", "dividers", "div_latency", "buffers_kb", "clock_mhz", "dram_gbps",
         "node_nm", "acc_bits", "overflow", "dram", "divider", "arrays", "schedule")


def sensitivity(result: Exploration, base: int, allowed: np.ndarray | None = None) -> list[dict]:
    """For each parameter: hold every other one at point `base`'s value, vary it over the space, and give the
    spread (max / min over the runnable, bit-exact-for-all-inputs points, those `allowed` when given) of latency,
    energy and area, with the values at which the extremes occur."""
    c = result.columns
    usable = np.isfinite(c["latency_s"]) & (c["bit_exact"] == "all inputs")
    if allowed is not None:
        usable &= allowed
    rows = []
    applies = div_latency_applies(c["divider"])
    for name in SWEPT:
        same = usable.copy()
        for other in SWEPT:
            if other == "div_latency" and name != other:  # a point it does not apply to carries the space's first
                same &= (c[other] == c[other][base]) | ~applies
            elif other != name:
                same &= c[other] == c[other][base]
        idx = np.flatnonzero(same)
        if len(idx) < 2:
            continue
        row = {"parameter": name, "values": len(idx)}
        for metric in ("latency_s", "energy_j", "area_mm2"):
            values = c[metric][idx]
            low, high = idx[np.argmin(values)], idx[np.argmax(values)]
            row[f"{metric}_spread"] = float(values.max() / values.min())
            row[f"{metric}_best_at"] = str(c[name][low])
            row[f"{metric}_worst_at"] = str(c[name][high])
        rows.append(row)
    return sorted(rows, key=lambda r: -max(r["latency_s_spread"], r["energy_j_spread"], r["area_mm2_spread"]))


if __name__ == "__main__":  # `python -m codesign.explore` runs `python -m codesign explore`
    from codesign.__main__ import run_as

    run_as("explore")
