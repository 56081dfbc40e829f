"""The softmax unit as RTL: one key block's online softmax for a query tile, between the array and the output
accumulators, on E lanes (Datapath.exp_lanes). host/q15.py StreamState.absorb (and codesign/bits.run_head) bit for
bit: INT32_MIN initial max, a row's max grows only where the block has a valid key above it, masked p = 0.

It holds, per tile row i < R: the running max m (int32), the running sum l (32 bits), the growth flag and α of the
current block, the block's scores z (R×C, int32), its probabilities P (R×C, Q15) and the row's d output accumulators
A (48 bits, OUTPUT_ACC_BITS). A `start` (with `first` on a tile's first block: m, l and A start over) runs three
passes back to back; every pass walks its elements in row-major order, E per cycle (the lanes may straddle rows):

  max      r·k scores: the array's sum → ScoreUnit (SCORE_LATENCY) → z buffer (causally masked keys stored as
           INT32_MIN); each row's max is a pipelined tree over its row of the z buffer, ⌈log₂ k⌉ register levels,
           read at the level that covers k keys.       cycles ⌈r·k/E⌉ + SCORE_LATENCY + ⌈log₂ k⌉
  exp      r·(k+1) elements, per row its k keys then its α: p = exp2(m_new − z) into P (0 where masked) and into the
           row's sum, α = exp2(block max − m_old) where the max grows. At the pass's end m takes the new max.
                                                       cycles ⌈(r·k + r)/E⌉ + EXP_LATENCY
  rescale  r·(d+1) elements, per row its d accumulators then l, through RescaleUnits: A and l of a grown row take
           round_shift(x·α, 15); l then adds the block's p sum. None in a tile's first block (l starts as the p sum).
                                                       cycles ⌈r·(d+1)/E⌉ + RESCALE_LATENCY
`busy` is high in exactly those cycles, the first being the `start` cycle itself (the max pass issues its first
scores then); `done` pulses in the cycle after the last. The geometry inputs (tile_rows r, keys k, dim d, row0, key0,
causal, mult, shift) must hold still from `start` until `done`.

Between blocks the array's P·V partials come in through `results` with `partial_add` (one fold of C columns,
`partial_fold`): A[i][fold·C + j] += partial[i][j], wrapped or saturated to 48 bits as bits.run_head's _clamp.
`p_column` is P's column `p_index` (the array's A operand for P·V); `acc` and `l` are read by the dividers, `acc`
forwarding a partial added in the same cycle (so the dividers may start in the last fold's done cycle).
"""

from __future__ import annotations

from amaranth.hdl import Array, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from codesign.datapath import EXP_LATENCY, OUTPUT_ACC_BITS, RESCALE_LATENCY, SCORE_LATENCY
from codesign.rtl.exp2 import DELTA_BITS, Exp2Unit
from codesign.rtl.mac import OPERAND_BITS, check_overflow
from codesign.rtl.rescale import ALPHA_BITS, RescaleUnit
from codesign.rtl.score import MULT_BITS, SCORE_BITS, SHIFT_BITS, ScoreUnit
from host.errors import SpecError
from host.checks import check_int
from host.q15 import DIM_MAX, INT32_MIN, MODEL_BC_MAX, SEQ_MAX

#: Query and key positions (0..SEQ_MAX) for the causal mask.
POSITION_BITS = SEQ_MAX.bit_length()
L_BITS = 32  # the running sum l (< 2³⁰: Σ of at most 32768 probabilities below 2¹⁵)


def balanced_sum(terms: list):
    """The sum of `terms` as a balanced adder tree (depth ⌈log₂ n⌉): what a circuit of n inputs would build, and a
    shallow expression for Amaranth (a chain of n additions recurses n deep when it is elaborated)."""
    terms = list(terms)
    if not terms:
        return 0
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0]


def walk(row, col, step: int, width):
    """The position `step` elements on from (row, col) in a row-major walk over rows of `width` elements (a lane of
    E walkers, or of D dividers, moving together): (next row, next column). One compare and subtract, no division
    of the position: col + step % width passes the row's end at most once when col < width."""
    col_on = col + step % width
    wrapped = col_on >= width
    return row + step // width + wrapped, Mux(wrapped, col_on - width, col_on)


