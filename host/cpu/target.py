"""The CPU target: the float32 numpy reference, timed on the wall clock, under hardware counters where the kernel
allows them (or cachegrind's simulation when asked), diffed against the float64 golden. Where the machine exposes
RAPL, the package counters read around the timed calls give the socket's energy per call (host/cpu/rapl.py); where not,
the row's message says why. A row whose median call took NOISY_RATIO times its fastest says so in its message too
(its verdict stays what it is).

Each run also carries the machine's own ceilings, measured once per process: numpy's float32 matmul rate and a
large-copy bandwidth, so the report can place the reference on a roofline and as a fraction of what BLAS achieves.
"""

from __future__ import annotations

import argparse
import functools
import os
from dataclasses import dataclass

import numpy as np

from host.cpu import perf, rapl
from host.problem import AttentionProblem
from host.reference import attention
from host.results import Result
from host.target_api import Inputs, RunOptions, cpu_model
from host.timing import Timing, summarize, time_calls
from host.verdict import check_float

#: kernel name → the dtype it computes in.
KERNELS = {"numpy": "float32"}
#: Where its rows' timing comes from (host/timing.py time_calls).
TIMING_SOURCE = "measured: wall clock, perf_counter_ns"

#: Size of the ceiling measurements: a 2048² float32 matmul (17 GFLOP) and a 64 MiB copy.
MATMUL_N = 2048
COPY_BYTES = 64 << 20


#: A row whose median call took this many times its fastest is flagged noisy in its message (its verdict stays what
#: it is): half its median call or more went to something else (another process on the cores, a frequency change).
NOISY_RATIO = 2.0
#: Between the notes of a row's message.
NOTE_SEPARATOR = "; "


@dataclass(frozen=True)
class Settings:
    """The CPU target's options: cache_sim simulates the caches with cachegrind when hardware counters are missing."""

    cache_sim: bool = False


def add_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--cpu-cache-sim", action="store_true",
                       help="without hardware counters, simulate the CPU's caches with valgrind's cachegrind")


def settings(args: argparse.Namespace) -> Settings:
    return Settings(cache_sim=bool(args.cpu_cache_sim))


#: Its rows need no device of a cluster worker's own: any worker runs them (host/target_api.py ClusterNeeds).
CLUSTER = None


def available(settings: Settings = Settings()) -> tuple[bool, str]:
    """The CPU target runs wherever numpy does."""
    return True, f"numpy {np.__version__} float32 reference on {device()}"


def supports(problem: AttentionProblem) -> tuple[bool, str]:
    """The reference runs every shape: decode against a KV cache (q_len < seq) and grouped K/V heads too."""
    return True, ""


def device(settings: Settings | None = None, session: object = None) -> str:
    """The CPU's model name and logical core count, e.g. 'AMD EPYC (2 cores)'."""
    return _cpu_name()


@functools.lru_cache(maxsize=None)
def _cpu_name() -> str:
    return f"{cpu_model()} ({os.cpu_count()} cores)"


@functools.lru_cache(maxsize=None)
def ceilings() -> tuple[float, float]:
    """(GFLOP/s of a float32 numpy matmul, GB/s of a large copy counting read + write), best of three each."""
    a = np.random.default_rng(1).standard_normal((MATMUL_N, MATMUL_N), dtype=np.float32)
    matmul_s = min(time_calls(lambda: a @ a, warmup=1, iters=3)) / 1e3
    src = np.ones(COPY_BYTES // 4, dtype=np.float32)
    dst = np.empty_like(src)
    copy_s = min(time_calls(lambda: np.copyto(dst, src), warmup=1, iters=3)) / 1e3
    return 2.0 * MATMUL_N**3 / matmul_s / 1e9, 2.0 * COPY_BYTES / copy_s / 1e9


def noise_note(timing: Timing) -> str:
    """'noisy: p50 3.1x min (flagged from 2x)' when the median call took NOISY_RATIO times the fastest or more, else
    ''."""
    if not timing.min_ms > 0 or timing.p50_ms < NOISY_RATIO * timing.min_ms:
        return ""
    return f"noisy: p50 {timing.p50_ms / timing.min_ms:.1f}x min (flagged from {NOISY_RATIO:g}x)"


def run(problem: AttentionProblem, inputs: Inputs, options: RunOptions[Settings]) -> list[Result]:
    """Time the float32 reference on `problem`; one row with timing, verdict, counters (or why not), ceilings and
    energy (or why not); its GFLOP/s and GB/s (of the problem's minimum bytes) come from RunContext.result.

    options.settings (Settings): cache_sim simulates the caches with cachegrind when hardware counters are missing.
    """
    cache_sim = isinstance(options.settings, Settings) and options.settings.cache_sim
    def call() -> np.ndarray:
        return attention(inputs.q, inputs.k, inputs.v, problem.causal, np.float32)

    meter = rapl.Window()
    samples = time_calls(call, options.warmup, options.iters, window=meter)
    energy = meter.energy(options.iters)
    out, counters = perf.measure(call)
    if counters.instructions is None and cache_sim:
        from host.cpu import cachegrind

        ok, why = cachegrind.cachegrind_available()
        counters = cachegrind.simulate_reference(problem) if ok else perf.Counters(
            None, None, None, None, source="", reason=f"{counters.reason}; cache simulation: {why}")
    timing = summarize(samples)
    verdict = check_float(out, problem, inputs.golden)
    peak_gflops, peak_gbps = ceilings()
    return [options.context.result(
        problem, target="cpu", kernel=options.kernel, device=device(), warmup=options.warmup,
        **timing.as_fields(), timing_source=TIMING_SOURCE, peak_gflops=peak_gflops, peak_gbps=peak_gbps,
        peak_source="measured",
        energy_j=energy.joules_per_call, energy_source=energy.source,
        message=NOTE_SEPARATOR.join(note for note in (noise_note(timing), energy.note()) if note),
        verdict=verdict, **counters.as_fields())]

