"""The R×C output-stationary systolic array of Q15 MAC cells (codesign/rtl/mac.py) that computes one GEMM fold.

A fold is C (R×C) = A (R×T) · B (T×C) with the reduction index t streamed: in T consecutive cycles the caller presents
the column A[:, t] on `a` and the row B[t, :] on `b`, unskewed, with `valid`, `first` on t = 0 and `last` on t = T−1.
The array skews them itself: row i of A (with `valid` and `first`) is delayed i cycles before cell (i, 0), column j of
B j cycles before cell (0, j); inside, a and the flags move one cell right per cycle and b one cell down. So cell
(i, j) adds A[i][t]·B[t][j] in cycle c0 + t + i + j, the last cell (R−1, C−1) its last product in c0 + T + R + C − 3.

At the end of that cycle every accumulator holds its final sum (cell (i, j) finished in c0 + T − 1 + i + j, and the
next fold reaches it no earlier than done + i + j), so one capture strobe, `last` delayed R + C − 2 cycles and given to
every cell's `last_in`, copies all the sums into the cells' shadow registers at once (the cells' own last chain is
unused: a per-cell capture would overwrite cell (0, 0)'s result T cycles into the next fold, before its done).
`done` is that strobe one cycle later: a pulse in c0 + T + R + C − 2, which is codesign/gemm.py's os fold_cycles
after c0. From the done cycle until the next fold's done, `result[i][j]` holds C[i][j] of this fold, and the next
fold's first vector may come in the done cycle itself (no earlier: cell (0, 0) clears its accumulator on it). Rows
and columns the GEMM does not use may carry anything; they change no other cell's result.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from codesign.datapath import ACC_BITS_MAX, ACC_BITS_MIN, ARRAY_MAX
from codesign.rtl.mac import OPERAND_BITS, MacCell, check_overflow
from host.checks import check_int


def check_systolic_array(rows: int, cols: int, acc_bits: int = 40,
                         overflow: str = "wrap") -> tuple[int, int, int, str]:
    """(rows, cols, acc_bits, overflow) of a SystolicArray; SpecError quoting the first bad one."""
    return (check_int("array rows", rows, 1, ARRAY_MAX), check_int("array cols", cols, 1, ARRAY_MAX),
            check_int("acc_bits", acc_bits, ACC_BITS_MIN, ACC_BITS_MAX), check_overflow(overflow))


class SystolicArray(wiring.Component):
    """rows × cols MacCells (1..256 each), dataflow os, acc_bits 16..64, overflow "wrap" or "saturate"."""

    def __new__(cls, *args, **kwargs):
        check_systolic_array(*args, **kwargs)  # before the array exists: a rejected one is no Elaboratable left unused
        return super().__new__(cls, src_loc_at=1)

    def __init__(self, rows: int, cols: int, acc_bits: int = 40, overflow: str = "wrap") -> None:
        self.rows, self.cols, self.acc_bits, self.overflow = check_systolic_array(rows, cols, acc_bits, overflow)
        super().__init__({
            "a": In(signed(OPERAND_BITS)).array(self.rows),  # A[i][t], row i on a[i], not skewed
            "b": In(signed(OPERAND_BITS)).array(self.cols),  # B[t][j], column j on b[j], not skewed
            "valid": In(1),
            "first": In(1),
            "last": In(1),
            "result": Out(signed(self.acc_bits)).array(self.rows, self.cols),  # the cells' shadow registers
            "done": Out(1),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        rows, cols = self.rows, self.cols
        cells = [[MacCell(self.acc_bits, self.overflow) for _ in range(cols)] for _ in range(rows)]
        for i in range(rows):
            for j in range(cols):
                m.submodules[f"cell_{i}_{j}"] = cells[i][j]

        # The flags of row i are `valid` and `first` delayed i cycles: one shared chain, row i taps stage i.
        valid_skew = _delay_line(m, self.valid, rows - 1, "valid_skew")
        first_skew = _delay_line(m, self.first, rows - 1, "first_skew")
        for i in range(rows):
            m.d.comb += [
                cells[i][0].a_in.eq(_delay_line(m, self.a[i], i, f"a_skew_{i}")[i]),
                cells[i][0].valid_in.eq(valid_skew[i]),
                cells[i][0].first_in.eq(first_skew[i]),
            ]
            for j in range(1, cols):
                left = cells[i][j - 1]
                m.d.comb += [
                    cells[i][j].a_in.eq(left.a_out),
                    cells[i][j].valid_in.eq(left.valid_out),
                    cells[i][j].first_in.eq(left.first_out),
                ]
        for j in range(cols):
            m.d.comb += cells[0][j].b_in.eq(_delay_line(m, self.b[j], j, f"b_skew_{j}")[j])
            for i in range(1, rows):
                m.d.comb += cells[i][j].b_in.eq(cells[i - 1][j].b_out)

        # The fold's last vector reaches the last cell R + C − 2 cycles after it came in: capture everywhere then.
        last_valid = Signal()
        m.d.comb += last_valid.eq(self.last & self.valid)
        drain = _delay_line(m, last_valid, rows + cols - 1, "drain")
        capture = drain[rows + cols - 2]
        for i in range(rows):
            for j in range(cols):
                m.d.comb += [
                    cells[i][j].last_in.eq(capture),
                    self.result[i][j].eq(cells[i][j].result),
                ]
        m.d.comb += self.done.eq(drain[rows + cols - 1])
        return m


def _delay_line(m: Module, source, stages: int, name: str) -> list:
    """[source, source one cycle late, …, `stages` cycles late]: a chain of `stages` registers of source's shape."""
    taps = [source]
    for stage in range(1, stages + 1):
        register = Signal.like(source, name=f"{name}_{stage}")
        m.d.sync += register.eq(taps[-1])
        taps.append(register)
    return taps
