"""The parallel-array datapath's compute as RTL, for gate counts: P copies (Datapath.arrays) of one datapath's
arithmetic, each an R×C systolic array (array.py), E score, EXP2 and rescale units (the softmax unit's lanes:
score.py, exp2.py, rescale.py) and D dividers (divider.py), every unit's ports brought out to the top so that
synthesis keeps them all (codesign synth's `parallel` unit).

The explorer counts a point of P arrays as P whole datapaths (codesign/explore.py: area and leakage once per copy)
and builds a datapath's logic from the units' gate counts (codesign/rtl_gates.toml): this puts the units side by
side in one netlist, so that the synthesised total can be held to P × (R·C-cell array + E·(score + EXP2 + rescale)
+ D·divider). It leaves out what has no RTL yet beyond the head engine's (the controller, the feeds, the buffers:
memories in silicon), as the calibration does.
"""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from codesign.datapath import OUTPUT_ACC_BITS
from codesign.rtl.array import SystolicArray
from codesign.rtl.divider import Divider
from codesign.rtl.exp2 import Exp2Unit
from codesign.rtl.rescale import RescaleUnit
from codesign.rtl.score import ScoreUnit
from host.checks import check_int


def datapath_units(rows: int, cols: int, lanes: int, dividers: int, acc_bits: int, latency: int) -> dict:
    """One datapath's arithmetic units by name: the array, `lanes` of each softmax lane's units, the dividers."""
    units = {"array": SystolicArray(rows, cols, acc_bits)}
    for u in range(lanes):
        units[f"score_{u}"] = ScoreUnit(acc_bits)
        units[f"exp2_{u}"] = Exp2Unit()
        units[f"rescale_{u}"] = RescaleUnit(OUTPUT_ACC_BITS)
    units.update({f"divider_{u}": Divider(latency) for u in range(dividers)})
    return units


class ParallelDatapath(wiring.Component):
    """`count` copies of a datapath's arithmetic units (rows × cols array, `lanes` softmax lanes, `dividers`
    dividers of `latency` cycles), each unit's ports a member of the top's signature (copy p's unit u as
    `p{p}_{u}`)."""

    def __init__(self, count: int, rows: int, cols: int, lanes: int, dividers: int, acc_bits: int = 40,
                 latency: int = 18) -> None:
        self.count = check_int("arrays", count, 1, 16)
        self.shape = (rows, cols, check_int("exp_lanes", lanes, 1, 4096), check_int("dividers", dividers, 1, 4096),
                      acc_bits, latency)
        self.copies = [datapath_units(*self.shape) for _ in range(self.count)]
        super().__init__({f"p{p}_{name}": Out(unit.signature) for p, units in enumerate(self.copies)
                          for name, unit in units.items()})

    def elaborate(self, platform) -> Module:
        m = Module()
        for p, units in enumerate(self.copies):
            for name, unit in units.items():
                m.submodules[f"p{p}_{name}"] = unit
                wiring.connect(m, wiring.flipped(getattr(self, f"p{p}_{name}")), unit)
        return m
