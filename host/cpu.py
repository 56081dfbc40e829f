"""The CPU target: the float32 numpy reference, timed on the wall clock, under hardware counters where the kernel
allows them (or cachegrind's simulation when asked), diffed against the float64 golden.

Each run also carries the machine's own ceilings, measured once per process: numpy's float32 matmul rate and a
large-copy bandwidth, so the report can place the reference on a roofline and as a fraction of what BLAS achieves.
"""

from __future__ import annotations

import functools
import os
import platform

import numpy as np

from host import perf
from host.problem import AttentionProblem
from host.reference import attention, errors
from host.results import Result
from host.target import Inputs, RunOptions
from host.timing import summarize, time_calls

#: kernel name → the dtype it computes in.
KERNELS = {"numpy": "float32"}

#: Size of the ceiling measurements: a 2048² float32 matmul (17 GFLOP) and a 64 MiB copy.
MATMUL_N = 2048
COPY_BYTES = 64 << 20


def available() -> tuple[bool, str]:
    """The CPU target runs wherever numpy does."""
    return True, f"numpy {np.__version__} float32 reference on {device()}"


@functools.lru_cache(maxsize=None)
def device() -> str:
    """The CPU's model name and logical core count, e.g. 'AMD EPYC (2 cores)'."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model} ({os.cpu_count()} cores)"


@functools.lru_cache(maxsize=None)
def ceilings() -> tuple[float, float]:
    """(GFLOP/s of a float32 numpy matmul, GB/s of a large copy counting read + write), best of three each."""
    a = np.random.default_rng(1).standard_normal((MATMUL_N, MATMUL_N), dtype=np.float32)
    matmul_s = min(time_calls(lambda: a @ a, warmup=1, iters=3)) / 1e3
    src = np.ones(COPY_BYTES // 4, dtype=np.float32)
    dst = np.empty_like(src)
    copy_s = min(time_calls(lambda: np.copyto(dst, src), warmup=1, iters=3)) / 1e3
    return 2.0 * MATMUL_N**3 / matmul_s / 1e9, 2.0 * COPY_BYTES / copy_s / 1e9


def run(problem: AttentionProblem, inputs: Inputs, options: RunOptions) -> list[Result]:
    """Time the float32 reference on `problem`; one row with timing, errors, counters (or why not) and ceilings.

    options.extra["cpu_cache_sim"]: when hardware counters are unavailable, simulate the caches with cachegrind.
    """
    def call() -> np.ndarray:
        return attention(inputs.q, inputs.k, inputs.v, problem.causal, np.float32)

    samples = time_calls(call, options.warmup, options.iters)
    out, counters = perf.measure(call)
    if counters.instructions is None and options.extra.get("cpu_cache_sim"):
        from host import cachegrind

        ok, why = cachegrind.cachegrind_available()
        counters = cachegrind.simulate_reference(problem) if ok else perf.Counters(
            None, None, None, None, source="", reason=f"{counters.reason}; cache simulation: {why}")
    timing = summarize(samples)
    err = errors(out, inputs.golden)
    peak_gflops, peak_gbps = ceilings()
    seconds = timing.p50_ms / 1e3
    return [options.context.result(
        problem, target="cpu", kernel=options.kernel, device=device(), warmup=options.warmup,
        **timing.as_fields(), gflops=problem.flops() / seconds / 1e9 if seconds > 0 else None,
        model_bytes=problem.min_bytes(), gbps=problem.min_bytes() / seconds / 1e9 if seconds > 0 else None,
        peak_gflops=peak_gflops, peak_gbps=peak_gbps, max_abs=err.max_abs, rel_l2=err.rel_l2,
        **counters.as_fields())]

