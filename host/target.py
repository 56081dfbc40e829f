"""What every target shares: the options a run passes in, the inputs, and one way to build a `Result` row.

A target module (host/cpu.py, kernels/target.py, mcu/target.py) is cheap to import (heavy imports happen inside its
functions) and exposes:

- ``KERNELS``: {kernel name: the dtype it computes in};
- ``available() -> (bool, reason)``: whether this machine can run it, and if not, why;
- ``device() -> str``: what it runs on, in words (stamped on every row);
- ``run(problem, inputs, options) -> list[Result]``: measure one problem with one kernel (``options.kernel``).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from host.errors import SpecError
from host.problem import AttentionProblem
from host.reference import attention
from host.results import Result


@dataclass(frozen=True)
class RunContext:
    """Who is measuring: the run's id, the code's git revision and the host's name, stamped on every row."""

    run_id: str
    git_rev: str
    host: str

    def result(self, problem: AttentionProblem, target: str, kernel: str, device: str, **fields: object) -> Result:
        """A row for `problem` on `target`/`kernel`, stamped now; `fields` fills timing, accuracy and extras."""
        timestamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        return Result(run_id=self.run_id, timestamp=timestamp, git_rev=self.git_rev, host=self.host, device=device,
                      target=target, kernel=kernel, dtype=problem.dtype, batch=problem.batch, heads=problem.heads,
                      seq=problem.seq, dim=problem.dim, causal=problem.causal, seed=problem.seed, **fields)


@dataclass(frozen=True)
class RunOptions:
    """How to measure: which kernel, warm-ups and timed repeats, and target-specific switches in `extra`."""

    context: RunContext
    kernel: str
    warmup: int = 2
    iters: int = 10
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise SpecError(f"warmup={self.warmup!r} is out of range; allowed: >= 0")
        if not isinstance(self.iters, int) or self.iters < 1:
            raise SpecError(f"iters={self.iters!r} is out of range; allowed: >= 1")


class Inputs:
    """The problem's seeded Q, K, V (float32, (B, H, N, d)) and, computed once on first use, its float64 golden."""

    def __init__(self, problem: AttentionProblem):
        self.problem = problem
        self.q, self.k, self.v = problem.inputs()

    @cached_property
    def golden(self) -> np.ndarray:
        """float64 (B, H, N, d): the output every target is diffed against."""
        return attention(self.q, self.k, self.v, self.problem.causal, np.float64)
