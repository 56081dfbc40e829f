"""What a node allows at a clock: its supply voltage by the alpha-power law (so DVFS points exist), the dynamic
energy scale C·V² at that voltage, the fastest clock it allows, and the SRAM banks the array's operand bandwidth
needs with the clock their access time can meet (codesign/technology.toml's [voltage], [clock_energy], [idle_pe]
and [banking] sections; docs/codesign_energy.md says what each figure rests on).

Every function broadcasts over numpy arrays of operating points; the functions named `*_reasons` return, per point,
an empty string where the point is allowed and a one-line reason where it is not, so the explorer can mark it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from host.errors import SpecError

#: Bytes per Q15 word and per output accumulator entry (48 bits) the array takes from or gives to its buffers.
WORD_BYTES = 2
ACC_BYTES = 6


def _positive(origin: str, what: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise SpecError(f"{origin}: {what} = {value!r}; allowed: a finite number > 0")
    return float(value)


def _pair(origin: str, what: str, value, below_one: bool) -> tuple[float, float]:
    """[low, high] with 0 < low <= high and high < 1 (`below_one`) or <= 1."""
    bound = "< 1" if below_one else "<= 1"
    if not isinstance(value, list) or len(value) != 2:
        raise SpecError(f"{origin}: {what} = {value!r}; allowed: [low, high] with 0 < low <= high {bound}")
    low, high = (_positive(origin, what, v) for v in value)
    if not (low <= high and (high < 1 if below_one else high <= 1)):
        raise SpecError(f"{origin}: {what} = {value!r}; allowed: [low, high] with 0 < low <= high {bound}")
    return low, high


@dataclass(frozen=True)
class Limits:
    """The table's voltage, clock, clock-energy, idle-PE and banking figures, validated on load."""

    v_nom: dict[int, float]
    f_max_hz: dict[int, float]
    alpha: float
    v_th: float
    v_min: float
    clock_share: tuple[float, float]
    idle_fraction: tuple[float, float]
    port_bits: int
    min_bank_kb: float

    @classmethod
    def parse(cls, origin: str, data: dict, nodes: tuple[int, ...], sources: dict) -> Limits:
        try:
            volt, clock, idle, bank = data["voltage"], data["clock_energy"], data["idle_pe"], data["banking"]
            for section, keys in ((volt, ("source", "v_nom_source", "fo4_source", "cap_source")),
                                  (clock, ("low_source", "high_source")), (idle, ("source",)), (bank, ("source",))):
                for key in keys:
                    if section[key] not in sources:
                        raise SpecError(f"{origin}: {key} = {section[key]!r} names no known source; allowed: "
                                        f"{', '.join(sources)}")
            v_nom = volt["v_nom"]
            if not isinstance(v_nom, list) or len(v_nom) != len(nodes):
                raise SpecError(f"{origin}: [voltage] v_nom = {v_nom!r}; allowed: {len(nodes)} volts, one per node")
            v_nom = dict(zip(nodes, (_positive(origin, "v_nom", v) for v in v_nom), strict=True))
            alpha, v_th, v_min = (_positive(origin, k, volt[k]) for k in ("alpha", "v_th", "v_min"))
            if not v_th < v_min <= min(v_nom.values()):
                raise SpecError(f"{origin}: [voltage] v_th = {v_th}, v_min = {v_min}; allowed: v_th < v_min <= the "
                                f"lowest v_nom ({min(v_nom.values())})")
            fo4, stage, cap = (_positive(origin, k, volt[k]) for k in ("fo4_ps_per_nm", "stage_fo4", "f_cap_ghz"))
            f_max = {n: min(1e12 / (stage * fo4 * n), cap * 1e9) for n in nodes}
            port = bank["port_bits"]
            if isinstance(port, bool) or not isinstance(port, int) or port < 8 or port % 8:
                raise SpecError(f"{origin}: [banking] port_bits = {port!r}; allowed: a whole number of bytes >= 8")
            return cls(v_nom, f_max, alpha, v_th, v_min, _pair(origin, "[clock_energy] share", clock["share"], True),
                       _pair(origin, "[idle_pe] register_fraction", idle["register_fraction"], False),
                       port, _positive(origin, "[banking] min_bank_kb", bank["min_bank_kb"]))
        except (KeyError, TypeError) as exc:
            raise SpecError(f"{origin}: missing or malformed voltage/clock/banking entry "
                            f"({type(exc).__name__}: {exc})") from None

    # ------------------------------------------------------------ voltage and clock
    def _by_node(self, table: dict[int, float], node) -> np.ndarray:
        """table[node] for every element of `node` (SpecError naming a node the table does not list)."""
        keys = np.array(sorted(table))
        node = np.asarray(node)
        index = np.clip(np.searchsorted(keys, node), 0, len(keys) - 1)
        if not np.all(keys[index] == node):
            bad = sorted(set(np.atleast_1d(node[keys[index] != node]).tolist()))
            raise SpecError(f"node(s) {bad} nm are not in the voltage table; allowed: "
                            f"{', '.join(str(n) for n in table)}")
        return np.array([table[k] for k in keys], dtype=float)[index]

    def fmax(self, node) -> np.ndarray:
        """The fastest clock in Hz at `node` (at its nominal supply)."""
        return self._by_node(self.f_max_hz, node)

    def _speed(self, v) -> np.ndarray:
        """The alpha-power law's speed at supply v (any unit; only ratios are used)."""
        return (v - self.v_th) ** self.alpha / v

    def voltage(self, node, clock_hz) -> np.ndarray:
        """The lowest supply in V at which `node` runs `clock_hz`: the alpha-power law's inverse between v_min and
        the nominal supply (v_min below the clock v_min gives; NaN above f_max, which `clock_reasons` names)."""
        v_nom = self._by_node(self.v_nom, node)
        target = np.asarray(clock_hz, dtype=float) / self.fmax(node) * self._speed(v_nom)
        low, high = np.broadcast_arrays(np.full_like(target * v_nom, self.v_min), v_nom * np.ones_like(target))
        low, high = low.copy(), high.copy()
        for _ in range(60):  # bisection: the speed rises monotonically with V above v_th
            mid = (low + high) / 2
            fast = self._speed(mid) >= target
            high, low = np.where(fast, mid, high), np.where(fast, low, mid)
        v = np.where(self._speed(np.full_like(high, self.v_min)) >= target, self.v_min, high)
        return np.where(target > self._speed(v_nom) * (1 + 1e-12), np.nan, v)

    def energy_scale(self, node, clock_hz) -> np.ndarray:
        """Dynamic energy per action at `clock_hz` over that at the node's nominal supply: (V / v_nom)²."""
        return (self.voltage(node, clock_hz) / self._by_node(self.v_nom, node)) ** 2

    def clock_reasons(self, node, clock_hz) -> np.ndarray:
        """'' where `node` can run `clock_hz`, else the one-line reason."""
        clock, node = np.broadcast_arrays(np.asarray(clock_hz, dtype=float), np.asarray(node))
        f_max = self.fmax(node)
        over = clock > f_max * (1 + 1e-12)
        out = np.full(clock.shape, "", dtype=object)
        for i in map(tuple, np.argwhere(over)):  # the text only where a point is refused
            out[i] = f"clock {clock[i] / 1e6:g} MHz is above {node[i]:g} nm's f_max {f_max[i] / 1e6:.0f} MHz"
        return out.astype(str)

    def check_clock(self, node: int, clock_hz: float) -> float:
        """`clock_hz` if `node` can run it; SpecError naming both and the allowed range otherwise."""
        if str(self.clock_reasons(node, clock_hz)):
            raise SpecError(f"clock={clock_hz:g} Hz is above {node} nm's f_max; allowed: up to "
                            f"{float(self.fmax(node)):.4g} Hz at {node} nm (codesign/technology.toml [voltage])")
        return clock_hz

    def delay_factor(self, source_node: int, node) -> np.ndarray:
        """A fixed circuit's delay at `node` over that at `source_node`: the ratio of their f_max."""
        return self._by_node(self.f_max_hz, source_node) / self.fmax(node)

    # ------------------------------------------------------------ banking
    def banks(self, size_kb, bytes_per_cycle) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(banks, bank KB, port bits) of a buffer of `size_kb` that must give `bytes_per_cycle`: banks of
        port_bits-wide ports until the bandwidth is met, no bank under min_bank_kb (then the ports widen)."""
        size, need = np.asarray(size_kb, dtype=float), np.asarray(bytes_per_cycle, dtype=float)
        port_bytes = self.port_bits // 8
        wanted = np.maximum(np.ceil(need / port_bytes), 1)
        most = np.maximum(np.floor(size / self.min_bank_kb), 1)
        banks = np.minimum(wanted, most)
        ports = np.ceil(need / banks / port_bytes) * self.port_bits
        return banks, size / banks, np.maximum(ports, self.port_bits)


def operand_bytes_per_cycle(rows, cols) -> dict[str, np.ndarray]:
    """Bytes per cycle each buffer gives the array at full rate: a Q15 word per row from Q (the query tile's rows
    enter at the left edge), a word per column from K and from V (the keys' and values' columns at the top), and
    an accumulator entry per column to and from O (the P·V fold's outputs)."""
    rows, cols = np.asarray(rows, dtype=float), np.asarray(cols, dtype=float)
    return {"q": WORD_BYTES * rows, "k": WORD_BYTES * cols, "v": WORD_BYTES * cols, "o": ACC_BYTES * cols}


def sram_timing_reasons(tech, buffers_kb: tuple, rows, cols, node, clock_hz) -> np.ndarray:
    """'' where every banked Q, K, V and O buffer's access time (the fastest cell type's, CACTI) fits in a clock
    period, else a one-line reason naming the first buffer that does not."""
    period_ns = 1e9 / np.asarray(clock_hz, dtype=float)
    need = operand_bytes_per_cycle(rows, cols)
    shape = np.broadcast(period_ns, need["q"], np.asarray(node), *(np.asarray(b) for b in buffers_kb)).shape
    out = np.full(shape, "", dtype=object)
    for name, size in zip(("q", "k", "v", "o"), buffers_kb):
        _, bank_kb, _ = tech.limits.banks(size, need[name])
        access = tech.sram_access_ns(bank_kb, node).low
        bank_kb, access, period = np.broadcast_to(bank_kb, shape), np.broadcast_to(access, shape), \
            np.broadcast_to(period_ns, shape)
        for i in map(tuple, np.argwhere((access > period) & (out == ""))):  # text only where refused
            out[i] = (f"{name.upper()} buffer bank of {bank_kb[i]:g} KB takes {access[i]:.3g} ns, over the clock "
                      f"period of {period[i]:.3g} ns")
    return out.astype(str)
