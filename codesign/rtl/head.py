"""One attention head as RTL: the controller that runs the systolic array (codesign/rtl/array.py), the softmax unit
(softmax.py) and the divider bank (divider.py) over on-chip Q, K, V and O memories, in codesign/cycles.py's order,
and counts the cycles each stage is busy.

For each query tile of r ≤ R rows (row0 = 0, R, 2R, …), for each key block of k ≤ C keys it visits (key0 = 0, C, …;
with the causal mask only the blocks up to the tile's last row), one stage after another, nothing overlapped:

  QKᵀ      one fold on the array (M=r, N=k, K=d): Q's column t and K's column t for t = 0..d−1; busy d+R+C−2.
  softmax  the softmax unit's passes on the fold's sums (max, exp, and rescale except in the tile's first block).
  P·V      ⌈d/C⌉ folds (M=r, N=d, K=k): P's column t and V's row key0+t, columns fold·C..fold·C+C−1; each fold's
           partials go into the 48-bit output accumulators in its done cycle; busy k+R+C−2 per fold.
and after the tile's last block the divider bank (Datapath.dividers Dividers of div_latency cycles) turns the r·d
accumulators into int16 outputs in waves of `dividers` (row-major), written into O; busy div_latency per wave.

The counters are the stages' busy cycles: the array from each fold's first vector to the cycle before its done (as
codesign/gemm.py counts a fold), the softmax unit while its `busy` is high, the dividers from each wave's start to the
cycle before its done. Every stage starts in the previous one's done cycle: the softmax unit issues its first scores
in the QKᵀ fold's done cycle, P·V's first vector goes in with the softmax unit's done, a fold follows a fold, a block's
QKᵀ the last P·V fold, the first divider wave the last fold (the softmax unit forwards that fold's partials to the
dividers), a wave a wave and the next tile the last wave. So `cycles`, from the first QKᵀ vector to the last wave's
done, is exactly the sum of the three counters.

Memories (amaranth.lib.memory, the testbench loads them through q_data, k_data, v_data and reads o_data): int16
elements at address row·dim_max + column. The controller reads R elements of Q, C of K or C of V per cycle and writes
up to `dividers` of O: in silicon each would be a bank per port (Q rows by row mod R, K rows by key mod C, V columns
by column mod C), with no conflicts, since the ports of one cycle touch distinct rows (columns) mod R (C).
seq, dim, causal, the score scale (mult, shift) are inputs, taken on `start`; seq_max and dim_max size the memories.
"""

from __future__ import annotations

from amaranth.hdl import Array, MemoryData, Module, Mux, Signal, signed, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from codesign.datapath import Datapath
from codesign.rtl.array import SystolicArray
from codesign.rtl.divider import MAX_LATENCY as DIVIDER_MAX_LATENCY
from codesign.rtl.divider import MIN_LATENCY as DIVIDER_MIN_LATENCY
from codesign.rtl.divider import Divider
from codesign.rtl.mac import OPERAND_BITS
from codesign.rtl.score import MULT_BITS, SHIFT_BITS
from codesign.rtl.softmax import SoftmaxUnit, walk
from host.errors import SpecError
from host.checks import check_int
from host.q15 import DIM_MAX, SEQ_MAX

COUNTER_BITS = 32
STAGES = ("array", "softmax", "divider")


