"""`python -m codesign actions --node 45 [--acc-bits 40] [--array 32x32] [--exp-lanes 16] [--dividers 32]`: the
energy and area model's building blocks at one node, each as its low..high band from the cited table
(codesign/technology.toml): pJ per action, µm² per unit, and the datapath's area by unit. What the explorer
multiplies the cycle model's counts by, printed so a reader can check any figure by hand. Then the second area
source beside the first, unit by unit: the RTL's gate equivalents (codesign/rtl_gates.toml) × a NAND2's area."""

from __future__ import annotations

from codesign import energy
from codesign.explore import synthesis_area
from codesign.datapath import ACC_BITS_MAX, ACC_BITS_MIN, OUTPUT_ACC_BITS, Datapath, array_shape
from codesign.technology import Band, GateCalibration, Technology
from host.cli_common import Parser, integer


def _band(band: Band, scale: float = 1.0, digits: int = 3) -> str:
    return f"{float(band.low) * scale:.{digits}g} .. {float(band.high) * scale:.{digits}g}"


def table(tech: Technology, node: int, dp: Datapath) -> list[tuple[str, str, str]]:
    """(what, band, unit) lines: the actions, then the datapath's area by unit."""
    n, acc = node, dp.acc_bits
    mac_energy = energy.mac_cell(tech, acc, n, "energy")
    lines = [
        ("16x16 multiply", _band(tech.multiply(16, 16, n)), "pJ"),
        (f"{acc}-bit add", _band(tech.energy("add", acc, n)), "pJ"),
        ("register bit read", _band(tech.energy("register", 1, n), digits=2), "pJ"),
        (f"MAC cell ({acc}-bit accumulator, 32 operand bits passed on)", _band(mac_energy), "pJ"),
        ("score unit (32x16 multiply, add, register)", _band(energy.score_lane(tech, n, "energy")), "pJ"),
        ("EXP2 (two table entries, interpolation multiply, add)", _band(energy.exp_lane(tech, n, "energy", 32)),
         "pJ"),
        ("max compare (32-bit)", _band(tech.energy("compare", 32, n)), "pJ"),
        (f"rescale ({OUTPUT_ACC_BITS}x16 multiply, add)", _band(energy.rescale_unit(tech, n, "energy")), "pJ"),
        (f"division ({dp.div_latency} divider cycles)",
         _band(energy.divider_cycle(tech, n, "energy") * dp.div_latency), "pJ"),
    ]
    for kb in (2, dp.q_buffer_kb, dp.k_buffer_kb, dp.o_buffer_kb):
        lines.append((f"SRAM {kb:g} KB, 64-bit access", _band(tech.sram_read(kb, n)), "pJ"))
    for kind in tech.dram_kinds:
        lines.append((f"DRAM {kind}, per bit", _band(tech.dram(kind)), "pJ"))
    lines.append(("logic leakage", _band(tech.logic_leakage(n)), "nW/µm²"))
    lines.append(("MAC cell area", _band(energy.mac_cell(tech, acc, n, "area")), "µm²"))
    buffers = (dp.q_buffer_kb, dp.k_buffer_kb, dp.v_buffer_kb, dp.o_buffer_kb)
    units = energy.area(tech, dp.rows, dp.cols, acc, dp.exp_lanes, dp.dividers, buffers, n)
    for name in ("array", "score", "softmax", "dividers", "buffers", "total"):
        lines.append((f"area: {name}" + (" (× control overhead)" if name == "total" else ""),
                      _band(units[name], 1e-6), "mm²"))
    leak = energy.leakage_w(tech, units, buffers, dp.rows, dp.cols, n)
    lines.append(("leakage power of the datapath", _band(leak, 1e3), "mW"))
    return lines


