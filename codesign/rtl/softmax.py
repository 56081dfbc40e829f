"""The softmax unit as RTL: one key block's online softmax for a query tile, between the array and the output
accumulators, on E lanes (Datapath.exp_lanes). host/q15.py StreamState.absorb (and codesign/bits.run_head) bit for
bit: INT32_MIN initial max, a row's max grows only where the block has a valid key above it, masked p = 0.

It holds, per tile row i < R: the running max m (int32), the running sum l (32 bits), the growth flag and α of the
current block, the block's scores z (R×C, int32), its probabilities P (R×C, Q15) and the row's d output accumulators
A (48 bits, OUTPUT_ACC_BITS); and a second score store, a second P buffer and a copy of l, so that the array and the
divider bank work on the step before while the unit works on this one (codesign/serial_windows.py). `copy` (a
window's begin) copies the array's sums (the step's scores, read by the max pass; forwarded in that cycle), P (read
by the array's P·V of the step just done; forwarded too) and l (read by the divider bank). A `start` (with `first`
on a tile's first block: m and l start over) runs three passes back to back; every pass walks its elements in
row-major order, E per cycle (the lanes may straddle rows):

  max      r·k scores: the copied sum → ScoreUnit (SCORE_LATENCY) → z buffer (causally masked keys stored as
           INT32_MIN); each row's max is a pipelined tree over its row of the z buffer, ⌈log₂ k⌉ register levels,
           read at the level that covers k keys.       cycles ⌈r·k/E⌉ + SCORE_LATENCY + ⌈log₂ k⌉
  exp      r·(k+1) elements, per row its k keys then its α: p = exp2(m_new − z) into P (0 where masked) and into the
           row's sum, α = exp2(block max − m_old) where the max grows. At the pass's end m takes the new max.
                                                       cycles ⌈(r·k + r)/E⌉ + EXP_LATENCY
  rescale  r·(d+1) elements, per row its d accumulators then l, through RescaleUnits: A and l of a grown row take
           round_shift(x·α, 15); l then adds the block's p sum. None in a tile's first block (l starts as the p sum).
           It issues from the first cycle with `rescale_go` (the previous block's P·V has added its last partials to
           A, in that cycle at the latest: the lanes read A as `acc` forwards it); until then the unit waits, not busy.
                                                       cycles ⌈r·(d+1)/E⌉ + RESCALE_LATENCY
`busy` is high in exactly those cycles, the first being the `start` cycle itself (the max pass issues its first
scores then); `done` pulses in the cycle after the last. The geometry inputs (tile_rows r, keys k, dim d, row0, key0,
causal, mult, shift) must hold still from `start` until `done`.

The array's P·V partials come in through `results` with `partial_add` (one fold of C columns, `partial_fold`, rows
below `partial_rows`): A[i][fold·C + j] += partial[i][j] (= partial[i][j] with `partial_first`, a tile's first
block: A starts over there), wrapped or saturated to 48 bits as bits.run_head's _clamp. `p_column` is the copied P's
column `p_index` below `p_rows` (the array's A operand for P·V); `acc` and `l` (the copy) are read by the divider
bank, `acc` forwarding a partial added in the same cycle.

Its pieces: the controller (softmax_control.py: the passes in order), the lane walker (lane_walker.py: where each
lane is in its pass), per row a max tree (max_tree.py), and per lane a score, an EXP2 and a rescale lane
(score_lane.py, exp_lane.py, rescale_lane.py: a unit, the tags beside its pipeline, where its result goes). This
module holds the block's state (m, l, the block's p sums, growth and α per row; z, P and A), gives each lane what
its position reads, and writes back what the lanes deliver.
"""

from __future__ import annotations

from amaranth.hdl import Array, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from codesign.datapath import OUTPUT_ACC_BITS
from codesign.rtl.exp_lane import ExpLane
from codesign.rtl.lane_walker import LaneWalker
from codesign.rtl.mac import OPERAND_BITS, check_overflow
from codesign.rtl.max_tree import MaxTree, tree_level
from codesign.rtl.rescale import ALPHA_BITS
from codesign.rtl.rescale_lane import L_BITS, RescaleLane
from codesign.rtl.score import MULT_BITS, SCORE_BITS, SHIFT_BITS
from codesign.rtl.score_lane import ScoreLane
from codesign.rtl.select import select
from codesign.rtl.softmax_control import SoftmaxControl
from host.checks import check_int
from host.q15 import DIM_MAX, INT32_MIN, MODEL_BC_MAX, SEQ_MAX

