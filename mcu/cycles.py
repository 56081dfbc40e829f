"""How long the Q15 kernel runs: an estimate of its Cortex-M4 cycles, for the host's waits and the twin's messages.

The kernel's cost grows with the (query, key) pairs it visits: per pair, the score's dot product (d
multiply-accumulates), the EXP2 step and the P·V update (d more), plus per-block and per-row overheads that shrink
per pair as the head grows. Up to d 64 the kernel takes query rows two at a time (2×2 register blocking), at about
half the cycles; above, and for a call's odd last row, one at a time. Measured with the twin's cycle model (`python
-m mcu.sim.bench`, reports/bench-mcu/), cycles per pair visited at Bc 32, seq 32 to 256, causal or not (the causal
seq 32 heads aside): two rows at a time 54–64 at d 1, 71–85 at d 8, 95–115 at d 16, 142–174 at d 32, 254–276 at d
59, 267–290 at d 64; one row at a time 143–160 at d 1, 158–178 at d 8, 201–225 at d 16, 293–324 at d 32, 506–538 at
d 59, 511–531 at d 64, 897–976 at d 128. `TWO_ROW_CYCLES_BASE + TWO_ROW_CYCLES_PER_DIM · d` and `PAIR_CYCLES_BASE +
PAIR_CYCLES_PER_DIM · d` lie above every one of them, within 40 % of the measured cycles, so the estimate is an
upper bound at those shapes. Short causal heads, whose rows see few keys each, run over it: seq 32 causal measures
up to 1.3× the estimate (1.1× at d 128), as it did before rows went two at a time. Score scales with r < 22
(mcu/native/attention_q15.c PAIR_SHIFT_MIN: extreme input exponents) also take rows one at a time, at up to 2.4× the
two-row estimate (d 1; 1.8× at d 64); the host's WAIT_FACTOR of 4 covers both. Each row also costs a fixed amount
per call (`ROW_CYCLES_*`: its division and, streamed, its state), which dominates a streamed call of few keys.

The twin emulates 1.0–1.8·10⁷ modelled cycles per second of wall time on the 2-core development VM (the same runs);
`TWIN_CYCLES_PER_S` is the low end. A real F407 runs them at its clock, 168 MHz.
"""

from __future__ import annotations

#: Cycles per (query, key) pair visited with query rows one at a time, and two at a time (dim <= TWO_ROW_DIM_MAX).
PAIR_CYCLES_BASE = 160
PAIR_CYCLES_PER_DIM = 7.5
TWO_ROW_CYCLES_BASE = 64
TWO_ROW_CYCLES_PER_DIM = 3.7
#: Cycles per query row per call, whatever keys it visits: the final division (d columns) and, in a streamed call, the
#: row's state read and written back. Measured on streamed calls of one key, where they dominate (review of issue 15:
#: 360,000 cycles for 86 rows at d 64, 190,000 for 200 rows at d 8, 240,000 for 400 rows at d 1), and above each.
ROW_CYCLES_BASE = 500
ROW_CYCLES_PER_DIM = 55
#: mcu/native/attention_q15.c PAIR_DIM_MAX: the largest dim whose rows go two at a time.
TWO_ROW_DIM_MAX = 64
#: Modelled cycles the twin emulates per wall second on the development VM (low end of the measured range).
TWIN_CYCLES_PER_S = 1.0e7
#: The twin stops one kernel call after this much emulation (its error names the cap and the expected time); the
#: host refuses beforehand a call the estimate puts above it.
TWIN_EMULATION_CAP_S = 600.0
#: The host waits this many times the estimate before calling a RUN lost: a loaded machine, a slower board clock.
WAIT_FACTOR = 4.0


def pairs(seq: int, row0: int, nrows: int, causal: bool, key0: int = 0, key1: int | None = None) -> int:
    """(query, key) pairs the kernel visits for query rows row0 .. row0+nrows-1 and keys key0 .. key1-1 (default
    all): each row sees those keys, or with the causal mask those up to its own position."""
    key1 = seq if key1 is None else key1
    if not causal:
        return nrows * max(0, key1 - key0)
    seen = 0
    for i in range(row0, row0 + nrows):  # row i sees keys key0 .. min(key1, i + 1) - 1
        seen += max(0, min(key1, i + 1) - key0)
    return seen


def kernel_cycles(seq: int, dim: int, row0: int, nrows: int, causal: bool, key0: int = 0,
                  key1: int | None = None) -> int:
    """Estimated Cortex-M4 cycles of one kernel call over nrows query rows and keys key0 .. key1-1 (a streamed
    chunk; default all keys), an upper bound at the measured shapes: the rows the kernel takes two at a time, then an
    odd last row (or every row, above TWO_ROW_DIM_MAX) alone, then each row's own work (its division, its state)."""
    two = nrows - nrows % 2 if dim <= TWO_ROW_DIM_MAX else 0
    return int(pairs(seq, row0, two, causal, key0, key1) * (TWO_ROW_CYCLES_BASE + TWO_ROW_CYCLES_PER_DIM * dim)
               + pairs(seq, row0 + two, nrows - two, causal, key0, key1)
               * (PAIR_CYCLES_BASE + PAIR_CYCLES_PER_DIM * dim)
               + nrows * (ROW_CYCLES_BASE + ROW_CYCLES_PER_DIM * dim))


def twin_seconds(cycles: int) -> float:
    """Expected wall seconds of emulating `cycles` on the twin."""
    return cycles / TWIN_CYCLES_PER_S


#: The clock assumed for a board that cannot say its own (HELLO's clock_hz 0: a port without machine.freq()): the
#: STM32F407's internal RC oscillator, the slowest it runs at, so that a wait derived from it is long enough.
UNKNOWN_CLOCK_HZ = 16_000_000


def board_seconds(cycles: int, clock_hz: int) -> float:
    """Seconds of `cycles` at the board's clock (UNKNOWN_CLOCK_HZ where the board did not say it: 0)."""
    return cycles / (clock_hz if clock_hz > 0 else UNKNOWN_CLOCK_HZ)
