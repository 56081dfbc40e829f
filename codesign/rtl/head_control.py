"""The head engine's controller as RTL: codesign/serial_windows.py's schedule as two state machines, the windows
(`head`) and the array's work within a window (`array`), and where each unit is in the head.

A head's steps (query tile row0, key block key0) run three at a time, one window each a step apart: in a window the
array runs the P·V of the step before (`pv_*`, its folds one after another) and then the QKᵀ of the step after
(`qk_*`), while the softmax unit runs the step's own passes (`sm_*`); the softmax unit's rescale pass waits until the
window's P·V has added its last partials (`rescale_go`). The first window has only step 0's QKᵀ, the last only the
last step's P·V. A window ends in the cycle both units are done, and the next begins in that same cycle (`begin`:
the three steps move on by one, the first P·V or QKᵀ vector goes in and the softmax unit starts), with `copy`: the
softmax unit copies the array's sums (the new step's scores) and its P (for the new P·V) and l.

  IDLE, DONE  on `start` (`take`): the engine latches the head's parameters and clears its counters; FIRST next
  FIRST       the first window begins (step 0's QKᵀ)
  RUN         windows; at a window's end, when its P·V was a tile's last, the divider bank takes the tile
              (`bank_take`, as the softmax unit forwards A) if it is `bank_ready`, else HOLD; after the last window,
              DRAIN
  HOLD        until the bank is ready, then the take and the next window (or DRAIN)
  DRAIN       until the bank has finished the last tile (`finishing`), then DONE

The array machine: FIN (the window's work done, or none), PV_FEED and PV_WAIT per fold (the fold's partials go into
A in its done cycle, `partial_add`), then QK_FEED and QK_WAIT. A feed request (`qk_*`, `pv_*`) names the vector to
present this cycle; the feeds (qk_feed.py, pv_feed.py) turn it into memory addresses and the array's operands. The
`sm_*` and `pv_*` geometry shows the new window's steps in a `begin` cycle; what ends the old window in that cycle
(the last partials, the take) uses the registers: `add_*`, `bank_*`. `array_busy` is the array's busy cycles as
codesign/gemm.py counts them; `running` is high from the first QKᵀ vector to the last tile's last wave's done.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class _Step:
    """A step's registers: whether there is one, its tile's first row and its block's first key."""

    def __init__(self, name: str, row0, key0) -> None:
        self.has = Signal(name=f"{name}_has")
        self.row0 = Signal(row0, name=f"{name}_row0")
        self.key0 = Signal(key0, name=f"{name}_key0")

    def values(self):
        return self.has, self.row0, self.key0


