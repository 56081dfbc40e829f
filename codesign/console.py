"""What the codesign commands print beside their results, written once: figures in human units (ns..s, nJ..J, one
unit picked per value), the machine's state beside a timing (its load average and a fixed numpy matmul timed right
before, the anchor a reader divides by, so a loaded machine can be told from a slower model), and progress that
shows in a log as well as on a terminal."""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

SECONDS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
JOULES = ((1.0, "J"), (1e-3, "mJ"), (1e-6, "µJ"), (1e-9, "nJ"))


def unit_for(value: float, units: tuple[tuple[float, str], ...]) -> tuple[float, str]:
    """The largest unit in which `value` (rounded to 3 significant digits first, so 999.7 µs is 1 ms) is at least 1;
    the smallest for values below it and for 0."""
    if not math.isfinite(value) or value == 0:
        return units[-1] if value == 0 else units[0]
    rounded = float(f"{abs(value):.3g}")
    return next(((scale, name) for scale, name in units if rounded >= scale), units[-1])


def human(value: float, units: tuple[tuple[float, str], ...], band: tuple[float, float] | None = None) -> str:
    """`value` with 3 significant digits in its unit ('44.4 ms', '3.01 J'), and the band (low, high) in the same
    unit when given: '1.05 mJ (0.704..1.56)'."""
    if not math.isfinite(value):
        return "n/a"
    scale, name = unit_for(value, units)
    text = f"{value / scale:.3g} {name}"
    if band is not None:
        text += f" ({band[0] / scale:.3g}..{band[1] / scale:.3g})"
    return text


def seconds(value: float, band: tuple[float, float] | None = None) -> str:
    return human(value, SECONDS, band)


def joules(value: float, band: tuple[float, float] | None = None) -> str:
    return human(value, JOULES, band)


#: The anchor: one float64 numpy matmul of this size (2·512³ = 268 MFLOP), median of ANCHOR_REPEATS, timed right before
#: the work it anchors. It runs on the same BLAS threads and cores as the work, so it slows as the work does when
#: other jobs share the machine.
ANCHOR_SIZE = 512
ANCHOR_REPEATS = 7


@dataclass(frozen=True)
class Machine:
    """The machine's state when a timing began: load averages (1, 5, 15 min), cores, the anchor's seconds."""

    load: tuple[float, float, float]
    cores: int
    anchor_s: float

    def line(self) -> str:
        one, five, fifteen = self.load
        return (f"machine: load average {one:.2f}, {five:.2f}, {fifteen:.2f} (1, 5, 15 min) on {self.cores} cores; "
                f"anchor: a {ANCHOR_SIZE}x{ANCHOR_SIZE} float64 numpy matmul takes {seconds(self.anchor_s)} "
                f"(median of {ANCHOR_REPEATS}, just now)")

    def ratio(self, elapsed_s: float) -> str:
        """`elapsed_s` in anchors: '12.3 s = 2,410 anchors'."""
        return f"{seconds(elapsed_s)} = {elapsed_s / self.anchor_s:,.0f} anchors"


def machine() -> Machine:
    """Measure the load and the anchor now (about 30 ms on an idle 2-core machine)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((ANCHOR_SIZE, ANCHOR_SIZE))  # (n, n)
    b = rng.standard_normal((ANCHOR_SIZE, ANCHOR_SIZE))  # (n, n)
    a @ b  # warm-up: BLAS threads started, pages touched
    times = []
    for _ in range(ANCHOR_REPEATS):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    try:
        load = os.getloadavg()
    except OSError:  # no load average on this system: said as NaN, never as 0
        load = (math.nan, math.nan, math.nan)
    return Machine(tuple(load), os.cpu_count() or 1, statistics.median(times))


def say(command: str, text: str) -> None:
    """One progress line on stderr, flushed at once (a log shows it when it happens)."""
    print(f"{command}: {text}", file=sys.stderr, flush=True)


class Progress:
    """`done` of `total` work items: a tqdm bar on a terminal; in a log (stderr not a terminal) a line every
    `every` seconds and one at the end, so a redirected run is never silent for long:
    `codesign run: RTL: 2,048 of 4,565 cycles, 5 s`. `what` names the work after the command; None where the command
    names it already (`codesign widths: 12 of 528 heads`, not `codesign widths: widths: …`). When the count ends
    elsewhere than `total` (an estimate), the last line says so rather than showing 4,565 of 4,564."""

    def __init__(self, command: str, what: str | None, total: int, unit: str, every: float = 5.0, **bar_options):
        self.command, self.what, self.total, self.unit, self.every = command, what, total, unit, every
        self.done = 0
        self.closed = False
        self.start = self.last = time.perf_counter()
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=what or command, unit=unit, file=sys.stderr, leave=False, **bar_options)

    def update(self, count: int = 1) -> None:
        self.done += count
        if self.bar is not None:
            self.bar.update(count)
            return
        now = time.perf_counter()
        if self.done >= self.total:
            self.close()  # the last item: its line now, not when the caller's block ends
        elif now - self.last >= self.every:
            self.last = now
            say(self.command, f"{self._label()}{self.done:,} of {self.total:,} {self.unit}s, {now - self.start:.0f} s")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif not self.closed:
            count = (f"{self.done:,} of {self.total:,} {self.unit}s" if self.done == self.total else
                     f"{self.done:,} {self.unit}s (the total of {self.total:,} was an estimate)")
            say(self.command, f"{self._label()}{count} in {time.perf_counter() - self.start:.1f} s")
        self.closed = True

    def _label(self) -> str:
        return f"{self.what}: " if self.what else ""

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None or exc[0] is None:  # an interrupted count in a log: guard's line says it stopped
            self.close()



def problem_text(problem, join: str = " ") -> str:
    """A problem's shape as the codesign commands print it: 'B 1 H 32/8 N 8192 q_len 1 d 128 causal' (K/V heads and
    q_len only where they differ from heads and seq), its parts separated by `join`."""
    heads = f"H {problem.heads}" + (f"/{problem.kv_heads}" if problem.kv_heads is not None else "")
    parts = [f"B {problem.batch}", heads, f"N {problem.seq}"]
    if problem.q_len is not None:
        parts.append(f"q_len {problem.q_len}")
    parts.append(f"d {problem.dim}")
    return join.join(parts) + (f"{join.rstrip()} causal" if problem.causal else "")