#: Query and key positions (0..SEQ_MAX) for the causal mask.
POSITION_BITS = SEQ_MAX.bit_length()


def balanced_sum(terms: list):
    """The sum of `terms` as a balanced adder tree (depth ⌈log₂ n⌉): what a circuit of n inputs would build, and a
    shallow expression for Amaranth (a chain of n additions recurses n deep when it is elaborated)."""
    terms = list(terms)
    if not terms:
        return 0
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0]


def check_softmax_unit(rows: int, cols: int, lanes: int, dim_max: int, acc_bits: int = 40,
                       overflow: str = "wrap") -> tuple[int, int, int, int, int, str]:
    """(rows, cols, lanes, dim_max, acc_bits, overflow) of a SoftmaxUnit; SpecError quoting the first bad one."""
    return (check_int("array rows", rows, 1, MODEL_BC_MAX), check_int("array cols", cols, 1, MODEL_BC_MAX),
            check_int("exp_lanes", lanes, 1, 4096), check_int("dim_max", dim_max, 1, DIM_MAX),
            check_int("acc_bits", acc_bits, 16, 64), check_overflow(overflow))


def _hits(m: Module, index, count: int, name: str) -> list[Signal]:
    """index == 0, 1, …, count − 1 as `count` one-bit signals (a decoder)."""
    hits = [Signal(name=f"{name}_{n}") for n in range(count)]
    m.d.comb += [hit.eq(index == n) for n, hit in enumerate(hits)]
    return hits


def write_at(m: Module, targets: list[list[Signal]], enable, row_hits: list, col_hits: list, value) -> None:
    """targets[row][col] takes `value` in the next cycle when `enable`, the row and column given decoded
    (row_hits[i]: row == i). One compare per register: an Array indexed by signals on the left of an assignment would
    make, for every register, a case over every (row, column), which is what made the 32×32 engine's Verilog huge."""
    # once as signals: an expression (an Array read above all) would be built again for every register
    writing, written = Signal(), Signal(Value.cast(value).shape())
    m.d.comb += [writing.eq(enable), written.eq(value)]
    for i, line in enumerate(targets):
        for c, target in enumerate(line):
            with m.If(writing & row_hits[i] & col_hits[c]):
                m.d.sync += target.eq(written)


class _BlockState:
    """The softmax unit's registers: per row m, l, the block's p sum, its growth flag and α; the block's z and P
    (R×C) and the output accumulators A (R×dim_max); each (and the array's sums, `results`) also as an Array, for a
    lane's runtime position."""

    def __init__(self, rows: int, cols: int, dim_max: int, scores) -> None:
        R, C = rows, cols
        self.run_max = [Signal(signed(SCORE_BITS), init=INT32_MIN, name=f"m_{i}") for i in range(R)]
        self.run_sum = [Signal(unsigned(L_BITS), name=f"l_{i}") for i in range(R)]
        self.p_sum = [Signal(unsigned(L_BITS), name=f"p_sum_{i}") for i in range(R)]
        self.grow = [Signal(name=f"grow_{i}") for i in range(R)]
        self.alpha = [Signal(unsigned(ALPHA_BITS), name=f"alpha_{i}") for i in range(R)]
        self.z = [[Signal(signed(SCORE_BITS), name=f"z_{i}_{j}") for j in range(C)] for i in range(R)]
        self.p = [[Signal(unsigned(ALPHA_BITS), name=f"p_{i}_{j}") for j in range(C)] for i in range(R)]
        # the second score store and P buffer: the window's scores (copied from the array's sums) and the P that the
        # array's P·V reads (copied from P), and l as the divider bank takes it
        self.held_scores = [[Signal(signed(len(scores[0][0])), name=f"s_{i}_{j}") for j in range(C)] for i in range(R)]
        self.p_pv = [[Signal(unsigned(ALPHA_BITS), name=f"p_pv_{i}_{j}") for j in range(C)] for i in range(R)]
        self.l_held = [Signal(unsigned(L_BITS), name=f"l_held_{i}") for i in range(R)]
        self.acc = [[Signal(signed(OUTPUT_ACC_BITS), name=f"a_{i}_{c}") for c in range(dim_max)] for i in range(R)]
        # per row, from the max trees: the block max, whether the row's max grows, the new max
        self.block_max = [Signal(signed(SCORE_BITS), name=f"block_max_{i}") for i in range(R)]
        self.grows = [Signal(name=f"grows_{i}") for i in range(R)]
        self.max_new = [Signal(signed(SCORE_BITS), name=f"max_new_{i}") for i in range(R)]
        self.arrays = {name: Array(getattr(self, name)) for name in
                       ("run_max", "run_sum", "p_sum", "grow", "alpha", "block_max", "grows", "max_new")}
        for name in ("z", "p", "acc"):
            self.arrays[name] = Array(Array(row) for row in getattr(self, name))
        self.scores = scores


