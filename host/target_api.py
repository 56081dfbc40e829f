"""The contract between host.compare and every target: what a target module exposes (`TargetModule`), what a cluster
worker needs from it (`ClusterNeeds`), the options a run passes in, the inputs, and the one way to build a `Result`
row (with its verdict and its throughput).

A target module (host/cpu/target.py, kernels/target.py, mcu/target.py, codesign/target.py) is cheap to import (heavy
imports happen inside its functions) and is a `TargetModule` over its own `Settings` class: `KERNELS`,
`add_options`, `settings`, `available`, `device`, `run` and `CLUSTER` (the protocol's docstrings say what each is).
Optional, looked up by name: ``kernels(settings)`` where the kernels are named after the target's options (the asic
target: one kernel per datapath), ``REPEATS`` (its default (warm-up, timed) calls), ``MAX_REPEATS`` (the most warm-up +
timed calls one row can make, checked before any target starts), ``open_session(settings)`` (a context manager holding
a device for the whole sweep, yielding a session) and ``RESUME_BY_DEVICE = False`` (``--resume`` then counts a row as
done whatever device measured it).

Rows are built by `RunContext.result`: a row that carries an output's figures gets its status from its `Verdict`
(host/verdict.py), so no target can write `ok` without having been judged; a timed row gets its GFLOP/s and GB/s
there, from the problem's FLOP formula, its modelled bytes and its p50, so every target derives them alike.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import platform
import secrets
import subprocess
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Generic, Mapping, Protocol, TypeVar

import numpy as np

from host.errors import SpecError
from host.problem import AttentionProblem
from host import q15
from host.reference import attention
from host.results import Result
from host.verdict import Verdict

#: A target's own Settings class (a frozen dataclass, validated at construction).
S = TypeVar("S")


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
        without a verdict must carry a failure status (error, oom, skipped) and its message. A timed row's GFLOP/s
        and GB/s are derived here (`throughput`); a target gives its `model_bytes` where they are not the problem's
        minimum, never the rates."""
        if verdict is not None:
            note = str(fields.pop("message", "") or "")
            fields.update(verdict.as_fields())
            fields["message"] = "; ".join(text for text in (verdict.message, note) if text)
        elif fields.get("status", "ok") == "ok":
            raise ValueError(f"a {target}/{kernel} row without a verdict needs a failure status; got status ok")
        fields.update(throughput(problem, fields))
        if problem.dtype == "q15":
            fields.setdefault("numerics", q15.NUMERICS)
        timestamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        return Result(run_id=self.run_id, timestamp=timestamp, git_rev=self.git_rev, host=self.host, device=device,
                      target=target, kernel=kernel, dtype=problem.dtype, batch=problem.batch, heads=problem.heads,
                      seq=problem.seq, dim=problem.dim, causal=problem.causal, seed=problem.seed, q_len=problem.q_len,
                      kv_heads=problem.kv_heads, **fields)


def throughput(problem: AttentionProblem, fields: dict[str, object]) -> dict[str, object]:
    """The rates of a row with timing `fields`: GFLOP/s from the problem's FLOP formula (problem.flops()) and GB/s
    from its modelled bytes (the target's `model_bytes`, else the problem's minimum, problem.min_bytes()), both over
    the row's p50 latency, measured or modelled alike (its timing_source says which). A row without a positive p50
    (failed, skipped) has no rates and no modelled bytes of its own."""
    given = [name for name in ("gflops", "gbps") if fields.get(name) is not None]
    if given:
        raise ValueError(f"{', '.join(given)} given to a row: the rates are derived from its p50 and bytes "
                         "(host/target_api.py throughput)")
    p50_ms = fields.get("p50_ms")
    if p50_ms is None or not p50_ms > 0:
        return {}
    seconds = p50_ms / 1e3
    model_bytes = fields.get("model_bytes")
    model_bytes = problem.min_bytes() if model_bytes is None else model_bytes
    return {"gflops": problem.flops() / seconds / 1e9, "model_bytes": model_bytes,
            "gbps": model_bytes / seconds / 1e9}


def cpu_model() -> str:
    """This machine's CPU model name ('AMD EPYC 7B13'; the processor or machine type where /proc/cpuinfo names none)."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return model


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
class RunOptions(Generic[S]):
    """How to measure: which kernel, warm-ups and timed repeats, the target's own typed `settings` (its Settings
    class S, built by its `settings(args)`; None where a caller gives none) and the `session` its open_session
    yielded (None when it has none). A target's `run` takes `RunOptions[Settings]`, naming its own class."""

    context: RunContext
    kernel: str
    warmup: int = 2
    iters: int = 10
    settings: S | None = None
    session: object = None

    def __post_init__(self) -> None:
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise SpecError(f"warmup={self.warmup!r} is out of range; allowed: >= 0")
        if not isinstance(self.iters, int) or self.iters < 1:
            raise SpecError(f"iters={self.iters!r} is out of range; allowed: >= 1")


