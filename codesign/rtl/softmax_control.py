"""The softmax unit's controller as RTL: the three passes of one key block, one after another, each issuing its
elements and then draining its unit's pipeline (codesign/rtl/softmax.py has the passes and their cycles).

  IDLE           on `start` (`begin`): latch `first` (the tile's first block), start the max pass's walk and issue
                 its first E scores in this same cycle
  MAX            E scores a cycle until the lane walker's `last`
  MAX_DRAIN      SCORE_LATENCY + ⌈log₂ k⌉ cycles: the last scores and the max tree (read at `level`)
  EXP            E elements a cycle over rows of k + 1 (the keys' p, then α)
  EXP_DRAIN      EXP_LATENCY cycles; at the end `commit` (the rows take their new max and growth), and in a tile's
                 first block `done` (no rescale)
  RESCALE_WAIT   until `go` (the window's P·V has added its last partials to the accumulators; not busy), then as
                 RESCALE in the same cycle
  RESCALE        E elements a cycle over rows of d + 1 (the accumulators, then l)
  RESCALE_DRAIN  RESCALE_LATENCY cycles, then `done`

`busy` is high from the `start` cycle to the last drain cycle; `done` pulses in the cycle after. `width` is the row
length the lane walker walks: the current pass's while it issues, the next pass's while a drain ends (`restart`).
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from codesign.datapath import EXP_LATENCY, RESCALE_LATENCY, SCORE_LATENCY


class SoftmaxControl(wiring.Component):
    """The pass sequencer of a softmax unit for blocks of up to `cols` keys and heads up to dim_max."""

    def __init__(self, cols: int, dim_max: int) -> None:
        self.depth = ceil_log2(cols)
        super().__init__({
            "start": In(1),
            "first": In(1),
            "keys": In(range(cols + 1)),
            "dim": In(range(dim_max + 1)),
            "level": In(range(self.depth + 1)),
            "last": In(1),
            "go": In(1),  # the rescale pass may issue (the accumulators have their last partials)
            "busy": Out(1),
            "done": Out(1),
            "block_first": Out(1),  # `first` as latched on start: the block is its tile's first
            "begin": Out(1),
            "restart": Out(1),
            "advance": Out(1),
            "width": Out(range(max(cols, dim_max) + 2)),
            "issue_max": Out(1),
            "issue_exp": Out(1),
            "issue_rescale": Out(1),
            "commit": Out(1),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        k, d = self.keys, self.dim
        drain = Signal(range(SCORE_LATENCY + self.depth + EXP_LATENCY + RESCALE_LATENCY + 1))
        m.d.sync += self.done.eq(0)

        def issue(flag, width, latency: int, then: str, stay: str) -> None:
            """A cycle of a pass: its lanes issue and move on; once the last element is in, the drain."""
            m.d.comb += [self.busy.eq(1), flag.eq(1), self.advance.eq(1), self.width.eq(width)]
            with m.If(self.last):
                m.d.sync += drain.eq(latency)
                m.next = then
            with m.Else():
                m.next = stay

        def draining(width) -> Signal:
            """A drain cycle: busy, the counter down; the returned condition is its last cycle."""
            m.d.comb += [self.busy.eq(1), self.width.eq(width)]
            m.d.sync += drain.eq(drain - 1)
            return drain == 0

        with m.FSM(name="softmax"):
            with m.State("IDLE"):
                m.d.comb += self.begin.eq(self.start)
                with m.If(self.start):
                    m.d.sync += self.block_first.eq(self.first)
                    issue(self.issue_max, k, SCORE_LATENCY + self.level - 1, "MAX_DRAIN", "MAX")
            with m.State("MAX"):
                issue(self.issue_max, k, SCORE_LATENCY + self.level - 1, "MAX_DRAIN", "MAX")
            with m.State("MAX_DRAIN"), m.If(draining(k + 1)):
                m.d.comb += self.restart.eq(1)
                m.next = "EXP"
            with m.State("EXP"):
                issue(self.issue_exp, k + 1, EXP_LATENCY - 1, "EXP_DRAIN", "EXP")
            with m.State("EXP_DRAIN"), m.If(draining(d + 1)):
                m.d.comb += self.commit.eq(1)
                with m.If(self.block_first):
                    m.d.sync += self.done.eq(1)
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += self.restart.eq(1)
                    m.next = "RESCALE_WAIT"
            with m.State("RESCALE_WAIT"):  # not busy until `go`, then the pass's first elements in this cycle
                m.d.comb += self.width.eq(d + 1)
                with m.If(self.go):
                    issue(self.issue_rescale, d + 1, RESCALE_LATENCY - 1, "RESCALE_DRAIN", "RESCALE")
            with m.State("RESCALE"):
                issue(self.issue_rescale, d + 1, RESCALE_LATENCY - 1, "RESCALE_DRAIN", "RESCALE")
            with m.State("RESCALE_DRAIN"), m.If(draining(d + 1)):
                m.d.sync += self.done.eq(1)
                m.next = "IDLE"
        return m
