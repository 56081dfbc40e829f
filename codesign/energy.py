"""Energy per head and area of a datapath as low/high bands: the cycle model's action counts (codesign/cycles.py
`HeadCycles.traffic`) times the cited per-action figures (codesign/technology.py), plus leakage × area × latency;
area = array + score unit + softmax unit + dividers + buffers, times the table's control-overhead band.
docs/codesign_energy.md gives the sources and bands.

Every function broadcasts over numpy arrays of operating points. What each action is built from (docs/codesign.md
"Energy and area" has the table):
- a MAC: a 16×16 multiply, an accumulator-wide add, and the cell's registers (the accumulator and the two 16-bit
  operands it passes on), read once per cycle;
- buffer words: a 64-bit read or write (CACTI's figures for each; the other sources give reads, charged for both)
  of that buffer's size per 4 Q15 words (Q, K, V), per 48-bit accumulator (O, charged 6/8 of an access), per 2
  scores (the score buffer between the array and the softmax unit, two blocks of 32-bit scores);
- a score: a 32×16 multiply by M, a 32-bit add and register (the score unit); an EXP2: two 16-bit table entries, a
  16×16 interpolation multiply and a 32-bit add; a max: a 32-bit compare; a rescale: a 48×16 multiply and a 48-bit
  add; a division: div_latency cycles of a 32-bit subtract and 96 bits of registers;
- DRAM: 8 bits per byte × pJ per bit of the DRAM kind (HBM: from the device alone to the HBM level with its PHY
  and controller);
- idle PEs (given the cycles): each PE-cycle without a MAC burns the table's idle fraction of a busy cell's
  register energy; clock tree and control: the table's share of the logic's energy (the units and idle PEs);
- at a clock below the node's f_max (given the clock) the logic runs at the lower supply the alpha-power law
  allows, its energy × (V / v_nom)² (codesign/technology_limits.py); SRAM and DRAM keep their figures;
- the Q, K, V and O buffers are banked to the array's operand bandwidth: a word costs from one bank's access (the
  low end) to the whole buffer's (the high end: the wires to a far bank as costly as one big array's).
"""

from __future__ import annotations

import numpy as np

from codesign.datapath import OUTPUT_ACC_BITS, RECIPROCAL_LATENCY
from codesign.technology import Band, Technology
from codesign.technology_limits import operand_bytes_per_cycle
from host.q15 import BC

#: Bits of the table an EXP2 lane holds (64 entries of 16 bits: the contract's EXP2 table, docs/q15.md).
EXP_TABLE_BITS = 64 * 16
#: Registers of one iterative divider: partial remainder, divisor and quotient.
DIVIDER_REGISTER_BITS = 96
#: A reciprocal lane's restoring division of 2^(31+ℓ) by l' (codesign/reciprocal.py): partial remainder 33 bits,
#: divisor l' ≤ 2¹⁶ 17 bits, quotient 32 bits.
RECIPROCAL_REGISTER_BITS = 33 + 17 + 32
#: Its multiplier's pipeline (codesign/datapath.py PRODUCT_LATENCY): n (31 bits) and m (33), the product (64), the
#: int16 quotient.
PRODUCT_REGISTER_BITS = 31 + 33 + 64 + 16
#: The score buffer holds two key blocks of R × Bc 32-bit scores (the array writes one while the softmax unit reads
#: one); Bc is the contract's (host.q15.BC), whatever the array's width.
SCORE_BYTES = 4


def score_buffer_kb(rows, bc: int = BC) -> np.ndarray:
    return 2 * np.asarray(rows) * bc * SCORE_BYTES / 1024


def mac_cell(tech: Technology, acc_bits, node, what: str) -> Band:
    get = tech.energy if what == "energy" else tech.area
    return (tech.multiply(16, 16, node, what) + get("add", acc_bits, node)
            + get("register", 1, node) * (np.asarray(acc_bits) + 32))


def exp_lane(tech: Technology, node, what: str, table_bits: int) -> Band:
    get = tech.energy if what == "energy" else tech.area
    return get("register", 1, node) * table_bits + tech.multiply(16, 16, node, what) + get("add", 32, node)


def score_lane(tech: Technology, node, what: str) -> Band:
    get = tech.energy if what == "energy" else tech.area
    return tech.multiply(32, 16, node, what) + get("add", 32, node) + get("register", 1, node) * 32


def rescale_unit(tech: Technology, node, what: str) -> Band:
    get = tech.energy if what == "energy" else tech.area
    return tech.multiply(OUTPUT_ACC_BITS, 16, node, what) + get("add", OUTPUT_ACC_BITS, node)


def divider_cycle(tech: Technology, node, what: str) -> Band:
    get = tech.energy if what == "energy" else tech.area
    return get("add", 32, node) + get("register", 1, node) * DIVIDER_REGISTER_BITS


