"""Timing discipline written once: the summary every target's rows carry, and a wall-clock loop for host code.

`summarize` turns raw per-call samples (milliseconds, from any clock: CUDA events, perf_counter, DWT cycles / clock)
into mean, p50, p99, min and a 95 % bootstrap confidence interval of the median, so a reader can tell noise from a
difference. `time_calls` is the host-side loop: warm-ups first, then one perf_counter_ns sample per call, optionally
inside a `window` (a context manager entered just before the first timed call and left after the last: a meter that
reads energy counters around exactly the timed calls, host/cpu/rapl.py).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable, ContextManager, Sequence

import numpy as np
from scipy import stats

from host.errors import SpecError


@dataclass(frozen=True)
class Timing:
    """Summary of n samples, all in milliseconds."""

    mean_ms: float
    p50_ms: float
    p99_ms: float
    min_ms: float
    p50_ci_low_ms: float
    p50_ci_high_ms: float
    iters: int

    def as_fields(self) -> dict[str, float | int]:
        """The Result fields this summary fills."""
        return dict(self.__dict__)


def summarize(samples_ms: Sequence[float], confidence: float = 0.95, seed: int = 0) -> Timing:
    """Summarise per-call times; the median's CI is a percentile bootstrap (a single sample: CI = the sample)."""
    x = np.asarray(samples_ms, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise SpecError(f"timing needs at least one sample, got {x.size}")
    if not np.all(np.isfinite(x)) or np.any(x < 0):
        raise SpecError(f"timing samples must be finite and >= 0, got {x.tolist()[:8]}")
    p50 = float(np.median(x))
    if x.size < 3 or np.ptp(x) == 0.0:
        low, high = float(x.min()), float(x.max())
    else:
        ci = stats.bootstrap((x,), np.median, confidence_level=confidence, method="percentile", n_resamples=2000,
                             random_state=np.random.default_rng(seed), vectorized=True).confidence_interval
        low, high = float(ci.low), float(ci.high)
    return Timing(mean_ms=float(x.mean()), p50_ms=p50, p99_ms=float(np.percentile(x, 99)), min_ms=float(x.min()),
                  p50_ci_low_ms=min(low, p50), p50_ci_high_ms=max(high, p50), iters=int(x.size))


def time_calls(fn: Callable[[], object], warmup: int, iters: int,
               window: ContextManager[object] | None = None) -> list[float]:
    """Call fn `warmup` times untimed, then `iters` times (inside `window` when given), returning each call's wall
    time in milliseconds."""
    if warmup < 0:
        raise SpecError(f"warmup={warmup} is negative; allowed: >= 0")
    if iters < 1:
        raise SpecError(f"iters={iters} is out of range; allowed: >= 1")
    for _ in range(warmup):
        fn()
    samples = []
    with window if window is not None else contextlib.nullcontext():
        for _ in range(iters):
            start = time.perf_counter_ns()
            fn()
            samples.append((time.perf_counter_ns() - start) / 1e6)
    return samples
