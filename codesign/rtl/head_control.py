"""The head engine's controller as RTL: codesign/rtl/head.py's order of stages as a state machine, and where the
head is (query tile row0, key block key0, the fold and the streamed index t). The divider bank works on a tile beside
the next tile's steps (divider_bank.py holds its own copy), so a tile waits for the bank only when the bank has not
finished the tile before (HOLD).

  IDLE, DONE  on `start` (`take`): the engine latches the head's parameters and clears its counters; QK_FEED next
  QK_FEED     QKᵀ's vectors t = 0..d−1 of the block (key0) for the tile (row0); QK_WAIT after the last
  QK_WAIT     until the array's done, in which cycle the softmax unit starts (`softmax_start`)
  SOFTMAX     until the softmax unit's done, in which cycle P·V's first vector goes in
  PV_FEED     the fold's vectors t = 0..k−1; PV_WAIT after the last
  PV_WAIT     until the array's done (`partial_add`), then the next fold, else the next block's QKᵀ, else (the
              tile's last fold) the divider bank takes the tile (`bank_take`: its copy of A, the softmax unit
              forwarding that fold's partials) when it is `bank_ready`, and the next tile's QKᵀ starts in the same
              cycle (DRAIN after the last tile); HOLD while the bank still works on the tile before
  HOLD        until the bank is ready, then as PV_WAIT's last fold: the take and the next tile (or DRAIN)
  DRAIN       until the bank has finished the last tile (`finishing`), then DONE

A feed request (`qk_*`, `pv_*`) names the vector to present this cycle; the feeds (qk_feed.py, pv_feed.py) turn it
into memory addresses and the array's operands. `array_busy` is the array's busy cycles as head.py counts them;
`running` is high from the first QKᵀ vector to the last tile's last wave's done.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class HeadControl(wiring.Component):
    """The stage sequencer of an R×C array's head engine for heads up to seq_max × dim_max."""

    def __init__(self, rows: int, cols: int, seq_max: int, dim_max: int) -> None:
        self.rows, self.cols = rows, cols
        self.folds_max = -(-dim_max // cols)
        row0, key0, t = range(seq_max + rows + 1), range(seq_max + cols + 1), range(max(dim_max, cols) + 1)
        super().__init__({
            "start": In(1),
            "seq": In(range(seq_max + 1)),  # the head's, as latched on `take`
            "dim": In(range(dim_max + 1)),
            "causal": In(1),
            "array_done": In(1),
            "softmax_done": In(1),
            "bank_ready": In(1),
            "bank_finished": In(1),
            "take": Out(1),
            "done": Out(1),
            "row0": Out(row0),
            "key0": Out(key0),
            "fold": Out(range(self.folds_max + 1)),
            "tile_rows": Out(range(rows + 1)),
            "block_keys": Out(range(cols + 1)),
            "qk_valid": Out(1), "qk_row0": Out(row0), "qk_key0": Out(key0), "qk_t": Out(t),
            "qk_rows": Out(range(rows + 1)), "qk_keys": Out(range(cols + 1)),
            "pv_valid": Out(1), "pv_fold": Out(range(self.folds_max + 1)), "pv_t": Out(t),
            "softmax_start": Out(1),
            "partial_add": Out(1),
            "bank_take": Out(1),
            "array_busy": Out(1),
            "running": Out(1),
            "finishing": Out(1),
        })

    def _tile_rows(self, row0_at):
        return Mux(self.seq - row0_at >= self.rows, self.rows, self.seq - row0_at)

    def _block_keys(self, key0_at):
        return Mux(self.seq - key0_at >= self.cols, self.cols, self.seq - key0_at)

    def elaborate(self, platform) -> Module:
        m = Module()
        C = self.cols
        t = Signal.like(self.qk_t)  # the streamed index of the fold being fed
        r, k = self._tile_rows(self.row0), self._block_keys(self.key0)
        m.d.comb += [self.tile_rows.eq(r), self.block_keys.eq(k)]
        key_end = Mux(self.causal, self.row0 + r, self.seq)  # the key after the tile's last

        with m.FSM(name="head") as fsm:
            with m.State("IDLE"):
                self._take_start(m, t)
            with m.State("QK_FEED"):
                self._feed_qk(m, t, self.row0, self.key0, t)
            with m.State("QK_WAIT"):
                m.d.comb += self.array_busy.eq(~self.array_done)
                with m.If(self.array_done):  # the scores are final: the softmax unit takes them in this cycle
                    m.d.comb += self.softmax_start.eq(1)
                    m.next = "SOFTMAX"
            with m.State("SOFTMAX"), m.If(self.softmax_done):
                self._feed_pv(m, t, 0, 0)
            with m.State("PV_FEED"):
                self._feed_pv(m, t, self.fold, t)
            with m.State("PV_WAIT"):
                m.d.comb += self.array_busy.eq(~self.array_done)
                with m.If(self.array_done):  # the fold's partials go into A; the next fold, block or tile's divisions
                    m.d.comb += self.partial_add.eq(1)
                    with m.If((self.fold + 1) * C < self.dim):
                        self._feed_pv(m, t, self.fold + 1, 0)
                    with m.Elif(self.key0 + C < key_end):
                        m.d.sync += self.key0.eq(self.key0 + C)
                        self._feed_qk(m, t, self.row0, self.key0 + C, 0)
                    with m.Else():  # the tile's last fold
                        self._hand_over(m, t)
            with m.State("HOLD"):
                self._hand_over(m, t)
            with m.State("DRAIN"), m.If(self.bank_finished):
                m.d.comb += self.finishing.eq(1)
                m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += self.done.eq(1)
                self._take_start(m, t)
        m.d.comb += self.running.eq(~fsm.ongoing("IDLE") & ~fsm.ongoing("DONE"))
        return m

    def _hand_over(self, m: Module, t: Signal) -> None:
        """The tile's accumulators to the divider bank when it is ready (else HOLD), and on: the next tile's block 0
        in the same cycle, or DRAIN after the last tile."""
        with m.If(self.bank_ready):
            m.d.comb += self.bank_take.eq(1)
            with m.If(self.row0 + self.rows < self.seq):
                m.d.sync += [self.row0.eq(self.row0 + self.rows), self.key0.eq(0)]
                self._feed_qk(m, t, self.row0 + self.rows, 0, 0)
            with m.Else():
                m.next = "DRAIN"
        with m.Else():
            m.next = "HOLD"

    def _feed_qk(self, m: Module, t: Signal, row0_at, key0_at, t_at) -> None:
        """Request QKᵀ's vector t_at for the tile at row0_at and the block at key0_at; QK_WAIT after the last."""
        m.d.comb += [self.qk_valid.eq(1), self.qk_row0.eq(row0_at), self.qk_key0.eq(key0_at), self.qk_t.eq(t_at),
                     self.qk_rows.eq(self._tile_rows(row0_at)), self.qk_keys.eq(self._block_keys(key0_at)),
                     self.array_busy.eq(1)]
        m.d.sync += t.eq(t_at + 1)
        with m.If(t_at == self.dim - 1):
            m.next = "QK_WAIT"
        with m.Else():
            m.next = "QK_FEED"

    def _feed_pv(self, m: Module, t: Signal, fold_at, t_at) -> None:
        """Request P·V's vector t_at of fold fold_at (the block at key0); PV_WAIT after the last."""
        m.d.comb += [self.pv_valid.eq(1), self.pv_fold.eq(fold_at), self.pv_t.eq(t_at), self.array_busy.eq(1)]
        m.d.sync += [t.eq(t_at + 1), self.fold.eq(fold_at)]
        with m.If(t_at == self.block_keys - 1):
            m.next = "PV_WAIT"
        with m.Else():
            m.next = "PV_FEED"

    def _take_start(self, m: Module, t: Signal) -> None:
        """On start: `take` (the engine latches the head's parameters); the first tile begins in the next cycle."""
        with m.If(self.start):
            m.d.comb += self.take.eq(1)
            m.d.sync += [self.row0.eq(0), self.key0.eq(0), t.eq(0)]
            m.next = "QK_FEED"