class HeadControl(wiring.Component):
    """The window sequencer of an R×C array's head engine for heads up to seq_max × dim_max."""

    def __init__(self, rows: int, cols: int, seq_max: int, dim_max: int) -> None:
        self.rows, self.cols = rows, cols
        self.folds_max = -(-dim_max // cols)
        self._row0, self._key0 = range(seq_max + rows + 1), range(seq_max + cols + 1)
        row0, key0, t = self._row0, self._key0, range(max(dim_max, cols) + 1)
        fold, r, k = range(self.folds_max + 1), range(rows + 1), range(cols + 1)
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
            "begin": Out(1),
            "copy": Out(1),
            "sm_row0": Out(row0), "sm_key0": Out(key0), "sm_rows": Out(r), "sm_keys": Out(k), "sm_first": Out(1),
            "softmax_start": Out(1),
            "rescale_go": Out(1),
            "qk_valid": Out(1), "qk_row0": Out(row0), "qk_key0": Out(key0), "qk_t": Out(t),
            "qk_rows": Out(r), "qk_keys": Out(k),
            "pv_valid": Out(1), "pv_fold": Out(fold), "pv_t": Out(t), "pv_key0": Out(key0), "pv_keys": Out(k),
            "pv_rows": Out(r),
            "partial_add": Out(1), "add_fold": Out(fold), "add_rows": Out(r), "add_first": Out(1),
            "bank_take": Out(1), "bank_row0": Out(row0), "bank_rows": Out(r),
            "array_busy": Out(1),
            "running": Out(1),
            "finishing": Out(1),
        })

    def _tile_rows(self, row0_at):
        return Mux(self.seq - row0_at >= self.rows, self.rows, self.seq - row0_at)

    def _block_keys(self, key0_at):
        return Mux(self.seq - key0_at >= self.cols, self.cols, self.seq - key0_at)

    def _after(self, step: _Step):
        """The step after `step` (has, row0, key0): the tile's next block, else the next tile's first, else none.
        A causal tile's blocks end at the block of its last row's own key."""
        has, row0, key0 = step.values()
        key_end = Mux(self.causal, row0 + self._tile_rows(row0), self.seq)
        next_block = key0 + self.cols < key_end
        next_tile = row0 + self.rows < self.seq
        return (has & (next_block | next_tile), Mux(next_block, row0, row0 + self.rows),
                Mux(next_block, key0 + self.cols, 0))

    def elaborate(self, platform) -> Module:
        m = Module()
        # the running window's steps (registers) and the view of them (the new window's in a `begin` cycle)
        pv, sm, qk = (_Step(name, self._row0, self._key0) for name in ("pv", "sm", "qk"))
        view = [_Step(f"{name}_view", self._row0, self._key0) for name in ("pv", "sm", "qk")]
        first = Signal()  # the FIRST state's begin: no P·V, no softmax, step 0's QKᵀ
        shifted = [sm.values(), qk.values(), self._after(qk)]
        initial = [(0, 0, 0), (0, 0, 0), (1, 0, 0)]
        for v, reg, new, init in zip(view, (pv, sm, qk), shifted, initial):
            for out, held, moved, start in zip(v.values(), reg.values(), new, init):
                m.d.comb += out.eq(Mux(first, start, Mux(self.begin, moved, held)))
                m.d.sync += held.eq(out)
        pv_view, sm_view, qk_view = view
        m.d.comb += [self.copy.eq(self.begin),
                     self.sm_row0.eq(sm_view.row0), self.sm_key0.eq(sm_view.key0),
                     self.sm_rows.eq(self._tile_rows(sm_view.row0)), self.sm_keys.eq(self._block_keys(sm_view.key0)),
                     self.sm_first.eq(sm_view.key0 == 0),
                     self.softmax_start.eq(self.begin & sm_view.has),
                     self.pv_key0.eq(pv_view.key0), self.pv_keys.eq(self._block_keys(pv_view.key0)),
                     self.pv_rows.eq(self._tile_rows(pv_view.row0)),
                     self.add_rows.eq(self._tile_rows(pv.row0)), self.add_first.eq(pv.key0 == 0),
                     self.bank_row0.eq(pv.row0), self.bank_rows.eq(self._tile_rows(pv.row0))]

        # within the window: the softmax unit done, the P·V's partials all added
        sm_fin, pv_clear = Signal(), Signal()
        array_fin, last_add = self._array(m, (pv, qk), (pv_view, qk_view))
        sm_fin_now = sm_fin | self.softmax_done
        m.d.comb += self.rescale_go.eq(pv_clear | last_add)
        with m.If(self.begin):
            m.d.sync += [sm_fin.eq(~sm_view.has), pv_clear.eq(~pv_view.has)]
        with m.Else():
            with m.If(self.softmax_done):
                m.d.sync += sm_fin.eq(1)
            with m.If(last_add):
                m.d.sync += pv_clear.eq(1)

        take_due = pv.has & (~sm.has | (sm.row0 != pv.row0))  # the window's P·V was its tile's last
        last_window = ~sm.has & ~qk.has
        with m.FSM(name="head") as fsm:
            with m.State("IDLE"):
                self._take_start(m)
            with m.State("FIRST"):
                m.d.comb += [first.eq(1), self.begin.eq(1)]
                m.next = "RUN"
            with m.State("RUN"), m.If(array_fin & sm_fin_now):
                with m.If(take_due & ~self.bank_ready):
                    m.next = "HOLD"
                with m.Else():
                    self._move_on(m, take_due, last_window)
            with m.State("HOLD"), m.If(self.bank_ready):
                self._move_on(m, 1, last_window)
            with m.State("DRAIN"), m.If(self.bank_finished):
                m.d.comb += self.finishing.eq(1)
                m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += self.done.eq(1)
                self._take_start(m)
        m.d.comb += self.running.eq(~fsm.ongoing("IDLE") & ~fsm.ongoing("DONE"))
        return m

    def _move_on(self, m: Module, take, last_window) -> None:
        """The window's end: the bank's take where due, and the next window (or DRAIN after the last)."""
        m.d.comb += self.bank_take.eq(take)
        with m.If(last_window):
            m.next = "DRAIN"
        with m.Else():
            m.d.comb += self.begin.eq(1)
            m.next = "RUN"

    def _array(self, m: Module, steps: tuple[_Step, _Step], views: tuple[_Step, _Step]):
        """The array's work in the window: the P·V folds of the step before, then the QKᵀ of the step after
        (`steps`: their registers; `views`: what a `begin` cycle's first vector of the new window feeds). Returns
        (the work is done by this cycle, the last partials go into A in this cycle)."""
        C = self.cols
        (pv, qk), (pv_new, qk_new) = steps, views
        t = Signal.like(self.qk_t)  # the streamed index of the vector to feed next
        fold = Signal.like(self.pv_fold)  # the fold being fed or awaited
        fin, last_add = Signal(), Signal()

        def start_work() -> None:
            """The new window's first vector (in a begin cycle), or nothing to do."""
            with m.If(self.begin):
                with m.If(pv_new.has):
                    self._feed_pv(m, t, fold, 0, 0, self._block_keys(pv_new.key0))
                with m.Elif(qk_new.has):
                    self._feed_qk(m, t, qk_new, 0)

        def finish() -> None:
            m.d.comb += fin.eq(1)
            m.next = "FIN"
            start_work()

        with m.FSM(name="array"):
            with m.State("FIN"):
                finish()
            with m.State("PV_FEED"):
                self._feed_pv(m, t, fold, fold, t, self._block_keys(pv.key0))
            with m.State("PV_WAIT"):
                m.d.comb += self.array_busy.eq(~self.array_done)
                with m.If(self.array_done):  # the fold's partials into A; the next fold, else the QKᵀ
                    m.d.comb += [self.partial_add.eq(1), self.add_fold.eq(fold)]
                    with m.If((fold + 1) * C < self.dim):
                        self._feed_pv(m, t, fold, fold + 1, 0, self._block_keys(pv.key0))
                    with m.Else():
                        m.d.comb += last_add.eq(1)
                        with m.If(qk.has):
                            self._feed_qk(m, t, qk, 0)
                        with m.Else():
                            finish()
            with m.State("QK_FEED"):
                self._feed_qk(m, t, qk, t)
            with m.State("QK_WAIT"):
                m.d.comb += self.array_busy.eq(~self.array_done)
                with m.If(self.array_done):  # the scores are in the array's shadow registers
                    finish()
        return fin, last_add

    def _feed_qk(self, m: Module, t: Signal, qk: _Step, t_at) -> None:
        """Request QKᵀ's vector t_at for the step `qk`; QK_WAIT after the last."""
        m.d.comb += [self.qk_valid.eq(1), self.qk_row0.eq(qk.row0), self.qk_key0.eq(qk.key0), self.qk_t.eq(t_at),
                     self.qk_rows.eq(self._tile_rows(qk.row0)), self.qk_keys.eq(self._block_keys(qk.key0)),
                     self.array_busy.eq(1)]
        m.d.sync += t.eq(t_at + 1)
        with m.If(t_at == self.dim - 1):
            m.next = "QK_WAIT"
        with m.Else():
            m.next = "QK_FEED"

    def _feed_pv(self, m: Module, t: Signal, fold: Signal, fold_at, t_at, keys) -> None:
        """Request P·V's vector t_at of fold fold_at; PV_WAIT after the last."""
        m.d.comb += [self.pv_valid.eq(1), self.pv_fold.eq(fold_at), self.pv_t.eq(t_at), self.array_busy.eq(1)]
        m.d.sync += [t.eq(t_at + 1), fold.eq(fold_at)]
        with m.If(t_at == keys - 1):
            m.next = "PV_WAIT"
        with m.Else():
            m.next = "PV_FEED"

    def _take_start(self, m: Module) -> None:
        """On start: `take` (the engine latches the head's parameters); the first window begins in the next cycle."""
        with m.If(self.start):
            m.d.comb += self.take.eq(1)
            m.next = "FIRST"
