"""The cited per-action energy and area table (codesign/technology.toml), read and validated, and its figures at any
listed node as low/high bands: the spread between sources, never one silent pick.

Each function takes numpy arrays (or scalars) and broadcasts, so the explorer evaluates every operating point at
once. A source's figure is scaled from its own node by the Stillmaker-Baas factors of the table's [scaling] section,
and only to the nodes listed there (`check_node`); the band at a node is the minimum and maximum over the sources
that give the action.
"""

from __future__ import annotations

import functools
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from codesign.technology_limits import Limits
from codesign.tomlfile import read_toml
from host.errors import SpecError

TABLE = Path(__file__).resolve().parent / "technology.toml"
#: Gate equivalents of the RTL units, written by `python -m codesign synth --write-calibration` (codesign/rtl/synth.py).
GATES = Path(__file__).resolve().parent / "rtl_gates.toml"
LOGIC_ACTIONS = ("multiply", "add", "compare", "register")


@dataclass(frozen=True)
class Band:
    """A figure's low and high ends (arrays broadcast over operating points)."""

    low: np.ndarray
    high: np.ndarray

    def __add__(self, other: Band) -> Band:
        return Band(self.low + other.low, self.high + other.high)

    def __mul__(self, factor) -> Band:
        if isinstance(factor, Band):
            return Band(self.low * factor.low, self.high * factor.high)
        return Band(self.low * factor, self.high * factor)

    __rmul__ = __mul__

    @property
    def mid(self) -> np.ndarray:
        """The geometric mean of the two ends: the point estimate plots and the Pareto front use."""
        return np.sqrt(self.low * self.high)


def _loglog(points: list[list[float]], x, exponent: float | None) -> np.ndarray:
    """A source's figure at x: log-log interpolation (and extrapolation) between its points, or with one point,
    value · (x / x0)^exponent."""
    xs = np.array([p[0] for p in points], dtype=float)
    ys = np.array([p[1] for p in points], dtype=float)
    x = np.asarray(x, dtype=float)
    if len(xs) == 1:
        return ys[0] * (x / xs[0]) ** exponent
    lx, ly = np.log(xs), np.log(ys)
    slopes = np.diff(ly) / np.diff(lx)
    segment = np.clip(np.searchsorted(lx, np.log(x)) - 1, 0, len(slopes) - 1)
    return np.exp(ly[segment] + slopes[segment] * (np.log(x) - lx[segment]))


def _own_node(entry: dict, source_node: int, node, value) -> np.ndarray:
    """`value` where the entry may be used: at every node, or (own_node_only) at its source's node alone, NaN
    elsewhere, so that the other sources alone make the band there."""
    if entry.get("own_node_only"):
        return np.where(np.asarray(node) == source_node, value, np.nan)
    return value


def _band(values: list) -> Band:
    """The minimum and maximum over the sources (NaN: a source not used at that point)."""
    stacked = np.stack(np.broadcast_arrays(*values))
    return Band(np.nanmin(stacked, axis=0), np.nanmax(stacked, axis=0))