class HeadEngine(wiring.Component):
    """The head engine of one Datapath (dataflow os) for heads of up to seq_max × dim_max."""

    def __init__(self, datapath: Datapath, seq_max: int, dim_max: int) -> None:
        try:
            if datapath.dataflow != "os":
                raise SpecError(f"dataflow={datapath.dataflow!r} has no RTL array; allowed: os")
            self.seq_max = check_int("seq_max", seq_max, 1, SEQ_MAX)
            self.dim_max = check_int("dim_max", dim_max, 1, DIM_MAX)
            if datapath.div_latency < DIVIDER_MIN_LATENCY:
                raise SpecError(f"div_latency={datapath.div_latency} is below the divider's minimum "
                                f"{DIVIDER_MIN_LATENCY} (codesign/rtl/divider.py); allowed: {DIVIDER_MIN_LATENCY}.."
                                f"{DIVIDER_MAX_LATENCY}")
        except SpecError:
            self._MustUse__silence = True  # a rejected engine is not an unused circuit: no UnusedElaboratable warning
            raise
        self.datapath = datapath
        depth = self.seq_max * self.dim_max
        self.q_data, self.k_data, self.v_data, self.o_data = (
            MemoryData(shape=signed(OPERAND_BITS), depth=depth, init=[]) for _ in range(4))
        super().__init__({
            "start": In(1),
            "seq": In(range(self.seq_max + 1)),
            "dim": In(range(self.dim_max + 1)),
            "causal": In(1),
            "mult": In(unsigned(MULT_BITS)),
            "shift": In(unsigned(SHIFT_BITS)),
            "done": Out(1),
            "fault": Out(1),
            "array_cycles": Out(COUNTER_BITS),
            "softmax_cycles": Out(COUNTER_BITS),
            "divider_cycles": Out(COUNTER_BITS),
            "cycles": Out(COUNTER_BITS),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        dp = self.datapath
        R, C, D, stride = dp.rows, dp.cols, dp.dividers, self.dim_max
        m.submodules.array = array = SystolicArray(R, C, dp.acc_bits, dp.overflow)
        m.submodules.softmax = softmax = SoftmaxUnit(R, C, dp.exp_lanes, self.dim_max, dp.acc_bits, dp.overflow)
        dividers = [Divider(dp.div_latency) for _ in range(D)]
        for u, divider in enumerate(dividers):
            m.submodules[f"divider_{u}"] = divider
        mems = {}
        for name in ("q", "k", "v", "o"):
            mems[name] = m.submodules[f"{name}_mem"] = memory.Memory(data=getattr(self, f"{name}_data"))
        q_ports = [mems["q"].read_port(domain="comb") for _ in range(R)]
        k_ports = [mems["k"].read_port(domain="comb") for _ in range(C)]
        v_ports = [mems["v"].read_port(domain="comb") for _ in range(C)]
        o_ports = [mems["o"].write_port() for _ in range(D)]

        # the head's parameters, latched on start, and the position of the step
        seq = Signal.like(self.seq)
        dim = Signal.like(self.dim)
        causal = Signal()
        mult, shift = Signal.like(self.mult), Signal.like(self.shift)
        row0 = Signal(range(self.seq_max + R + 1))
        key0 = Signal(range(self.seq_max + C + 1))
        t = Signal(range(max(self.dim_max, C) + 1))  # the streamed index of the fold being fed
        fold = Signal(range(softmax.folds_max + 1))

        def tile_rows(row0_at):
            return Mux(seq - row0_at >= R, R, seq - row0_at)

        def block_keys(key0_at):
            return Mux(seq - key0_at >= C, C, seq - key0_at)

        r, k = tile_rows(row0), block_keys(key0)  # rows of this tile, keys of this block
        key_end = Mux(causal, row0 + r, seq)  # the key after the tile's last

        m.d.comb += [softmax.tile_rows.eq(r), softmax.keys.eq(k), softmax.dim.eq(dim), softmax.row0.eq(row0),
                     softmax.key0.eq(key0), softmax.causal.eq(causal), softmax.mult.eq(mult),
                     softmax.shift.eq(shift), softmax.first.eq(key0 == 0), softmax.partial_fold.eq(fold),
                     self.fault.eq(softmax.fault)]
        for i in range(R):
            m.d.comb += [softmax.results[i][j].eq(array.result[i][j]) for j in range(C)]

        counters = {"array": self.array_cycles, "softmax": self.softmax_cycles, "divider": self.divider_cycles}
        busy = {name: Signal(name=f"{name}_busy") for name in counters}
        m.d.comb += busy["softmax"].eq(softmax.busy)
        m.d.sync += [counters[name].eq(counters[name] + busy[name]) for name in counters]
        running = Signal()  # from the first QKᵀ vector up to (not including) the last wave's done, as a fold counts
        finishing = Signal()  # the last wave's done
        m.d.sync += self.cycles.eq(self.cycles + (running & ~finishing))

        def feed_qk(row0_at, key0_at, t_at):
            """Present QKᵀ's vector t_at: Q's column (rows of the tile at row0_at), K's column (keys at key0_at)."""
            rows, keys = tile_rows(row0_at), block_keys(key0_at)
            for i, port in enumerate(q_ports):
                m.d.comb += [port.addr.eq(Mux(i < rows, (row0_at + i) * stride + t_at, 0)),
                             array.a[i].eq(Mux(i < rows, port.data, 0))]
            for j, port in enumerate(k_ports):
                m.d.comb += [port.addr.eq(Mux(j < keys, (key0_at + j) * stride + t_at, 0)),
                             array.b[j].eq(Mux(j < keys, port.data, 0))]
            m.d.comb += [array.valid.eq(1), array.first.eq(t_at == 0), array.last.eq(t_at == dim - 1),
                         busy["array"].eq(1)]
            m.d.sync += t.eq(t_at + 1)
            with m.If(t_at == dim - 1):
                m.next = "QK_WAIT"
            with m.Else():
                m.next = "QK_FEED"

        def feed_pv(fold_at, t_at):
            """Present P·V's vector t_at of fold fold_at: P's column (softmax unit), V's row key0+t_at, C columns."""
            m.d.comb += softmax.p_index.eq(t_at)
            for i in range(R):
                m.d.comb += array.a[i].eq(softmax.p_column[i])
            for j, port in enumerate(v_ports):
                column = fold_at * C + j
                m.d.comb += [port.addr.eq(Mux(column < dim, (key0 + t_at) * stride + column, 0)),
                             array.b[j].eq(Mux(column < dim, port.data, 0))]
            m.d.comb += [array.valid.eq(1), array.first.eq(t_at == 0), array.last.eq(t_at == k - 1),
                         busy["array"].eq(1)]
            m.d.sync += [t.eq(t_at + 1), fold.eq(fold_at)]
            with m.If(t_at == k - 1):
                m.next = "PV_WAIT"
            with m.Else():
                m.next = "PV_FEED"

        def begin_tile(row0_at):
            """The first QKᵀ vector of the tile at row0_at (its block 0)."""
            m.d.sync += [row0.eq(row0_at), key0.eq(0)]
            feed_qk(row0_at, 0, 0)

        # the divider bank's lanes: positions (row, column) of the wave in flight, row-major over the tile's r × d
        lane_row = [Signal(range(R + D + 2), name=f"div_row_{u}") for u in range(D)]
        lane_col = [Signal(range(self.dim_max + 1), name=f"div_col_{u}") for u in range(D)]
        acc_array = Array(Array(row) for row in softmax.acc)
        l_array = Array(softmax.l)
        wave_done = dividers[0].done  # every lane of a wave starts together with the same latency; lane 0 is live

        def start_wave(rows, cols):
            """Start the dividers on the elements at (rows[u], cols[u]) and keep those positions for the writes."""
            for u, divider in enumerate(dividers):
                m.d.comb += [divider.acc.eq(acc_array[rows[u]][cols[u]]), divider.l.eq(l_array[rows[u]]),
                             divider.start.eq(rows[u] < r)]
            m.d.sync += [reg.eq(row) for reg, row in zip(lane_row, rows)] + \
                [reg.eq(col) for reg, col in zip(lane_col, cols)]
            m.d.comb += busy["divider"].eq(1)
            m.next = "DIV_WAIT"

        def take_start():
            """On start: latch the head's parameters, clear the counters; the first tile begins in the next cycle."""
            with m.If(self.start):
                m.d.sync += [seq.eq(self.seq), dim.eq(self.dim), causal.eq(self.causal), mult.eq(self.mult),
                             shift.eq(self.shift), row0.eq(0), key0.eq(0), t.eq(0),
                             self.cycles.eq(0), *[c.eq(0) for c in counters.values()]]
                m.next = "QK_FEED"

        with m.FSM(name="head") as fsm:
            with m.State("IDLE"):
                take_start()
            with m.State("QK_FEED"):
                feed_qk(row0, key0, t)
            with m.State("QK_WAIT"):
                m.d.comb += busy["array"].eq(~array.done)
                with m.If(array.done):  # the scores are final: the softmax unit takes them in this cycle
                    m.d.comb += softmax.start.eq(1)
                    m.next = "SOFTMAX"
            with m.State("SOFTMAX"):
                with m.If(softmax.done):
                    feed_pv(0, 0)
            with m.State("PV_FEED"):
                feed_pv(fold, t)
            with m.State("PV_WAIT"):
                m.d.comb += busy["array"].eq(~array.done)
                with m.If(array.done):  # the fold's partials go into A; the next fold, block or tile's divisions
                    m.d.comb += softmax.partial_add.eq(1)
                    with m.If((fold + 1) * C < dim):
                        feed_pv(fold + 1, 0)
                    with m.Elif(key0 + C < key_end):
                        m.d.sync += key0.eq(key0 + C)
                        feed_qk(row0, key0 + C, 0)
                    with m.Else():  # the dividers read A through the softmax unit's forwarding of this partial
                        start_wave([u // dim for u in range(D)], [u % dim for u in range(D)])
            with m.State("DIV_WAIT"):
                m.d.comb += busy["divider"].eq(~wave_done)
                with m.If(wave_done):
                    for u, (divider, port) in enumerate(zip(dividers, o_ports)):
                        m.d.comb += [port.addr.eq((row0 + lane_row[u]) * stride + lane_col[u]),
                                     port.data.eq(divider.out), port.en.eq(lane_row[u] < r)]
                    rows, cols = zip(*(walk(lane_row[u], lane_col[u], D, dim) for u in range(D)))
                    with m.If(rows[0] < r):
                        start_wave(rows, cols)
                    with m.Elif(row0 + R < seq):
                        begin_tile(row0 + R)
                    with m.Else():
                        m.d.comb += finishing.eq(1)
                        m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += self.done.eq(1)
                take_start()
        m.d.comb += running.eq(~fsm.ongoing("IDLE") & ~fsm.ongoing("DONE"))
        return m