def reciprocal_cycle(tech: Technology, node, what: str) -> Band:
    """One cycle of a reciprocal lane's restoring division: a 33-bit subtract and its registers."""
    get = tech.energy if what == "energy" else tech.area
    return get("add", 33, node) + get("register", 1, node) * RECIPROCAL_REGISTER_BITS


def product_lane(tech: Technology, node, what: str) -> Band:
    """One quotient on a reciprocal lane: the 31 × 33-bit multiply by m, the 32-bit add of ⌊l'/2⌋, the pipeline's
    registers (the shifts by g − s and 31 + ℓ are not costed, as the iterative divider's normalisation is not)."""
    get = tech.energy if what == "energy" else tech.area
    return tech.multiply(31, 33, node, what) + get("add", 32, node) + get("register", 1, node) * PRODUCT_REGISTER_BITS


def reciprocal_lane(tech: Technology, node, what: str = "area") -> Band:
    """µm² of one reciprocal lane: its restoring divider and its multiplier."""
    return reciprocal_cycle(tech, node, what) + product_lane(tech, node, what)


def divider_energy(tech: Technology, traffic: dict, div_latency, divider, node) -> Band:
    """pJ of the divider stage over `traffic`: divisions × div_latency iterative-divider cycles (iterative and
    pipelined: a pipelined divider's L stages each do one cycle of a division), or on a reciprocal divider each row's
    RECIPROCAL_LATENCY reciprocal cycles and each quotient's product. `divider`: the kind (an array over points, or
    None for iterative)."""
    reciprocal = np.asarray(divider) == "reciprocal" if divider is not None else np.False_
    iterative = divider_cycle(tech, node, "energy") * (traffic["divisions"] * np.asarray(div_latency) * ~reciprocal)
    rows = np.asarray(traffic.get("reciprocals", 0)) * RECIPROCAL_LATENCY
    products = np.asarray(traffic["divisions"]) * reciprocal
    return iterative + reciprocal_cycle(tech, node, "energy") * rows + product_lane(tech, node, "energy") * products


def mac_registers(tech: Technology, acc_bits, node) -> Band:
    """pJ a busy MAC cell spends in its registers each cycle: the accumulator and the two 16-bit operands."""
    return tech.energy("register", 1, node) * (np.asarray(acc_bits) + 32)


def banked_read(tech: Technology, size_kb, bytes_per_cycle, node, key: str = "read") -> Band:
    """pJ per 64-bit access of a buffer of `size_kb` banked for `bytes_per_cycle`: from one bank's lowest figure to
    the whole buffer's highest (codesign/technology_limits.py `Limits.banks`)."""
    _, bank_kb, _ = tech.limits.banks(size_kb, bytes_per_cycle)
    get = tech.sram_read if key == "read" else tech.sram_write
    return Band(np.minimum(get(bank_kb, node).low, get(size_kb, node).low), get(size_kb, node).high)


def banked_area(tech: Technology, size_kb, bytes_per_cycle, node) -> Band:
    """µm² of a buffer of `size_kb` banked for `bytes_per_cycle`: between one array of its size and its banks'."""
    banks, bank_kb, _ = tech.limits.banks(size_kb, bytes_per_cycle)
    one, split = tech.sram_area(size_kb, node), tech.sram_area(bank_kb, node) * banks
    return Band(np.minimum(one.low, split.low), np.maximum(one.high, split.high))


def area(tech: Technology, rows, cols, acc_bits, exp_lanes, dividers, buffers_kb: tuple, node,
         reciprocal_lanes=0) -> dict[str, Band]:
    """µm² per unit ('array', 'score', 'softmax', 'dividers', 'buffers'), the logic and SRAM sums, and 'total' (both
    times the control-overhead band). `dividers`: iterative-divider stages; `reciprocal_lanes`: reciprocal lanes."""
    rows, cols = np.asarray(rows), np.asarray(cols)
    units = {
        "array": mac_cell(tech, acc_bits, node, "area") * (rows * cols),
        "score": score_lane(tech, node, "area") * cols,
        "softmax": (exp_lane(tech, node, "area", EXP_TABLE_BITS) + tech.area("compare", 32, node)
                    + rescale_unit(tech, node, "area")) * np.asarray(exp_lanes),
        "dividers": (divider_cycle(tech, node, "area") * np.asarray(dividers)
                     + reciprocal_lane(tech, node) * np.asarray(reciprocal_lanes)),
    }
    sram = tech.sram_area(score_buffer_kb(rows), node)
    need = operand_bytes_per_cycle(rows, cols)
    for name, size in zip(("q", "k", "v", "o"), buffers_kb):
        sram = sram + banked_area(tech, size, need[name], node)
    units["buffers"] = sram
    logic = units["array"] + units["score"] + units["softmax"] + units["dividers"]
    low, high = tech.overhead
    units["logic"] = logic
    units["total"] = (logic + sram) * Band(np.float64(low), np.float64(high))
    return units