def synthesis_table(tech: Technology, gates: GateCalibration, node: int, dp: Datapath) -> list[tuple[str, str, str]]:
    """(what, table band, synthesis band) lines in µm² per unit and mm² for the datapath: the table's area and the
    RTL's gate equivalents × the NAND2 band at the node (docs/codesign.md, "A second area source")."""
    n, acc, nand2 = node, dp.acc_bits, tech.nand2_area(node)

    def ge(value: float) -> str:
        return f"{value:,.0f} GE: {_band(nand2 * value)}"

    mac = gates.mac(acc, dp.overflow)
    lines = [("NAND2 area (one gate equivalent)", "", _band(nand2, digits=3) + " µm²"),
             (f"MAC cell ({acc}-bit {dp.overflow})", _band(energy.mac_cell(tech, acc, n, "area")), ge(mac)),
             (f"score lane ({acc}-bit sums)", _band(energy.score_lane(tech, n, "area")), ge(gates.score_lane(acc))),
             ("EXP2 lane", _band(energy.exp_lane(tech, n, "area", energy.EXP_TABLE_BITS)), ge(gates.exp2)),
             (f"rescale lane ({OUTPUT_ACC_BITS}-bit)", _band(energy.rescale_unit(tech, n, "area")), ge(gates.rescale)),
             ("divider", _band(energy.divider_cycle(tech, n, "area")), ge(gates.divider))]
    buffers = (dp.q_buffer_kb, dp.k_buffer_kb, dp.v_buffer_kb, dp.o_buffer_kb)
    units = energy.area(tech, dp.rows, dp.cols, acc, dp.exp_lanes, dp.dividers, buffers, n)
    synth = synthesis_area(tech, gates, units, dp.rows, dp.cols, acc, dp.overflow, dp.exp_lanes, dp.dividers, n)
    lines.append(("datapath logic, mm²", _band(units["logic"], 1e-6),
                  f"{float(synth['ge']):,.0f} GE: {_band(synth['logic'], 1e-6)}"))
    lines.append(("datapath total (with SRAM, × control overhead), mm²", _band(units["total"], 1e-6),
                  _band(synth["total"], 1e-6)))
    return lines


def main(argv: list[str]) -> int:
    tech = Technology.load()
    parser = Parser(prog="python -m codesign actions", description=__doc__)
    parser.add_argument("--node", type=integer("node", 1, 1000, allowed=tech.nodes), default=45,
                        help=f"technology node in nm: {', '.join(str(n) for n in tech.nodes)} (default 45)")
    parser.add_argument("--acc-bits", type=integer("acc-bits", ACC_BITS_MIN, ACC_BITS_MAX), default=40,
                        help="the array's accumulator width in bits (default 40)")
    parser.add_argument("--array", type=array_shape, default=(32, 32), help="array RxC (default 32x32)")
    parser.add_argument("--exp-lanes", type=integer("exp-lanes", 1, 4096), default=16,
                        help="EXP2 lanes of the softmax unit (default 16)")
    parser.add_argument("--dividers", type=integer("dividers", 1, 4096), default=32,
                        help="dividers for the final normalisation (default 32)")
    args = parser.parse_args(argv)
    tech.check_node(args.node)
    dp = Datapath(rows=args.array[0], cols=args.array[1], acc_bits=args.acc_bits, exp_lanes=args.exp_lanes,
                  dividers=args.dividers)
    print(f"{args.node} nm, low .. high over the sources (codesign/technology.toml); datapath "
          f"{dp.rows}x{dp.cols}, {dp.exp_lanes} exp lanes, {dp.dividers} dividers, buffers "
          f"{dp.q_buffer_kb:g}/{dp.k_buffer_kb:g}/{dp.v_buffer_kb:g}/{dp.o_buffer_kb:g} KB")
    for what, band, unit in table(tech, args.node, dp):
        print(f"  {what:<58} {band:>22} {unit}")
    gates = GateCalibration.load()
    print(f"area, µm² unless stated: the table (above) beside synthesis, gate equivalents × NAND2 area "
          f"({gates.command}; {gates.origin.rsplit('/', 1)[-1]})")
    for what, band, synth in synthesis_table(tech, gates, args.node, dp):
        print(f"  {what:<52} {band:>22}   {synth}")
    return 0


if __name__ == "__main__":  # `python -m codesign.actions` runs `python -m codesign actions`
    from codesign.__main__ import run_as

    run_as("actions")
