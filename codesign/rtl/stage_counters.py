"""The head engine's cycle counters as RTL: per stage (array, softmax unit, dividers) the cycles it was busy, and the
head's cycles from its first QKᵀ vector to its last wave's done; `clear` (a head's start) sets them all to zero.
These are what codesign/cycles.py's stages report, so the tests hold the two to each other."""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

COUNTER_BITS = 32
STAGES = ("array", "softmax", "divider")


class StageCounters(wiring.Component):
    """One busy-cycle counter per stage of STAGES, and the head's cycle counter."""

    def __init__(self) -> None:
        super().__init__({
            "clear": In(1),
            **{f"{name}_busy": In(1) for name in STAGES},
            "running": In(1),  # from the first QKᵀ vector up to (not including) the last wave's done
            "finishing": In(1),  # the last wave's done
            **{f"{name}_cycles": Out(COUNTER_BITS) for name in STAGES},
            "cycles": Out(COUNTER_BITS),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        for name in STAGES:
            counter = getattr(self, f"{name}_cycles")
            m.d.sync += counter.eq(counter + getattr(self, f"{name}_busy"))
        m.d.sync += self.cycles.eq(self.cycles + (self.running & ~self.finishing))
        with m.If(self.clear):
            m.d.sync += [self.cycles.eq(0), *(getattr(self, f"{name}_cycles").eq(0) for name in STAGES)]
        return m
