"""Read one element of a grid of registers at a row and column known only at run time, as RTL: the row's registers
side by side selected by the row (a multiplexer of R wide inputs), then the element within it by the column (a part
select). The same element as an amaranth `Array` of `Array`s indexed twice, which Amaranth's Verilog export writes as
a multiplexer over the columns for every row and one over those: R·C cases a reader, which for the head engine's
readers of the R·d output accumulators (every rescale lane and every divider) made the 32×32 engine's Verilog
too large to compile. A row or column out of range reads the last row, or bits that no caller uses."""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Signal, Value


def select(m: Module, grid: list[list[Signal]], row, col, name: str) -> Signal:
    """grid[row][col] as a signal of the elements' shape (every element of one shape)."""
    shape = grid[0][0].shape()
    line = Signal(shape.width * len(grid[0]), name=f"{name}_row")
    m.d.comb += line.eq(Array(Cat(*elements) for elements in grid)[row])
    element = Signal(shape, name=name)
    m.d.comb += element.eq(line.word_select(Value.cast(col).as_unsigned(), shape.width))
    return element
