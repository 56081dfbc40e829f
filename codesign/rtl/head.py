"""One attention head as RTL: the controller that runs the systolic array (codesign/rtl/array.py), the softmax unit
(softmax.py) and the divider bank (divider.py) over on-chip Q, K, V and O memories in codesign/serial_windows.py's
schedule (codesign/cycles.py's serial one), and counts the cycles each stage is busy.

A head's steps are its (query tile of r ≤ R rows at row0 = 0, R, 2R, …; key block of k ≤ C keys at key0 = 0, C, …
up to the tile's last row's key with the causal mask) pairs, tile after tile. Each step is

  QKᵀ      one fold on the array (M=r, N=k, K=d): Q's column t and K's column t for t = 0..d−1; busy d+R+C−2.
  softmax  the softmax unit's passes on the fold's sums (max, exp, and rescale except in the tile's first block).
  P·V      ⌈d/C⌉ folds (M=r, N=d, K=k): P's column t and V's row key0+t, columns fold·C..fold·C+C−1; each fold's
           partials go into the 48-bit output accumulators in its done cycle; busy k+R+C−2 per fold.

and they run in windows (head_control.py): in window s the array runs step s − 1's P·V and then step s + 1's QKᵀ
while the softmax unit runs step s (its rescale from the cycle of that P·V's last partials on); the first window has
step 0's QKᵀ alone, the last the last step's P·V. At the end of the window of a tile's last P·V the divider bank
takes the tile (its own copy of the accumulators and l, the O buffer's second tile) and works beside the next
windows: first the peak pass (d cycles, one column of every row's A a cycle: each row's peak |A|, which sets its
shift g), then Datapath.dividers Dividers of div_latency cycles turn the r·d accumulators into int16 outputs in
waves of `dividers` (row-major), written into O, and each row's g into the shift memory; busy d for the pass and
div_latency per wave. A take that finds the bank still on the tile before waits for it (the controller's HOLD).

The key block is the array's width (Bc = C: one QKᵀ fold per block, the softmax unit's C score lanes); the bit model
(codesign/bits.py) folds any Bc over any C, the RTL only this one (codesign/rtl/sim.py refuses other heads).

The counters are the stages' busy cycles: the array from each fold's first vector to the cycle before its done (as
codesign/gemm.py counts a fold), the softmax unit while its `busy` is high, the dividers from the take (the peak
pass's first column) to the cycle before a tile's last wave's done. A window ends in the cycle both units are done
and the next begins in it (a fold follows a fold in the done cycle too), so `cycles`, from the first QKᵀ vector to the
last tile's last wave's done, is codesign/cycles.py's cycles for the head less its DRAM prologue and epilogue
(codesign/rtl/sim.py model_cycles).

Memories (amaranth.lib.memory, the testbench loads them through q_data, k_data, v_data and reads o_data and
shift_data): int16 elements at address row·dim_max + column, and one shift byte (5 bits) per row at its row. The
controller reads R elements of Q, C of K or C of V per cycle and writes up to `dividers` of O: in silicon each would
be a bank per port (Q rows by row mod R, K rows by key mod C, V columns by column mod C), with no conflicts, since the
ports of one cycle touch distinct rows (columns) mod R (C). seq, dim, causal, the score scale (mult, shift) are
inputs, taken on `start`; seq_max and dim_max size the memories.

Its pieces: the controller (head_control.py: the stages in order and where the head is), the QKᵀ and P·V feeds
(qk_feed.py, pv_feed.py: memory reads into the array), the divider bank (divider_bank.py: waves into O) and the
counters (stage_counters.py); this module holds the memories and the head's parameters and wires the pieces to the
array and the softmax unit.
"""

from __future__ import annotations

from amaranth.hdl import MemoryData, Module, Signal, signed, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from codesign.datapath import Datapath
from codesign.rtl.array import SystolicArray
from codesign.rtl.divider import MAX_LATENCY as DIVIDER_MAX_LATENCY
from codesign.rtl.divider import MIN_LATENCY as DIVIDER_MIN_LATENCY
from codesign.rtl.divider import SHIFT_BITS as OUT_SHIFT_BITS
from codesign.rtl.divider_bank import DividerBank
from codesign.rtl.head_control import HeadControl
from codesign.rtl.mac import OPERAND_BITS
from codesign.rtl.pv_feed import PVFeed
from codesign.rtl.qk_feed import QKFeed
from codesign.rtl.score import MULT_BITS, SHIFT_BITS
from codesign.rtl.softmax import SoftmaxUnit
from codesign.rtl.stage_counters import COUNTER_BITS, STAGES, StageCounters
from host.checks import check_int
from host.errors import SpecError
from host.q15 import DIM_MAX, SEQ_MAX

