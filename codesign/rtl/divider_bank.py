"""The head engine's divider bank as RTL: D Dividers (divider.py) that turn a tile's r·d output accumulators into
its int16 outputs and each row's shift g, in waves of D elements walked row-major (lane_walker.walk), written into
the O memory (values) and the shift memory (one byte per row).

Before the tile's first wave, the peak pass: in each cycle with `peak_valid`, every row's register takes the max of
itself (none with `peak_first`) and |A| at column `peak_col`; the controller walks the columns 0..d−1, one a cycle,
so after d cycles each row's register holds its peak |A|, from which its dividers derive g (divider.py).

`first_wave` starts the tile's first wave (divider u on element u: row u // d, column u % d), `next_wave` the wave
after the one just done (every lane D elements on); a divider starts only where its element is inside the tile
(row < tile_rows), reading A and l from the softmax unit at its row and column and the row's peak. `wave_done` is
divider 0's done (every lane of a wave starts together and has the same latency, and lane 0 is always inside the
tile); in that cycle each live lane writes its quotient at (row0 + row)·stride + column, the lane at column 0 its
row's g at row0 + row, and `more` says whether a next wave has work.
"""

from __future__ import annotations

from amaranth.hdl import Array, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from codesign.datapath import OUTPUT_ACC_BITS
from codesign.rtl.divider import L_BITS, OUT_BITS, SHIFT_BITS, Divider
from codesign.rtl.lane_walker import walk


class DividerBank(wiring.Component):
    """`dividers` Dividers of `latency` cycles over tiles of up to R rows of heads up to seq_max × dim_max."""

    def __init__(self, dividers: int, latency: int, rows: int, seq_max: int, dim_max: int) -> None:
        self.dividers, self.latency, self.rows, self.stride = dividers, latency, rows, dim_max
        super().__init__({
            "peak_valid": In(1),
            "peak_first": In(1),
            "peak_col": In(range(dim_max + 1)),
            "first_wave": In(1),
            "next_wave": In(1),
            "dim": In(range(dim_max + 1)),
            "tile_rows": In(range(rows + 1)),
            "row0": In(range(seq_max + rows + 1)),
            "acc": In(signed(OUTPUT_ACC_BITS)).array(rows, dim_max),
            "l": In(unsigned(L_BITS)).array(rows),
            "wave_done": Out(1),
            "more": Out(1),
            "o_addr": Out(range(seq_max * dim_max)).array(dividers),
            "o_data": Out(signed(OUT_BITS)).array(dividers),
            "o_en": Out(1).array(dividers),
            "s_addr": Out(range(seq_max)).array(dividers),
            "s_data": Out(unsigned(SHIFT_BITS)).array(dividers),
            "s_en": Out(1).array(dividers),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        D, R, dim, r = self.dividers, self.rows, self.dim, self.tile_rows
        dividers = [Divider(self.latency) for _ in range(D)]
        for u, divider in enumerate(dividers):
            m.submodules[f"divider_{u}"] = divider
        # the lanes' positions (row, column) in the wave in flight, row-major over the tile's r × d
        lane_row = [Signal(range(R + D + 2), name=f"div_row_{u}") for u in range(D)]
        lane_col = [Signal(range(self.stride + 1), name=f"div_col_{u}") for u in range(D)]
        acc, l = Array(Array(row) for row in self.acc), Array(self.l)
        # the peak pass: each row's max |A| over the columns walked so far
        peaks = [Signal(unsigned(OUTPUT_ACC_BITS), name=f"peak_{i}") for i in range(R)]
        for i, peak in enumerate(peaks):
            value = acc[i][self.peak_col]
            magnitude = Signal(unsigned(OUTPUT_ACC_BITS), name=f"peak_in_{i}")
            m.d.comb += magnitude.eq(Mux(value < 0, -value, value))
            with m.If(self.peak_valid):
                m.d.sync += peak.eq(Mux(self.peak_first | (magnitude > peak), magnitude, peak))
        peak_of = Array(peaks)
        following = [walk(lane_row[u], lane_col[u], D, dim) for u in range(D)]  # the next wave's positions
        m.d.comb += [self.wave_done.eq(dividers[0].done), self.more.eq(following[0][0] < r)]

        starting = self.first_wave | self.next_wave
        for u, divider in enumerate(dividers):
            row = Mux(self.first_wave, u // dim, following[u][0])
            col = Mux(self.first_wave, u % dim, following[u][1])
            m.d.comb += [divider.acc.eq(acc[row][col]), divider.l.eq(l[row]), divider.peak.eq(peak_of[row]),
                         divider.start.eq(starting & (row < r))]
            with m.If(starting):
                m.d.sync += [lane_row[u].eq(row), lane_col[u].eq(col)]
            with m.If(self.wave_done):
                m.d.comb += [self.o_addr[u].eq((self.row0 + lane_row[u]) * self.stride + lane_col[u]),
                             self.o_data[u].eq(divider.out), self.o_en[u].eq(lane_row[u] < r),
                             self.s_addr[u].eq(self.row0 + lane_row[u]), self.s_data[u].eq(divider.shift),
                             self.s_en[u].eq((lane_row[u] < r) & (lane_col[u] == 0))]
        return m
