"""The head engine's divider bank as RTL: D Dividers (divider.py) that turn a tile's r·d output accumulators into
its int16 outputs and each row's shift g, in waves of D elements walked row-major (lane_walker.walk), written into
the O memory (values) and the shift memory (one byte per row). The bank holds its own copy of the tile's
accumulators, l, row0 and row count (the O buffer's second tile, codesign/cycles.py's double O buffer), so it runs
beside the next tile's steps.

`take` (in the cycle of the tile's last P·V fold's done, when `ready`): the bank copies A (as the softmax unit
forwards it, that fold's partials included), l, row0 and tile_rows, and the peak pass begins: every row's register
takes |A| at column 0 (forwarded) in the take cycle and the max of itself and |A| at column c (the copy) in the
c-th cycle after, so after d cycles each row's register holds its peak |A|, from which its dividers derive g
(divider.py). In the next cycle the first wave starts (divider u on element u: row u // d, column u % d), and each
wave's done starts the next (every lane D elements on) while one has work; a divider starts only where its element
is inside the tile. `wave_done` is divider 0's done (every lane of a wave starts together and has the same latency,
and lane 0 is always inside the tile); in that cycle each live lane writes its quotient at (row0 + row)·stride +
column, the lane at column 0 its row's g at row0 + row. `finished` is the tile's last wave's done; `ready` says a
take may come this cycle (idle, or finishing); `busy` is the bank's busy cycles as the model counts them (d for the
peak pass, div_latency per wave).
"""

from __future__ import annotations

from amaranth.hdl import Array, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from codesign.datapath import OUTPUT_ACC_BITS
from codesign.rtl.divider import L_BITS, OUT_BITS, SHIFT_BITS, Divider
from codesign.rtl.lane_walker import walk
from codesign.rtl.select import select


class DividerBank(wiring.Component):
    """`dividers` Dividers of `latency` cycles over tiles of up to R rows of heads up to seq_max × dim_max."""

    def __init__(self, dividers: int, latency: int, rows: int, seq_max: int, dim_max: int) -> None:
        self.dividers, self.latency, self.rows, self.stride = dividers, latency, rows, dim_max
        super().__init__({
            "take": In(1),
            "dim": In(range(dim_max + 1)),
            "tile_rows": In(range(rows + 1)),
            "row0": In(range(seq_max + rows + 1)),
            "acc": In(signed(OUTPUT_ACC_BITS)).array(rows, dim_max),
            "l": In(unsigned(L_BITS)).array(rows),
            "wave_done": Out(1),
            "finished": Out(1),
            "ready": Out(1),
            "busy": Out(1),
            "o_addr": Out(range(seq_max * dim_max)).array(dividers),
            "o_data": Out(signed(OUT_BITS)).array(dividers),
            "o_en": Out(1).array(dividers),
            "s_addr": Out(range(seq_max)).array(dividers),
            "s_data": Out(unsigned(SHIFT_BITS)).array(dividers),
            "s_en": Out(1).array(dividers),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        D, R, dim = self.dividers, self.rows, self.dim
        dividers = [Divider(self.latency) for _ in range(D)]
        for u, divider in enumerate(dividers):
            m.submodules[f"divider_{u}"] = divider
        # the taken tile: its accumulators, l, first row and rows
        held = [[Signal(signed(OUTPUT_ACC_BITS), name=f"held_a_{i}_{c}") for c in range(self.stride)]
                for i in range(R)]
        held_l = [Signal(unsigned(L_BITS), name=f"held_l_{i}") for i in range(R)]
        row0, r = Signal.like(self.row0, name="held_row0"), Signal.like(self.tile_rows, name="held_rows")
        with m.If(self.take):
            m.d.sync += [*(held[i][c].eq(self.acc[i][c]) for i in range(R) for c in range(self.stride)),
                         *(held_l[i].eq(self.l[i]) for i in range(R)), row0.eq(self.row0), r.eq(self.tile_rows)]
        l = Array(held_l)
        # the lanes' positions (row, column) in the wave in flight, row-major over the tile's r × d
        lane_row = [Signal(range(R + D + 2), name=f"div_row_{u}") for u in range(D)]
        lane_col = [Signal(range(self.stride + 1), name=f"div_col_{u}") for u in range(D)]
        col = Signal(range(self.stride + 1))  # the peak pass's next column
        first_wave, next_wave, peak_valid = Signal(), Signal(), Signal()
        following = [walk(lane_row[u], lane_col[u], D, dim) for u in range(D)]  # the next wave's positions
        more = following[0][0] < r
        m.d.comb += self.wave_done.eq(dividers[0].done)
        with m.FSM(name="bank"):
            with m.State("IDLE"):
                m.d.comb += self.ready.eq(1)
                self._take(m, col)
            with m.State("PEAK"):  # columns 1..d−1 of the copy, then the first wave
                m.d.comb += self.busy.eq(1)
                with m.If(col < dim):
                    m.d.comb += peak_valid.eq(1)
                    m.d.sync += col.eq(col + 1)
                with m.Else():
                    m.d.comb += first_wave.eq(1)
                    m.next = "WAVES"
            with m.State("WAVES"):
                m.d.comb += self.busy.eq(~self.wave_done)
                with m.If(self.wave_done & more):
                    m.d.comb += [next_wave.eq(1), self.busy.eq(1)]
                with m.Elif(self.wave_done):
                    m.d.comb += [self.finished.eq(1), self.ready.eq(1)]
                    m.next = "IDLE"
                    self._take(m, col)
        # the peak pass: each row's max |A| over the columns walked so far (column 0 forwarded in the take cycle)
        peaks = [Signal(unsigned(OUTPUT_ACC_BITS), name=f"peak_{i}") for i in range(R)]
        for i, peak in enumerate(peaks):
            value = Mux(self.take, self.acc[i][0], Array(held[i])[col])
            magnitude = Signal(unsigned(OUTPUT_ACC_BITS), name=f"peak_in_{i}")
            m.d.comb += magnitude.eq(Mux(value < 0, -value, value))
            with m.If(self.take):
                m.d.sync += peak.eq(magnitude)
            with m.Elif(peak_valid & (magnitude > peak)):
                m.d.sync += peak.eq(magnitude)
        peak_of = Array(peaks)

        starting = first_wave | next_wave
        for u, divider in enumerate(dividers):
            row = Mux(first_wave, u // dim, following[u][0])
            column = Mux(first_wave, u % dim, following[u][1])
            m.d.comb += [divider.acc.eq(select(m, held, row, column, f"divider_acc_{u}")), divider.l.eq(l[row]),
                         divider.peak.eq(peak_of[row]),
                         divider.start.eq(starting & (row < r))]
            with m.If(starting):
                m.d.sync += [lane_row[u].eq(row), lane_col[u].eq(column)]
            with m.If(self.wave_done):
                m.d.comb += [self.o_addr[u].eq((row0 + lane_row[u]) * self.stride + lane_col[u]),
                             self.o_data[u].eq(divider.out), self.o_en[u].eq(lane_row[u] < r),
                             self.s_addr[u].eq(row0 + lane_row[u]), self.s_data[u].eq(divider.shift),
                             self.s_en[u].eq((lane_row[u] < r) & (lane_col[u] == 0))]
        return m

    def _take(self, m: Module, col: Signal) -> None:
        """A take in this cycle: the copy (above), column 0's peak, and the pass on from column 1."""
        with m.If(self.take):
            m.d.comb += self.busy.eq(1)
            m.d.sync += col.eq(1)
            m.next = "PEAK"