def check_head_engine(datapath: Datapath, seq_max: int, dim_max: int) -> tuple[int, int]:
    """(seq_max, dim_max) of a HeadEngine for `datapath`; SpecError quoting the first bad parameter (a dataflow
    with no RTL array, a size out of range, a divider latency below the divider's minimum)."""
    if datapath.dataflow != "os":
        raise SpecError(f"dataflow={datapath.dataflow!r} has no RTL array; allowed: os")
    seq_max = check_int("seq_max", seq_max, 1, SEQ_MAX)
    dim_max = check_int("dim_max", dim_max, 1, DIM_MAX)
    if datapath.div_latency < DIVIDER_MIN_LATENCY:
        raise SpecError(f"div_latency={datapath.div_latency} is below the divider's minimum "
                        f"{DIVIDER_MIN_LATENCY} (codesign/rtl/divider.py); allowed: {DIVIDER_MIN_LATENCY}.."
                        f"{DIVIDER_MAX_LATENCY}")
    return seq_max, dim_max


class HeadEngine(wiring.Component):
    """The head engine of one Datapath (dataflow os) for heads of up to seq_max × dim_max."""

    def __new__(cls, *args, **kwargs):
        check_head_engine(*args, **kwargs)  # before the engine exists: a rejected one is no Elaboratable left unused
        return super().__new__(cls, src_loc_at=1)

    def __init__(self, datapath: Datapath, seq_max: int, dim_max: int) -> None:
        self.seq_max, self.dim_max = check_head_engine(datapath, seq_max, dim_max)
        self.datapath = datapath
        depth = self.seq_max * self.dim_max
        self.q_data, self.k_data, self.v_data, self.o_data = (
            MemoryData(shape=signed(OPERAND_BITS), depth=depth, init=[]) for _ in range(4))
        self.shift_data = MemoryData(shape=unsigned(OUT_SHIFT_BITS), depth=self.seq_max, init=[])
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
        dp, depth = self.datapath, self.seq_max * self.dim_max
        R, C = dp.rows, dp.cols
        m.submodules.array = array = SystolicArray(R, C, dp.acc_bits, dp.overflow)
        m.submodules.softmax = softmax = SoftmaxUnit(R, C, dp.exp_lanes, self.dim_max, dp.acc_bits, dp.overflow)
        m.submodules.control = control = HeadControl(R, C, self.seq_max, self.dim_max)
        m.submodules.qk_feed = qk = QKFeed(R, C, self.seq_max, self.dim_max, depth)
        m.submodules.pv_feed = pv = PVFeed(R, C, self.seq_max, self.dim_max, depth, softmax.folds_max)
        m.submodules.dividers = bank = DividerBank(dp.dividers, dp.div_latency, R, self.seq_max, self.dim_max)
        m.submodules.counters = counters = StageCounters()
        seq, dim, causal = self._parameters(m, control, softmax)
        self._memories(m, qk, pv, bank)
        m.d.comb += [
            control.start.eq(self.start), control.seq.eq(seq), control.dim.eq(dim), control.causal.eq(causal),
            control.array_done.eq(array.done), control.softmax_done.eq(softmax.done),
            control.bank_ready.eq(bank.ready), control.bank_finished.eq(bank.finished), self.done.eq(control.done),
            self.fault.eq(softmax.fault)]
        m.d.comb += [
            qk.valid.eq(control.qk_valid), qk.row0.eq(control.qk_row0), qk.key0.eq(control.qk_key0),
            qk.t.eq(control.qk_t), qk.tile_rows.eq(control.qk_rows), qk.keys.eq(control.qk_keys), qk.dim.eq(dim),
            pv.valid.eq(control.pv_valid), pv.fold.eq(control.pv_fold), pv.t.eq(control.pv_t),
            pv.key0.eq(control.pv_key0), pv.keys.eq(control.pv_keys), pv.dim.eq(dim),
            softmax.p_index.eq(pv.p_index), softmax.p_rows.eq(control.pv_rows),
            *(pv.p_column[i].eq(softmax.p_column[i]) for i in range(R)),
            *(array.a[i].eq(qk.a[i] | pv.a[i]) for i in range(R)),
            *(array.b[j].eq(qk.b[j] | pv.b[j]) for j in range(C)),
            array.valid.eq(qk.array_valid | pv.array_valid), array.first.eq(qk.first | pv.first),
            array.last.eq(qk.last | pv.last)]
        m.d.comb += [
            softmax.start.eq(control.softmax_start), softmax.copy.eq(control.copy),
            softmax.rescale_go.eq(control.rescale_go), softmax.partial_add.eq(control.partial_add),
            softmax.partial_fold.eq(control.add_fold), softmax.partial_rows.eq(control.add_rows),
            softmax.partial_first.eq(control.add_first),
            *(softmax.results[i][j].eq(array.result[i][j]) for i in range(R) for j in range(C)),
            bank.take.eq(control.bank_take), bank.dim.eq(dim),
            bank.tile_rows.eq(control.bank_rows), bank.row0.eq(control.bank_row0),
            *(bank.acc[i][c].eq(softmax.acc[i][c]) for i in range(R) for c in range(self.dim_max)),
            *(bank.l[i].eq(softmax.l[i]) for i in range(R))]
        m.d.comb += [
            counters.clear.eq(control.take), counters.array_busy.eq(control.array_busy),
            counters.softmax_busy.eq(softmax.busy), counters.divider_busy.eq(bank.busy),
            counters.running.eq(control.running), counters.finishing.eq(control.finishing),
            *(getattr(self, f"{name}_cycles").eq(getattr(counters, f"{name}_cycles")) for name in STAGES),
            self.cycles.eq(counters.cycles)]
        return m

    def _parameters(self, m: Module, control: HeadControl, softmax: SoftmaxUnit) -> tuple[Signal, Signal, Signal]:
        """The head's parameters, latched when the controller takes a start, and the softmax unit's view of the
        step (its tile, its block, the fold whose partials come in). Returns (seq, dim, causal)."""
        seq, dim, causal = Signal.like(self.seq), Signal.like(self.dim), Signal()
        mult, shift = Signal.like(self.mult), Signal.like(self.shift)
        with m.If(control.take):
            m.d.sync += [seq.eq(self.seq), dim.eq(self.dim), causal.eq(self.causal), mult.eq(self.mult),
                         shift.eq(self.shift)]
        m.d.comb += [softmax.tile_rows.eq(control.sm_rows), softmax.keys.eq(control.sm_keys),
                     softmax.dim.eq(dim), softmax.row0.eq(control.sm_row0), softmax.key0.eq(control.sm_key0),
                     softmax.causal.eq(causal), softmax.mult.eq(mult), softmax.shift.eq(shift),
                     softmax.first.eq(control.sm_first)]
        return seq, dim, causal

    def _memories(self, m: Module, qk: QKFeed, pv: PVFeed, bank: DividerBank) -> None:
        """The Q, K, V, O and shift memories and their ports: R reads of Q and C of K for the QKᵀ feed, C of V for
        the P·V feed, and one write of O and one of the shift memory per divider."""
        mems = {}
        for name in ("q", "k", "v", "o"):
            mems[name] = m.submodules[f"{name}_mem"] = memory.Memory(data=getattr(self, f"{name}_data"))
        for name, addrs, datas in (("q", qk.q_addr, qk.q_data), ("k", qk.k_addr, qk.k_data),
                                   ("v", pv.v_addr, pv.v_data)):
            for a, d in zip(addrs, datas):
                port = mems[name].read_port(domain="comb")
                m.d.comb += [port.addr.eq(a), d.eq(port.data)]
        mems["shift"] = m.submodules.shift_mem = memory.Memory(data=self.shift_data)
        for u in range(self.datapath.dividers):
            port = mems["o"].write_port()
            m.d.comb += [port.addr.eq(bank.o_addr[u]), port.data.eq(bank.o_data[u]), port.en.eq(bank.o_en[u])]
            port = mems["shift"].write_port()
            m.d.comb += [port.addr.eq(bank.s_addr[u]), port.data.eq(bank.s_data[u]), port.en.eq(bank.s_en[u])]