def _check_positive(origin: str, what: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise SpecError(f"{origin}: {what} = {value!r}; allowed: a finite number > 0")


def _check_points(origin: str, entry: dict, key: str) -> None:
    points = entry[key]
    where = f"{entry.get('source')} {entry.get('action', entry.get('kind', 'sram'))} {key}"
    if not isinstance(points, list) or not points:
        raise SpecError(f"{origin}: {where} is {points!r}; allowed: a non-empty list of [x, value] pairs")
    for pair in points:
        if not isinstance(pair, list) or len(pair) != 2:
            raise SpecError(f"{origin}: {where} has {pair!r}; allowed: [x, value] pairs")
        for value in pair:
            _check_positive(origin, where, value)
    xs = [pair[0] for pair in points]
    if xs != sorted(set(xs)):
        raise SpecError(f"{origin}: {where} x values {xs} are not strictly increasing")


class Technology:
    """The table, validated on load: every entry's source exists, every number is positive and finite."""

    def __init__(self, data: dict, origin: str = "technology table"):
        self.origin = origin
        try:
            self.sources = data["sources"]
            scaling = data["scaling"]
            self.nodes = tuple(int(n) for n in scaling["nodes_nm"])
            self._area45 = dict(zip(self.nodes, (float(a) for a in scaling["area_from_45"]), strict=True))
            vdd = float(scaling["vdd_v"])
            self._energy = dict(zip(self.nodes, (a * vdd * vdd + b * vdd + c for a, b, c in scaling["energy_poly"]),
                                    strict=True))
            self.logic = data["logic"]
            self.sram = data["sram"]
            self.sram_cacti = data.get("sram_cacti", [])
            self.dram_entries = data["dram"]
            self.nand2_entries = data.get("nand2", [])
            self.overhead = tuple(float(x) for x in data["assumptions"]["control_overhead"])
        except (KeyError, TypeError, ValueError) as exc:
            raise SpecError(f"{origin}: missing or malformed entry ({type(exc).__name__}: {exc})") from None
        #: voltage, clock, clock-tree and idle-PE energy, banking (codesign/technology_limits.py)
        self.limits = Limits.parse(origin, data, self.nodes, self.sources)
        for name, source in self.sources.items():
            if not isinstance(source, dict) or not str(source.get("cite", "")).strip():
                raise SpecError(f"{origin}: source {name!r} has no cite; every source says where its numbers are from")
            if "node_nm" in source and source["node_nm"] not in self.nodes:
                raise SpecError(f"{origin}: source {name!r} is at node_nm={source['node_nm']!r}, not a node of the "
                                f"scaling table; allowed: {', '.join(str(n) for n in self.nodes)}")
        for entry in self.nand2_entries:
            if "node_nm" not in self.sources.get(entry.get("source"), {}):
                raise SpecError(f"{origin}: NAND2 entry {entry} names no source with a node; allowed: "
                                f"{', '.join(n for n, s in self.sources.items() if 'node_nm' in s)}")
            _check_positive(origin, f"{entry['source']} NAND2 area_um2", entry.get("area_um2"))
        for entry in [*self.logic, *self.sram, *self.sram_cacti, *self.dram_entries]:
            if entry.get("source") not in self.sources:
                raise SpecError(f"{origin}: entry {entry} names no known source; allowed: {', '.join(self.sources)}")
            for key in ("points", "area", "read", "write", "area_um2", "leakage_nw", "access_ns"):
                if key in entry:
                    _check_points(origin, entry, key)
            for key in ("pj_per_bit", "exponent", "leak_pj_per_cycle_at_1ghz"):
                if key in entry:
                    _check_positive(origin, f"{entry.get('source')} {key}", entry[key])
        for entry in self.sram_cacti:
            if entry.get("node_nm") not in self.nodes:
                raise SpecError(f"{origin}: a CACTI entry is at node_nm={entry.get('node_nm')!r}; allowed: "
                                f"{', '.join(str(n) for n in self.nodes)}")
        for node, value in [*self._area45.items(), *self._energy.items()]:
            if not (math.isfinite(value) and value > 0):
                raise SpecError(f"{origin}: scaling factor at {node} nm is {value}; allowed: > 0")
        if len(self.overhead) != 2 or not 0 < self.overhead[0] <= self.overhead[1] or \
                not all(math.isfinite(x) for x in self.overhead):
            raise SpecError(f"{origin}: control_overhead={list(self.overhead)}; allowed: [low, high] with "
                            "0 < low <= high")
        for entry in self.logic:
            if entry["action"] not in LOGIC_ACTIONS:
                raise SpecError(f"{origin}: logic action {entry['action']!r} is unknown; allowed: "
                                f"{', '.join(LOGIC_ACTIONS)}")
            if len(entry["points"]) == 1 and "exponent" not in entry:
                raise SpecError(f"{origin}: {entry['action']} from {entry['source']} has one point and no exponent")
        self.dram_kinds = tuple(dict.fromkeys(e["kind"] for e in self.dram_entries))

    @classmethod
    def load(cls, path: Path | None = None) -> Technology:
        path = Path(path or TABLE)
        try:
            data = read_toml(path)
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise SpecError(f"{path}: not a readable technology table ({type(exc).__name__}: {exc})") from None
        return cls(data, str(path))

    # ------------------------------------------------------------ nodes
    def check_node(self, node: int) -> int:
        if node not in self.nodes:
            raise SpecError(f"node={node} nm is not in the scaling table; allowed: "
                            f"{', '.join(str(n) for n in self.nodes)} (no interpolation between nodes)")
        return node

    def _node_of(self, source: str) -> int:
        return int(self.sources[source]["node_nm"])

    def _lookup(self, table: dict[int, float], node) -> np.ndarray:
        """table[node] for every element of `node` (listed nodes only: KeyError otherwise)."""
        keys = np.array(sorted(table))
        node = np.asarray(node)
        index = np.clip(np.searchsorted(keys, node), 0, len(keys) - 1)
        if not np.all(keys[index] == node):
            raise KeyError(f"node(s) {sorted(set(np.atleast_1d(node[keys[index] != node]).tolist()))} not listed")
        return np.array([table[k] for k in keys])[index]

    def energy_factor(self, source_node: int, node) -> np.ndarray:
        """Energy per operation at `node` over that at `source_node` (both listed)."""
        return self._lookup(self._energy, node) / self._energy[source_node]

    def area_factor(self, source_node: int, node) -> np.ndarray:
        """Area at `node` over that at `source_node` (both listed)."""
        return self._lookup(self._area45, node) / self._area45[source_node]

    # ------------------------------------------------------------ logic
    def _logic(self, action: str, bits, node, key: str) -> Band:
        values = []
        for entry in (e for e in self.logic if e["action"] == action and key in e):
            scale = self.energy_factor if key == "points" else self.area_factor
            source_node = self._node_of(entry["source"])
            values.append(_own_node(entry, source_node, node,
                                    _loglog(entry[key], bits, entry.get("exponent")) * scale(source_node, node)))
        if not values:
            raise SpecError(f"{self.origin}: no {key} figure for {action}")
        return _band(values)

    def energy(self, action: str, bits, node) -> Band:
        """pJ of one `action` (multiply, add, compare; register: per bit) on `bits`-wide operands at `node`."""
        return self._logic(action, bits, node, "points")

    def area(self, action: str, bits, node) -> Band:
        """µm² of one unit doing `action` on `bits`-wide operands at `node` (register: per bit)."""
        return self._logic(action, bits, node, "area")

    def multiply(self, a_bits, b_bits, node, what: str = "energy") -> Band:
        """An a × b multiplier, sized as a square one of sqrt(a·b) bits."""
        bits = np.sqrt(np.asarray(a_bits, dtype=float) * np.asarray(b_bits, dtype=float))
        return (self.energy if what == "energy" else self.area)("multiply", bits, node)

    def logic_leakage(self, node) -> Band:
        """Leakage of logic, nW per µm², from the sources that give one (pJ per cycle at 1 GHz = mW; over their
        area); scaled as energy per operation over area (the density of a fixed circuit's leakage power)."""
        densities = []
        for entry in (e for e in self.logic if "leak_pj_per_cycle_at_1ghz" in e):
            (bits, area), = entry["area"]
            density = entry["leak_pj_per_cycle_at_1ghz"] * 1e6 / area  # pJ/ns = mW; mW/µm² → nW/µm²: × 1e6
            src = self._node_of(entry["source"])
            densities.append(density * self.energy_factor(src, node) / self.area_factor(src, node))
        stacked = np.broadcast_arrays(*densities)
        return Band(np.minimum.reduce(stacked), np.maximum.reduce(stacked))

    def nand2_area(self, node) -> Band:
        """µm² of one NAND2 gate equivalent at `node`: each library's NAND2 scaled from its own node."""
        values = [float(e["area_um2"]) * self.area_factor(self._node_of(e["source"]), node) for e in self.nand2_entries]
        if not values:
            raise SpecError(f"{self.origin}: no NAND2 cell areas ([[nand2]]); the synthesis-based area needs them")
        stacked = np.broadcast_arrays(*values)
        return Band(np.minimum.reduce(stacked), np.maximum.reduce(stacked))

    # ------------------------------------------------------------ memories
    def sram_read(self, size_kb, node) -> Band:
        """pJ per 64-bit read of an SRAM of `size_kb` at `node`."""
        return self._sram("read", size_kb, node)

    def sram_write(self, size_kb, node) -> Band:
        """pJ per 64-bit write: CACTI's write figures, and the reads of the sources that give no write."""
        return self._sram("write", size_kb, node)

    def _sram(self, key: str, size_kb, node) -> Band:
        values = []
        for entry in self.sram:
            source_node = self._node_of(entry["source"])
            value = _loglog(entry.get(key, entry["read"]), size_kb, None) * self.energy_factor(source_node, node)
            values.append(_own_node(entry, source_node, node, value))
        for entry in self.sram_cacti:
            values.append(_loglog(entry.get(key, entry["read"]), size_kb, None)
                          * self.energy_factor(int(entry["node_nm"]), node))
        return _band(values)

    def sram_area(self, size_kb, node) -> Band:
        """µm² of an SRAM of `size_kb` at `node` (CACTI entries, scaled by area from the node they were run at)."""
        return self._cacti("area_um2", size_kb, node, self.area_factor)

    def sram_access_ns(self, size_kb, node) -> Band:
        """ns of one access to an SRAM of `size_kb` at `node` (CACTI entries; scaled as a fixed circuit's delay,
        by the nodes' f_max ratio: codesign/technology_limits.py)."""
        return self._cacti("access_ns", size_kb, node, self.limits.delay_factor)

    def sram_leakage(self, size_kb, node) -> Band:
        """nW of leakage of an SRAM of `size_kb` at `node` (CACTI entries; scaled as logic leakage power is)."""
        def factor(src, node):
            return self.energy_factor(src, node)  # a fixed array's leakage power: as energy per operation
        return self._cacti("leakage_nw", size_kb, node, factor)

    def _cacti(self, key: str, size_kb, node, factor) -> Band:
        values = [_loglog(entry[key], size_kb, None) * factor(int(entry["node_nm"]), node)
                  for entry in self.sram_cacti if key in entry]
        if not values:
            raise SpecError(f"{self.origin}: no SRAM {key} entries ([[sram_cacti]])")
        stacked = np.broadcast_arrays(*values)
        return Band(np.minimum.reduce(stacked), np.maximum.reduce(stacked))

    def dram(self, kind: str) -> Band:
        """pJ per bit moved to or from DRAM of `kind` (not scaled with the logic node)."""
        values = [float(e["pj_per_bit"]) for e in self.dram_entries if e["kind"] == kind]
        if not values:
            raise SpecError(f"dram={kind!r} is not in the technology table; allowed: {', '.join(self.dram_kinds)}")
        return Band(np.float64(min(values)), np.float64(max(values)))


@functools.lru_cache(maxsize=1)
def default() -> Technology:
    """The shipped table."""
    return Technology.load()


def _floats(origin: str, data: dict, section: str, key: str, length: int | None = None) -> np.ndarray:
    """data[section][key] as a float array of positive numbers (of `length`, when given); SpecError naming both."""
    table = data.get(section)
    if not isinstance(table, dict):
        found = "missing" if table is None else f"{table!r}"
        raise SpecError(f"{origin}: [{section}] is {found}; allowed: a table")
    values = table.get(key)
    if not isinstance(values, list) or not values or (length is not None and len(values) != length):
        want = f"{length} numbers" if length is not None else "a non-empty list of numbers"
        raise SpecError(f"{origin}: [{section}] {key} is {values!r}; allowed: {want}")
    for value in values:
        _check_positive(origin, key, value)
    return np.array(values, dtype=float)


@dataclass(frozen=True)
class GateCalibration:
    """NAND2 gate equivalents of the RTL units, from codesign/rtl_gates.toml (written by `python -m codesign synth
    --write-calibration`): the MAC cell and the score lane by accumulator width (linear between the synthesised
    widths), one EXP2 lane, one rescale lane, one divider, and the array's overhead over its cells (its largest
    synthesised array's GE over rows × cols × the wrapping MAC cell's: skew registers in, unused edge outputs out)."""

    acc_bits: np.ndarray
    mac_wrap: np.ndarray
    mac_saturate: np.ndarray
    score_acc_bits: np.ndarray
    score: np.ndarray
    exp2: float
    rescale: float
    divider: float
    array_overhead: float
    command: str
    origin: str

    @classmethod
    def load(cls, path: Path | None = None) -> GateCalibration:
        path = Path(path or GATES)
        origin = str(path)
        try:
            data = read_toml(path)
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise SpecError(f"{path}: not a readable gate calibration ({type(exc).__name__}: {exc}); "
                            "`python -m codesign synth --write-calibration` writes it") from None
        try:
            bits = _floats(origin, data, "mac", "acc_bits")
            score_bits = _floats(origin, data, "score", "acc_bits")
            for name, values in (("[mac] acc_bits", bits), ("[score] acc_bits", score_bits)):
                if list(values) != sorted(set(values)):
                    raise SpecError(f"{origin}: {name} {values.tolist()} are not strictly increasing")
            wrap = _floats(origin, data, "mac", "wrap", len(bits))
            array_rows = _floats(origin, data, "array", "rows")
            n = len(array_rows)
            array_bits = _floats(origin, data, "array", "acc_bits", n)
            outside = sorted({int(b) for b in array_bits if not bits[0] <= b <= bits[-1]})
            if outside:
                raise SpecError(f"{origin}: [array] acc_bits {outside} are outside [mac] acc_bits; allowed: "
                                f"{bits[0]:g}..{bits[-1]:g}")
            shapes = zip(array_rows, _floats(origin, data, "array", "cols", n), array_bits,
                         _floats(origin, data, "array", "ge", n), strict=True)
            rows, cols, acc, ge = max(shapes, key=lambda shape: shape[0] * shape[1])
            for unit in ("exp2", "rescale", "divider"):
                _check_positive(origin, f"{unit} ge", data[unit]["ge"])
            return cls(bits, wrap, _floats(origin, data, "mac", "saturate", len(bits)), score_bits,
                       _floats(origin, data, "score", "ge", len(score_bits)), exp2=float(data["exp2"]["ge"]),
                       rescale=float(data["rescale"]["ge"]), divider=float(data["divider"]["ge"]),
                       array_overhead=ge / (rows * cols * float(np.interp(acc, bits, wrap))),
                       command=str(data.get("command", "")), origin=origin)
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, SpecError):
                raise
            raise SpecError(f"{origin}: missing or malformed entry ({type(exc).__name__}: {exc})") from None

    def _at(self, what: str, bits, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        bits = np.asarray(bits, dtype=float)
        if np.any((bits < xs[0]) | (bits > xs[-1])):
            outside = sorted(set(np.atleast_1d(bits[(bits < xs[0]) | (bits > xs[-1])]).astype(int).tolist()))
            raise SpecError(f"acc_bits {outside} is outside the {what} gate calibration's {xs[0]:g}..{xs[-1]:g} "
                            f"({self.origin})")
        return np.interp(bits, xs, ys)

    def mac(self, acc_bits, overflow="wrap") -> np.ndarray:
        """GE of one MAC cell of `acc_bits` ("wrap" or "saturate", broadcast)."""
        saturate = np.asarray(overflow) == "saturate"
        return np.where(saturate, self._at("MAC", acc_bits, self.acc_bits, self.mac_saturate),
                        self._at("MAC", acc_bits, self.acc_bits, self.mac_wrap))

    def score_lane(self, acc_bits) -> np.ndarray:
        """GE of one score lane scaling an `acc_bits`-wide accumulator."""
        return self._at("score", acc_bits, self.score_acc_bits, self.score)


@functools.lru_cache(maxsize=1)
def default_gates() -> GateCalibration:
    """The shipped gate calibration."""
    return GateCalibration.load()
