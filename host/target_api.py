"""The contract between host.compare and every target: what a target module exposes, the options a run passes in,
the inputs, and the one way to build a `Result` row (with its verdict).

A target module (host/cpu/target.py, kernels/target.py, mcu/target.py, codesign/target.py) is cheap to import (heavy imports happen inside its
functions) and exposes:

- ``KERNELS``: {kernel name: the dtype it computes in}, or ``kernels(settings)`` returning it where the kernels are
  named after the target's options (the asic target: one kernel per datapath); ``REPEATS`` (optional): its default
  (warm-up, timed) calls;
- ``add_options(group)``: its own command-line options, added to an argparse group host.compare gives it;
- ``settings(args) -> Settings``: its typed, validated settings (a frozen dataclass) from the parsed arguments;
- ``available(settings) -> (bool, reason)``: whether this machine can run it, and if not, why;
- ``open_session(settings)`` (optional): a context manager holding a device for the whole sweep, yielding a session;
- ``device(settings, session) -> str``: what it runs on, in words (stamped on every row; ``--resume`` counts a row as
  done only on the device that measured it, unless the module sets ``RESUME_BY_DEVICE = False``);
- ``run(problem, inputs, options) -> list[Result]``: measure one problem with one kernel (``options.kernel``); a
  row with timing figures says where they come from (``timing_source``: ``measured: <clock>`` or
  ``modelled: <model>``; host/results.py refuses the row otherwise).

Rows are built by `RunContext.result`: a row that carries an output's figures gets its status from its `Verdict`
(host/verdict.py), so no target can write `ok` without having been judged.
"""

from __future__ import annotations

import datetime as _dt
import platform
import secrets
import subprocess
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable

import numpy as np

from host.errors import SpecError
from host.problem import AttentionProblem
from host.reference import attention
from host.results import Result
from host.verdict import Verdict


@dataclass(frozen=True)
class RunContext:
    """Who is measuring: the run's id, the code's git revision and the host's name, stamped on every row."""

    run_id: str
    git_rev: str
    host: str

    @classmethod
    def start(cls) -> "RunContext":
        """A new run on this machine: a time-stamped random id, the checkout's revision, the host's name."""
        return cls(run_id=time.strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(2), git_rev=git_revision(),
                   host=platform.node())

    def result(self, problem: AttentionProblem, target: str, kernel: str, device: str, verdict: Verdict | None = None,
               **fields: object) -> Result:
        """A row for `problem` on `target`/`kernel`, stamped now; `fields` fills timing and extras.

        A row with an output passes its `verdict`, which sets the error figures, bit_exact and the status (`ok` or
        `wrong`); a `message` in `fields` (a note such as the link's retries) is kept after the verdict's. A row
        without a verdict must carry a failure status (error, oom, skipped) and its message."""
        if verdict is not None:
            note = str(fields.pop("message", "") or "")
            fields.update(verdict.as_fields())
            fields["message"] = "; ".join(text for text in (verdict.message, note) if text)
        elif fields.get("status", "ok") == "ok":
            raise ValueError(f"a {target}/{kernel} row without a verdict needs a failure status; got status ok")
        timestamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        return Result(run_id=self.run_id, timestamp=timestamp, git_rev=self.git_rev, host=self.host, device=device,
                      target=target, kernel=kernel, dtype=problem.dtype, batch=problem.batch, heads=problem.heads,
                      seq=problem.seq, dim=problem.dim, causal=problem.causal, seed=problem.seed, **fields)


def host_memory_available() -> int | None:
    """MemAvailable of /proc/meminfo in bytes; None where the kernel does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def git_revision() -> str:
    """The checkout's short revision, '+dirty' when it has changes; 'unknown' outside a git checkout."""
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (rev + ("+dirty" if dirty else "")) if rev else "unknown"


@dataclass(frozen=True)
class RunOptions:
    """How to measure: which kernel, warm-ups and timed repeats, the target's own typed `settings` (its Settings
    class, built by its `settings(args)`) and the `session` its open_session yielded (None when it has none)."""

    context: RunContext
    kernel: str
    warmup: int = 2
    iters: int = 10
    settings: object = None
    session: object = None

    def __post_init__(self) -> None:
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise SpecError(f"warmup={self.warmup!r} is out of range; allowed: >= 0")
        if not isinstance(self.iters, int) or self.iters < 1:
            raise SpecError(f"iters={self.iters!r} is out of range; allowed: >= 1")


class Inputs:
    """The problem's seeded Q, K, V (float32, (B, H, N, d)) and, computed once on first use, its float64 golden.

    Building them needs `bytes_needed(problem)` of host memory; a problem beyond what the machine has available is
    refused with a MemoryError saying both figures, before anything is allocated."""

    def __init__(self, problem: AttentionProblem):
        need, free = self.bytes_needed(problem), host_memory_available()
        if free is not None and need > free:
            raise MemoryError(f"the inputs and golden of B={problem.batch} H={problem.heads} N={problem.seq} "
                              f"d={problem.dim} need {need} B ({need / 2**30:.1f} GiB) of host memory; "
                              f"{free / 2**30:.1f} GiB available")
        self.problem = problem
        self.q, self.k, self.v = problem.inputs()

    @staticmethod
    def bytes_needed(problem: AttentionProblem) -> int:
        """Q, K, V in float32, the float64 golden and a float64 difference for the error figures: 28 B per element."""
        return 28 * problem.batch * problem.heads * problem.seq * problem.dim

    @cached_property
    def golden(self) -> np.ndarray:
        """float64 (B, H, N, d): the output every target is diffed against."""
        return attention(self.q, self.k, self.v, self.problem.causal, np.float64)

    def golden_from(self, compute: Callable[["Inputs"], np.ndarray | None]) -> np.ndarray:
        """The golden, computed by `compute(self)` when it has not been computed yet: the same float64
        host.reference.attention run elsewhere (a GPU target runs it on its device, where it takes milliseconds
        instead of seconds of host CPU). `compute` returns None when it cannot (then the host computes it); its
        result must be float64 of the golden's shape, else SpecError. Kept for every later row of the problem."""
        if "golden" not in self.__dict__:
            gold = compute(self)
            if gold is not None:
                shape = (self.problem.batch, self.problem.heads, self.problem.seq, self.problem.dim)
                if gold.dtype != np.float64 or gold.shape != shape:
                    raise SpecError(f"a golden computed elsewhere is {gold.dtype} {gold.shape}; allowed: float64 "
                                    f"{shape}")
                self.__dict__["golden"] = gold
        return self.golden