class SoftmaxUnit(wiring.Component):
    """The softmax unit of an R×C array with E lanes, for heads up to dim_max, fed by acc_bits-wide array sums."""

    def __new__(cls, *args, **kwargs):
        check_softmax_unit(*args, **kwargs)  # before the unit exists: a rejected one is no Elaboratable left unused
        return super().__new__(cls, src_loc_at=1)

    def __init__(self, rows: int, cols: int, lanes: int, dim_max: int, acc_bits: int = 40,
                 overflow: str = "wrap") -> None:
        (self.rows, self.cols, self.lanes, self.dim_max, self.acc_bits,
         self.overflow) = check_softmax_unit(rows, cols, lanes, dim_max, acc_bits, overflow)
        self.folds_max = -(-self.dim_max // self.cols)
        super().__init__({
            "start": In(1),
            "first": In(1),
            "tile_rows": In(range(self.rows + 1)),
            "keys": In(range(self.cols + 1)),
            "dim": In(range(self.dim_max + 1)),
            "row0": In(unsigned(POSITION_BITS)),
            "key0": In(unsigned(POSITION_BITS)),
            "causal": In(1),
            "mult": In(unsigned(MULT_BITS)),
            "shift": In(unsigned(SHIFT_BITS)),
            "results": In(signed(self.acc_bits)).array(self.rows, self.cols),  # the array's shadow registers
            "busy": Out(1),
            "done": Out(1),
            "fault": Out(1),  # sticky: a unit's valid_out disagreed with the lane's own record of what it issued
            "copy": In(1),  # a window's begin: the scores, P and l copied for the new window (forwarded in this cycle)
            "rescale_go": In(1),  # the rescale pass may issue from this cycle on
            "p_index": In(range(self.cols)),
            "p_rows": In(range(self.rows + 1)),  # the P·V's tile rows
            "p_column": Out(signed(OPERAND_BITS)).array(self.rows),
            "partial_add": In(1),
            "partial_fold": In(range(self.folds_max)),
            "partial_rows": In(range(self.rows + 1)),
            "partial_first": In(1),  # the partials are their tile's first block's: they set A
            "acc": Out(signed(OUTPUT_ACC_BITS)).array(self.rows, self.dim_max),
            "l": Out(unsigned(L_BITS)).array(self.rows),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        R, E = self.rows, self.lanes
        C = self.cols
        # the scores the max pass reads: the copy, or the array's sums in the copy's own cycle
        scores = [[Signal(signed(self.acc_bits), name=f"score_{i}_{j}") for j in range(C)] for i in range(R)]
        state = _BlockState(R, C, self.dim_max, scores)
        for i in range(R):
            for j in range(C):
                m.d.comb += scores[i][j].eq(Mux(self.copy, self.results[i][j], state.held_scores[i][j]))
        with m.If(self.copy):
            m.d.sync += [*(state.held_scores[i][j].eq(self.results[i][j]) for i in range(R) for j in range(C)),
                         *(state.p_pv[i][j].eq(state.p[i][j]) for i in range(R) for j in range(C)),
                         *(state.l_held[i].eq(state.run_sum[i]) for i in range(R))]
        m.submodules.control = control = SoftmaxControl(self.cols, self.dim_max)
        m.submodules.walker = walker = LaneWalker(E, R, max(self.cols, self.dim_max) + 1)
        level = Signal(range(control.depth + 1))  # ⌈log₂ k⌉: the max trees' read level
        m.d.comb += [level.eq(tree_level(self.keys, self.cols)),
                     control.start.eq(self.start), control.first.eq(self.first), control.keys.eq(self.keys),
                     control.dim.eq(self.dim), control.level.eq(level), control.last.eq(walker.last),
                     control.go.eq(self.rescale_go),
                     self.busy.eq(control.busy), self.done.eq(control.done),
                     walker.begin.eq(control.begin), walker.restart.eq(control.restart),
                     walker.advance.eq(control.advance), walker.width.eq(control.width),
                     walker.tile_rows.eq(self.tile_rows)]
        for i in range(R):
            p_row = [Mux(self.copy, state.p[i][j], state.p_pv[i][j]) for j in range(C)]
            m.d.comb += [self.l[i].eq(state.l_held[i]),
                         self.p_column[i].eq(Mux(i < self.p_rows, Array(p_row)[self.p_index], 0))]
        self._max_trees(m, state, level)
        # the rescale pass reads A as `acc` forwards it: it may issue in the cycle of the last partials' add
        state.acc_now = [[self.acc[i][c] for c in range(self.dim_max)] for i in range(R)]

        fault = Signal()
        m.d.comb += self.fault.eq(fault)
        row_p_sums = [[] for _ in range(R)]
        for u in range(E):
            mismatches = self._lane(m, u, control, walker, state, row_p_sums)
            with m.If(mismatches):
                m.d.sync += fault.eq(1)
        self._block_sums(m, control, state, row_p_sums)
        self._partials(m, state)
        self._begin_and_commit(m, control, state)
        return m

    def _key_valid(self, row, col):
        """The causal mask: key key0 + col is visible to query row0 + row."""
        return ~self.causal | (self.key0 + col <= self.row0 + row)

    def _max_trees(self, m: Module, state: _BlockState, level: Signal) -> None:
        """Per row: the block max from its tree over the z buffer, whether the row's max grows (the block holds a
        valid key for it above m), and the new max."""
        for i in range(self.rows):
            m.submodules[f"max_tree_{i}"] = tree = MaxTree(self.cols)
            m.d.comb += [*(tree.z[j].eq(state.z[i][j]) for j in range(self.cols)), tree.keys.eq(self.keys),
                         tree.level.eq(level), state.block_max[i].eq(tree.max)]
            has = ~self.causal | (self.key0 <= self.row0 + i)
            m.d.comb += [state.grows[i].eq(has & (state.block_max[i] > state.run_max[i])),
                         state.max_new[i].eq(Mux(state.grows[i], state.block_max[i], state.run_max[i]))]

    def _lane(self, m: Module, u: int, control: SoftmaxControl, walker: LaneWalker, state: _BlockState,
              row_p_sums: list) -> Signal:
        """Lane u's score, EXP2 and rescale lanes: what their position reads, and where their results go (each p
        also into its row's list of p sums). Returns the lane's mismatch flag."""
        bounds = self.rows + self.lanes + 2, max(self.cols, self.dim_max) + 2  # the walker's positions
        lanes = ScoreLane(self.acc_bits, *bounds), ExpLane(self.cols, *bounds), RescaleLane(self.dim_max, *bounds)
        score, exp, rescale = lanes
        for name, lane in zip(("score", "exp2", "rescale"), lanes):
            m.submodules[f"{name}_{u}"] = lane
        row, col, live, a = walker.row[u], walker.col[u], walker.live[u], state.arrays
        m.d.comb += [
            score.issue.eq(control.issue_max & live), score.row.eq(row), score.col.eq(col),
            score.sum.eq(select(m, state.scores, row, col, f"score_sum_{u}")), score.mult.eq(self.mult),
            score.shift.eq(self.shift),
            exp.issue.eq(control.issue_exp & live), exp.row.eq(row), exp.col.eq(col), exp.keys.eq(self.keys),
            exp.valid_key.eq(self._key_valid(row, col)), exp.z.eq(select(m, state.z, row, col, f"exp_z_{u}")),
            exp.max_new.eq(a["max_new"][row]), exp.grows.eq(a["grows"][row]),
            exp.block_max.eq(a["block_max"][row]), exp.run_max.eq(a["run_max"][row]),
            rescale.issue.eq(control.issue_rescale & live), rescale.row.eq(row), rescale.col.eq(col),
            rescale.dim.eq(self.dim), rescale.acc.eq(select(m, state.acc_now, row, col, f"rescale_acc_{u}")),
            rescale.l.eq(a["run_sum"][row]), rescale.alpha.eq(a["alpha"][row])]
        z = Mux(self._key_valid(score.out_row, score.out_col), score.z, INT32_MIN)
        write_at(m, state.z, score.valid, _hits(m, score.out_row, self.rows, f"z_row_{u}"),
                 _hits(m, score.out_col, self.cols, f"z_col_{u}"), z)
        exp_rows = _hits(m, exp.out_row, self.rows, f"exp_row_{u}")
        write_at(m, [state.alpha], exp.valid & exp.is_alpha, [1], exp_rows, exp.p)
        write_at(m, state.p, exp.valid & ~exp.is_alpha, exp_rows, _hits(m, exp.out_col, self.cols, f"p_col_{u}"),
                 exp.p)
        for i in range(self.rows):
            row_p_sums[i].append(Mux(exp.valid & ~exp.is_alpha & exp_rows[i], exp.p, 0))
        grown = a["grow"][rescale.out_row]
        rescale_rows = _hits(m, rescale.out_row, self.rows, f"rescale_row_{u}")
        for i, l_row in enumerate(state.run_sum):
            with m.If(rescale.valid & rescale.is_l & rescale_rows[i]):
                m.d.sync += l_row.eq(Mux(state.grow[i], rescale.y, l_row) + state.p_sum[i])
        write_at(m, state.acc, rescale.valid & ~rescale.is_l & grown, rescale_rows,
                 _hits(m, rescale.out_col, self.dim_max, f"rescale_col_{u}"), rescale.y)
        return score.mismatch | exp.mismatch | rescale.mismatch

    def _block_sums(self, m: Module, control: SoftmaxControl, state: _BlockState, row_p_sums: list) -> None:
        """The block's p sums: into l directly in a tile's first block (l starts at 0), else kept for the rescale."""
        for i in range(self.rows):
            block_sum = balanced_sum(row_p_sums[i])
            with m.If(control.block_first):
                m.d.sync += state.run_sum[i].eq(state.run_sum[i] + block_sum)
            with m.Else():
                m.d.sync += state.p_sum[i].eq(state.p_sum[i] + block_sum)

    def _partials(self, m: Module, state: _BlockState) -> None:
        """P·V partials into the output accumulators, wrapped or saturated to 48 bits; `acc` shows the sum at once."""
        low, high = -(1 << (OUTPUT_ACC_BITS - 1)), (1 << (OUTPUT_ACC_BITS - 1)) - 1
        C = self.cols
        for i in range(self.rows):
            for c in range(self.dim_max):
                total = Mux(self.partial_first, 0, state.acc[i][c]) + self.results[i][c % C]
                if self.overflow == "wrap":
                    fitted = total[:OUTPUT_ACC_BITS].as_signed()
                else:
                    fitted = Mux(total > high, high, Mux(total < low, low, total))
                adding = self.partial_add & (self.partial_fold == c // C) & (i < self.partial_rows) & (c < self.dim)
                m.d.comb += self.acc[i][c].eq(Mux(adding, fitted, state.acc[i][c]))
                with m.If(adding):
                    m.d.sync += state.acc[i][c].eq(fitted)

    def _begin_and_commit(self, m: Module, control: SoftmaxControl, state: _BlockState) -> None:
        """A block's start clears its p sums (a tile's first block also m, l and A); at the exp pass's end the
        rows take their new max and growth, now that every p and α has been taken."""
        with m.If(control.begin):
            m.d.sync += [s.eq(0) for s in state.p_sum]
            with m.If(self.first):
                m.d.sync += [s.eq(INT32_MIN) for s in state.run_max] + [s.eq(0) for s in state.run_sum]
        with m.If(control.commit):
            for i in range(self.rows):
                with m.If(i < self.tile_rows):
                    m.d.sync += [state.grow[i].eq(state.grows[i]), state.run_max[i].eq(state.max_new[i])]