PARTS = ("array", "buffers", "score", "softmax", "dividers", "idle", "clock", "dram")


def head_energy(tech: Technology, traffic: dict, rows, cols, acc_bits, div_latency, buffers_kb: tuple, node,
                dram_kind: str, clock_hz=None, cycles=None, divider=None) -> dict[str, Band]:
    """Dynamic pJ of one head per part (PARTS) and 'total'; `traffic` holds HeadCycles.traffic's counters as arrays
    over the points, `divider` the divider kind (None: iterative; `divider_energy`). With `cycles` (the head's, as
    arrays) idle PEs are charged; without, 'idle' is 0. With `clock_hz` the logic's energy is taken at the supply
    that clock allows (codesign/technology_limits.py); without, at the node's nominal supply (its f_max)."""
    q_kb, k_kb, v_kb, o_kb = buffers_kb
    word = 1 / 4  # a Q15 word: a quarter of a 64-bit access
    acc = OUTPUT_ACC_BITS / 64  # a 48-bit output accumulator: 6/8 of one
    scores = score_buffer_kb(rows)
    need = operand_bytes_per_cycle(rows, cols)

    def access(key: str, name: str, size) -> Band:
        return banked_read(tech, size, need[name], node, key)

    sram_words = (access("read", "q", q_kb) * (traffic["sram_read_q"] * word)
                  + access("write", "q", q_kb) * (traffic["sram_write_q"] * word)
                  + access("read", "k", k_kb) * (traffic["sram_read_k"] * word)
                  + access("write", "k", k_kb) * (traffic["sram_write_k"] * word)
                  + access("read", "v", v_kb) * (traffic["sram_read_v"] * word)
                  + access("write", "v", v_kb) * (traffic["sram_write_v"] * word)
                  + access("read", "o", o_kb) * (traffic["acc_reads"] * acc)
                  + access("write", "o", o_kb) * (traffic["acc_writes"] * acc)
                  + tech.sram_write(scores, node) * (traffic["score_writes"] / 2)  # two 32-bit scores per access
                  + tech.sram_read(scores, node) * (traffic["prob_reads"] / 2))
    if cycles is None:
        idle_pe_cycles = np.zeros_like(np.asarray(traffic["macs"], dtype=float))
    else:
        idle_pe_cycles = np.maximum(np.asarray(cycles, dtype=float) * np.asarray(rows) * np.asarray(cols)
                                    - traffic["macs"], 0)
    idle_low, idle_high = tech.limits.idle_fraction
    parts = {
        "array": mac_cell(tech, acc_bits, node, "energy") * traffic["macs"],
        "idle": mac_registers(tech, acc_bits, node) * Band(np.float64(idle_low), np.float64(idle_high))
        * idle_pe_cycles,
        "buffers": sram_words,
        "score": score_lane(tech, node, "energy") * traffic["score_writes"],
        "softmax": (exp_lane(tech, node, "energy", 32) * traffic["exp_evals"]
                    + tech.energy("compare", 32, node) * traffic["max_compares"]
                    + rescale_unit(tech, node, "energy") * traffic["rescale_mults"]),
        "dividers": divider_energy(tech, traffic, div_latency, divider, node),
        "dram": tech.dram(dram_kind) * (8 * (traffic["dram_read_q_bytes"] + traffic["dram_read_k_bytes"]
                                             + traffic["dram_read_v_bytes"] + traffic["dram_write_o_bytes"])),
    }
    logic = parts["array"] + parts["score"] + parts["softmax"] + parts["dividers"] + parts["idle"]
    low, high = tech.limits.clock_share
    parts["clock"] = logic * Band(np.float64(low / (1 - low)), np.float64(high / (1 - high)))
    if clock_hz is not None:
        scale = tech.limits.energy_scale(node, clock_hz)
        for name in ("array", "score", "softmax", "dividers", "idle", "clock"):
            parts[name] = parts[name] * scale
    total = parts["array"]
    for name in PARTS[1:]:
        total = total + parts[name]
    parts["total"] = total
    return parts


def leakage_w(tech: Technology, units: dict[str, Band], buffers_kb: tuple, rows, cols, node) -> Band:
    """Leakage power in W: the logic's area × the logic leakage density, plus each SRAM's own leakage."""
    sram = tech.sram_leakage(score_buffer_kb(rows), node)
    for size in buffers_kb:
        sram = sram + tech.sram_leakage(size, node)
    return (units["logic"] * tech.logic_leakage(node) + sram) * 1e-9