class Inputs:
    """The problem's seeded Q (float32, (B, H, q_len, d)), K, V ((B, kv_heads, N, d)) and, computed once on first use,
    its float64 golden (B, H, q_len, d).

    Building them needs `bytes_needed(problem)` of host memory; a problem beyond what the machine has available is
    refused with a MemoryError saying both figures, before anything is allocated."""

    def __init__(self, problem: AttentionProblem):
        need, free = self.bytes_needed(problem), host_memory_available()
        if free is not None and need > free:
            shape = "".join(f" {name}={value}" for name, value in (("q_len", problem.q_len),
                                                                     ("kv_heads", problem.kv_heads)) if value)
            raise MemoryError(f"the inputs and golden of B={problem.batch} H={problem.heads} N={problem.seq}{shape} "
                              f"d={problem.dim} need {need} B ({need / 2**30:.1f} GiB) of host memory; "
                              f"{free / 2**30:.1f} GiB available")
        self.problem = problem
        self.q, self.k, self.v = problem.inputs()

    @staticmethod
    def bytes_needed(problem: AttentionProblem) -> int:
        """Q, K, V in float32 (4 B an element) and the golden's float64 copies of them (8 B), and for each output
        element the float64 golden, the error figures' float64 copy of the output and their difference (24 B): 36 B
        per element of Q, 20 B per element of K and V."""
        q_elements = problem.batch * problem.heads * problem.queries * problem.dim
        kv_elements = problem.batch * problem.kv_head_count * problem.seq * problem.dim
        return 36 * q_elements + 20 * kv_elements

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
                shape = self.problem.shape  # (B, H, q_len, d)
                if gold.dtype != np.float64 or gold.shape != shape:
                    raise SpecError(f"a golden computed elsewhere is {gold.dtype} {gold.shape}; allowed: float64 "
                                    f"{shape}")
                self.__dict__["golden"] = gold
        return self.golden


@dataclass(frozen=True, eq=False)
class ClusterNeeds(Generic[S]):
    """What a cluster worker (host/sweep/worker.py, python -m host.cluster worker) needs from a target whose rows
    need a device of their own; a target whose rows run anywhere (cpu, asic) declares ``CLUSTER = None``.

    - `settings`: the target's Settings class, built on the worker from the device options given to it;
    - `options`: the Settings fields that choose the device this machine owns → the flag that sets each, the same
      flag as in host.compare (which refuses them with --cluster: each worker owns its devices);
    - `add_options(group)`: adds those flags (and any of the worker's own for this device) to the worker's parser;
      a worker owns the device when one of `options`' flags is given;
    - `usage`: how a worker with this device is started, for messages (e.g. ``--serial PORT | --sim``);
    - `resource`: the Dask resource one row needs (one unit), advertised by a worker owning the device;
    - `model(settings, session)` (optional): the device's model name (e.g. 'NVIDIA H200'): a worker also advertises
      the resource `<resource>-<model>` (see host/sweep/worker.py model_resource), so a sweep can ask for a model;
    - `prepare(args)` (optional): called with the worker's parsed arguments before any device is opened (e.g. to
      set the environment that picks the device); raises SpecError on a bad one.
    """

    settings: type[S]
    options: Mapping[str, str]
    add_options: Callable[[argparse._ArgumentGroup], None]
    usage: str
    resource: str
    model: Callable[[S, object], str] | None = None
    prepare: Callable[[argparse.Namespace], None] | None = None


class TargetModule(Protocol[S]):
    """What a target module exposes (the module itself is the implementation), over its Settings class."""

    #: {kernel name: the dtype it computes in} with default options (a target whose options name its kernels also
    #: has ``kernels(settings)``, returning a dict or (kernel, dtype) pairs).
    KERNELS: Mapping[str, str]
    #: What a cluster worker needs from it; None when its rows need no device of the worker's own.
    CLUSTER: ClusterNeeds | None

    def add_options(self, group: argparse._ArgumentGroup) -> None:
        """Add its own command-line options to an argparse group host.compare gives it."""

    def settings(self, args: argparse.Namespace) -> S:
        """Its typed, validated settings from the parsed arguments (SpecError on a bad option)."""

    def available(self, settings: S) -> tuple[bool, str]:
        """Whether this machine can run it, and if not, why."""

    def device(self, settings: S | None, session: object) -> str:
        """What it runs on, in words (stamped on every row; --resume counts a row as done only on the device that
        measured it, unless the module sets RESUME_BY_DEVICE = False)."""

    def run(self, problem: AttentionProblem, inputs: Inputs, options: RunOptions[S]) -> list[Result]:
        """Measure one problem with one kernel (options.kernel) into rows made by options.context.result; a row with
        timing figures says where they come from (timing_source: 'measured: <clock>' or 'modelled: <model>')."""