class SoftmaxUnit(wiring.Component):
    """The softmax unit of an R×C array with E lanes, for heads up to dim_max, fed by acc_bits-wide array sums."""

    def __init__(self, rows: int, cols: int, lanes: int, dim_max: int, acc_bits: int = 40,
                 overflow: str = "wrap") -> None:
        try:
            self.rows = check_int("array rows", rows, 1, MODEL_BC_MAX)
            self.cols = check_int("array cols", cols, 1, MODEL_BC_MAX)
            self.lanes = check_int("exp_lanes", lanes, 1, 4096)
            self.dim_max = check_int("dim_max", dim_max, 1, DIM_MAX)
            self.acc_bits = check_int("acc_bits", acc_bits, 16, 64)
            self.overflow = check_overflow(overflow)
        except SpecError:
            self._MustUse__silence = True  # a rejected unit is not an unused circuit: no UnusedElaboratable warning
            raise
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
            "p_index": In(range(self.cols)),
            "p_column": Out(signed(OPERAND_BITS)).array(self.rows),
            "partial_add": In(1),
            "partial_fold": In(range(self.folds_max)),
            "acc": Out(signed(OUTPUT_ACC_BITS)).array(self.rows, self.dim_max),
            "l": Out(unsigned(L_BITS)).array(self.rows),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        R, C, E = self.rows, self.cols, self.lanes
        r, k, d = self.tile_rows, self.keys, self.dim

        # per-row state, the block's buffers and the output accumulators
        run_max = [Signal(signed(SCORE_BITS), init=INT32_MIN, name=f"m_{i}") for i in range(R)]
        run_sum = [Signal(unsigned(L_BITS), name=f"l_{i}") for i in range(R)]
        p_sum = [Signal(unsigned(L_BITS), name=f"p_sum_{i}") for i in range(R)]
        grow = [Signal(name=f"grow_{i}") for i in range(R)]
        alpha = [Signal(unsigned(ALPHA_BITS), name=f"alpha_{i}") for i in range(R)]
        z_buf = [[Signal(signed(SCORE_BITS), name=f"z_{i}_{j}") for j in range(C)] for i in range(R)]
        p_buf = [[Signal(unsigned(ALPHA_BITS), name=f"p_{i}_{j}") for j in range(C)] for i in range(R)]
        acc = [[Signal(signed(OUTPUT_ACC_BITS), name=f"a_{i}_{c}") for c in range(self.dim_max)] for i in range(R)]
        first = Signal()  # the current block is its tile's first
        for i in range(R):
            m.d.comb += [self.l[i].eq(run_sum[i]), self.p_column[i].eq(Mux(i < r, Array(p_buf[i])[self.p_index], 0))]
        results = Array(Array(row) for row in self.results)

        # the max tree: per row, level 0 is the row of the z buffer (keys ≥ k read as INT32_MIN), each level a register
        depth = ceil_log2(C)
        level_of_k = Signal(range(depth + 1))  # ⌈log₂ k⌉: the number of powers of two below k
        m.d.comb += level_of_k.eq(sum((k > (1 << level)) for level in range(depth)))
        tap = []
        for i in range(R):
            level = [Mux(j < k, z_buf[i][j], INT32_MIN) for j in range(C)] + [INT32_MIN] * ((1 << depth) - C)
            taps = [level[0]]
            for height in range(1, depth + 1):
                nxt = [Signal(signed(SCORE_BITS), name=f"max_{i}_{height}_{j}") for j in range(len(level) // 2)]
                m.d.sync += [reg.eq(Mux(level[2 * j] > level[2 * j + 1], level[2 * j], level[2 * j + 1]))
                             for j, reg in enumerate(nxt)]
                level = nxt
                taps.append(level[0])
            row_tap = Signal(signed(SCORE_BITS), name=f"block_max_{i}")
            m.d.comb += row_tap.eq(Array(taps)[level_of_k])
            tap.append(row_tap)

        # per row: does the block hold a valid key for it, does its max grow, the new max
        row_grows, row_max_new = [], []
        for i in range(R):
            has = ~self.causal | (self.key0 <= self.row0 + i)
            grows = Signal(name=f"grows_{i}")
            max_new = Signal(signed(SCORE_BITS), name=f"max_new_{i}")
            m.d.comb += [grows.eq(has & (tap[i] > run_max[i])), max_new.eq(Mux(grows, tap[i], run_max[i]))]
            row_grows.append(grows)
            row_max_new.append(max_new)

        # the lanes' positions (row, column) in the pass's row-major walk over rows of `width` elements: registers,
        # except in the `start` cycle, where the max pass's walk begins at once
        begin = Signal()  # `start` while idle: the first cycle of the max pass
        lane_row_reg = [Signal(range(R + E + 2), name=f"lane_row_{u}") for u in range(E)]
        lane_col_reg = [Signal(range(max(C, self.dim_max) + 2), name=f"lane_col_{u}") for u in range(E)]
        lane_row = [Mux(begin, u // k, reg) for u, reg in enumerate(lane_row_reg)]
        lane_col = [Mux(begin, u % k, reg) for u, reg in enumerate(lane_col_reg)]

        def restart(width):
            return [s.eq(u // width) for u, s in enumerate(lane_row_reg)] + \
                [s.eq(u % width) for u, s in enumerate(lane_col_reg)]

        def advance(width):
            """Sync statements moving every lane E elements on, and whether the pass has issued its last element."""
            statements = []
            for u in range(E):
                row_on, col_on = walk(lane_row[u], lane_col[u], E, width)
                statements += [lane_col_reg[u].eq(col_on), lane_row_reg[u].eq(row_on)]
            return statements, walk(lane_row[0], lane_col[0], E, width)[0] >= r

        def keep_for(delay, signals, name):
            """The signals `delay` cycles later (registers beside a unit's pipeline)."""
            for stage in range(delay):
                delayed = [Signal.like(s, name=f"{name}_{stage}_{n}") for n, s in enumerate(signals)]
                m.d.sync += [late.eq(early) for late, early in zip(delayed, signals)]
                signals = delayed
            return signals

        def key_valid(row, col):
            return ~self.causal | (self.key0 + col <= self.row0 + row)

        fault = Signal()
        m.d.comb += self.fault.eq(fault)
        issuing = {name: Signal(name=f"issue_{name}") for name in ("max", "exp", "rescale")}
        z_array, p_array = Array(Array(row) for row in z_buf), Array(Array(row) for row in p_buf)
        acc_array = Array(Array(row) for row in acc)
        grow_array, alpha_array, sum_array = Array(grow), Array(alpha), Array(run_sum)
        psum_array = Array(p_sum)
        tap_array, max_array = Array(tap), Array(run_max)
        grows_array, max_new_array = Array(row_grows), Array(row_max_new)
        row_p_sums = [[] for _ in range(R)]
        for u in range(E):
            row, col = lane_row[u], lane_col[u]
            live = row < r
            # max pass: the score unit, then the z buffer
            score = ScoreUnit(self.acc_bits)
            m.submodules[f"score_{u}"] = score
            m.d.comb += [score.acc.eq(results[row][col]), score.mult.eq(self.mult), score.shift.eq(self.shift),
                         score.valid_in.eq(issuing["max"] & live)]
            s_valid, s_row, s_col = keep_for(SCORE_LATENCY, [issuing["max"] & live, row, col], f"score_tag_{u}")
            with m.If(score.valid_out != s_valid):
                m.d.sync += fault.eq(1)
            with m.If(s_valid):
                m.d.sync += z_array[s_row][s_col].eq(Mux(key_valid(s_row, s_col), score.z, INT32_MIN))
            # exp pass: p of each key (col < k), α of the row (col == k)
            exp = Exp2Unit()
            m.submodules[f"exp2_{u}"] = exp
            is_alpha = col == k
            valid_key = key_valid(row, col)
            keep = Mux(is_alpha, grows_array[row], valid_key)
            delta_p = Mux(valid_key, max_new_array[row] - z_array[row][col], 0)
            delta_alpha = Mux(grows_array[row], tap_array[row] - max_array[row], 0)
            m.d.comb += [exp.delta.eq(Mux(is_alpha, delta_alpha, delta_p)[:DELTA_BITS]),
                         exp.valid_in.eq(issuing["exp"] & live)]
            e_valid, e_row, e_col, e_alpha, e_keep = keep_for(
                EXP_LATENCY, [issuing["exp"] & live, row, col, is_alpha, keep], f"exp_tag_{u}")
            with m.If(exp.valid_out != e_valid):
                m.d.sync += fault.eq(1)
            value = Mux(e_keep, exp.p, 0)
            with m.If(e_valid & e_alpha):
                m.d.sync += alpha_array[e_row].eq(value)
            with m.If(e_valid & ~e_alpha):
                m.d.sync += p_array[e_row][e_col].eq(value)
            for i in range(R):
                row_p_sums[i].append(Mux(e_valid & ~e_alpha & (e_row == i), value, 0))
            # rescale pass: the row's accumulators (col < d), then its l (col == d)
            rescale = RescaleUnit(OUTPUT_ACC_BITS, signed=True)
            m.submodules[f"rescale_{u}"] = rescale
            is_l = col == d
            m.d.comb += [rescale.x.eq(Mux(is_l, sum_array[row], acc_array[row][col])),
                         rescale.alpha.eq(alpha_array[row]), rescale.valid_in.eq(issuing["rescale"] & live)]
            r_valid, r_row, r_col, r_l = keep_for(RESCALE_LATENCY, [issuing["rescale"] & live, row, col, is_l],
                                                  f"rescale_tag_{u}")
            with m.If(rescale.valid_out != r_valid):
                m.d.sync += fault.eq(1)
            grown = grow_array[r_row]
            with m.If(r_valid & r_l):
                m.d.sync += sum_array[r_row].eq(Mux(grown, rescale.y, sum_array[r_row]) + psum_array[r_row])
            with m.If(r_valid & ~r_l & grown):
                m.d.sync += acc_array[r_row][r_col].eq(rescale.y)

        # the block's p sums: into l directly in a tile's first block (l starts at 0), else kept for the rescale
        for i in range(R):
            block_sum = balanced_sum(row_p_sums[i])
            with m.If(first):
                m.d.sync += run_sum[i].eq(run_sum[i] + block_sum)
            with m.Else():
                m.d.sync += p_sum[i].eq(p_sum[i] + block_sum)

        # P·V partials into the output accumulators, wrapped or saturated to 48 bits; `acc` shows the sum at once
        low, high = -(1 << (OUTPUT_ACC_BITS - 1)), (1 << (OUTPUT_ACC_BITS - 1)) - 1
        for i in range(R):
            for c in range(self.dim_max):
                total = acc[i][c] + self.results[i][c % C]
                if self.overflow == "wrap":
                    fitted = total[:OUTPUT_ACC_BITS].as_signed()
                else:
                    fitted = Mux(total > high, high, Mux(total < low, low, total))
                adding = self.partial_add & (self.partial_fold == c // C) & (i < r) & (c < d)
                m.d.comb += self.acc[i][c].eq(Mux(adding, fitted, acc[i][c]))
                with m.If(adding):
                    m.d.sync += acc[i][c].eq(fitted)

        drain = Signal(range(SCORE_LATENCY + depth + EXP_LATENCY + RESCALE_LATENCY + 1))
        m.d.sync += self.done.eq(0)

        def issue_scores():
            """A cycle of the max pass: E scores issued (above), the lanes moved on, the drain once all are in."""
            m.d.comb += [self.busy.eq(1), issuing["max"].eq(1)]
            statements, last = advance(k)
            m.d.sync += statements
            with m.If(last):
                m.d.sync += drain.eq(SCORE_LATENCY + level_of_k - 1)
                m.next = "MAX_DRAIN"
            with m.Else():
                m.next = "MAX"

        with m.FSM(name="softmax"):
            with m.State("IDLE"):
                m.d.comb += begin.eq(self.start)
                with m.If(self.start):
                    m.d.sync += first.eq(self.first)
                    m.d.sync += [s.eq(0) for s in p_sum]
                    with m.If(self.first):
                        m.d.sync += [s.eq(INT32_MIN) for s in run_max] + [s.eq(0) for s in run_sum]
                        m.d.sync += [a.eq(0) for row in acc for a in row]
                    issue_scores()
            with m.State("MAX"):
                issue_scores()
            with m.State("MAX_DRAIN"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += drain.eq(drain - 1)
                with m.If(drain == 0):
                    m.d.sync += restart(k + 1)
                    m.next = "EXP"
            with m.State("EXP"):
                m.d.comb += [self.busy.eq(1), issuing["exp"].eq(1)]
                statements, last = advance(k + 1)
                m.d.sync += statements
                with m.If(last):
                    m.d.sync += drain.eq(EXP_LATENCY - 1)
                    m.next = "EXP_DRAIN"
            with m.State("EXP_DRAIN"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += drain.eq(drain - 1)
                with m.If(drain == 0):
                    for i in range(R):  # the rows' new max and growth, now that every p and α has been taken
                        with m.If(i < r):
                            m.d.sync += [grow[i].eq(row_grows[i]), run_max[i].eq(row_max_new[i])]
                    with m.If(first):
                        m.d.sync += self.done.eq(1)
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += restart(d + 1)
                        m.next = "RESCALE"
            with m.State("RESCALE"):
                m.d.comb += [self.busy.eq(1), issuing["rescale"].eq(1)]
                statements, last = advance(d + 1)
                m.d.sync += statements
                with m.If(last):
                    m.d.sync += drain.eq(RESCALE_LATENCY - 1)
                    m.next = "RESCALE_DRAIN"
            with m.State("RESCALE_DRAIN"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += drain.eq(drain - 1)
                with m.If(drain == 0):
                    m.d.sync += self.done.eq(1)
                    m.next = "IDLE"
        return m
