"""How long the Q15 kernel runs: an estimate of its Cortex-M4 cycles, for the host's waits and the twin's messages.

The kernel's cost grows with the (query, key) pairs it visits: per pair, the score's dot product (d multiply-
accumulates), the EXP2 step and the P·V update (d more), plus per-block and per-row overheads that shrink per pair as
the head grows. Measured with the twin's cycle model (`python -m mcu.sim.bench` and reports/bench-mcu/), cycles per
pair visited at Bc 32: 150 at d 1, 163 at d 8, 221 at d 16, 309 at d 32, 525 at d 64, 1003 at d 128 (seq 32 to 256,
causal or not). `PAIR_CYCLES_BASE + PAIR_CYCLES_PER_DIM · d` lies above every one of them, so the estimate is an upper
bound for those shapes, and within 25 % of the measured cycles from d 16 on.

The twin emulates 1.0–1.8·10⁷ modelled cycles per second of wall time on the 2-core development VM (the same runs);
`TWIN_CYCLES_PER_S` is the low end. A real F407 runs them at its clock, 168 MHz.
"""

from __future__ import annotations

PAIR_CYCLES_BASE = 160
PAIR_CYCLES_PER_DIM = 7.5
#: Modelled cycles the twin emulates per wall second on the development VM (low end of the measured range).
TWIN_CYCLES_PER_S = 1.0e7
#: The twin stops one kernel call after this much emulation (its error names the cap and the expected time); the
#: host refuses beforehand a call the estimate puts above it.
TWIN_EMULATION_CAP_S = 600.0
#: The host waits this many times the estimate before calling a RUN lost: a loaded machine, a slower board clock.
WAIT_FACTOR = 4.0


def pairs(seq: int, row0: int, nrows: int, causal: bool) -> int:
    """(query, key) pairs the kernel visits for query rows row0 .. row0+nrows-1: each sees seq keys, or with the
    causal mask the keys 0 .. its own position."""
    if not causal:
        return nrows * seq
    first, last = row0 + 1, row0 + nrows
    return (first + last) * nrows // 2


def kernel_cycles(seq: int, dim: int, row0: int, nrows: int, causal: bool) -> int:
    """Estimated Cortex-M4 cycles of one kernel call over nrows query rows (an upper bound at the measured shapes)."""
    return int(pairs(seq, row0, nrows, causal) * (PAIR_CYCLES_BASE + PAIR_CYCLES_PER_DIM * dim))


def twin_seconds(cycles: int) -> float:
    """Expected wall seconds of emulating `cycles` on the twin."""
    return cycles / TWIN_CYCLES_PER_S


def board_seconds(cycles: int, clock_hz: int) -> float:
    """Seconds of `cycles` at the board's clock."""
    return cycles / clock_hz
