"""kernels.headline's Q15 section (issue 34): the Q15 contract on the GPU's integer tensor cores (kernels/q15.cu)
beside the dispatched 16-bit flash kernel on the same shapes and the same float inputs: each one's median time, its
rate (FLOP-equivalents of host/problem.py's one formula for q15, whose 16-bit products run as four int8 MMAs) and
its energy per head (NVML over the timed calls, divided by B·H), the q15 row's verdict (bit-exact with host/q15.py
and within the contract's bound) and the 16-bit row's (against the float64 golden). Both rows come from the gpu
target's own `run`, so they are judged and measured exactly as host.compare's are.

The host runs host/q15.py's numpy model on every head to judge the q15 row: about a second a head at N 4096, d 128,
so the section keeps to N ≤ 4096 unless asked (`--q15-seqs`).
"""

from __future__ import annotations

import sys
from typing import Sequence

from host.problem import AttentionProblem
from host.results import Result
from host.target_api import Inputs, RunContext, RunOptions
from kernels import q15_row, target
from kernels.headline_timing import figure

#: N of the section (before --seq-scale), heads, and the warm-ups before the timed calls.
Q15_SEQS = (1024, 4096)
HEADS = 16
WARMUP = 3


def joules_per_head(row: Result) -> str:
    """The row's energy per call over its B·H heads, or why there is none."""
    if row.energy_j is None:
        return "-"
    return f"{row.energy_j / (row.batch * row.heads) * 1e3:.3f}"


def q15_beside_half(seqs: Sequence[int], iters: int, settings: target.Settings) -> list[Result]:
    """The q15 kernel and the float16 flash kernel at each N of `seqs`, d 64 and 128, causal and not; a table on
    stdout, the rows returned (their statuses decide the run's exit)."""
    context, rows = RunContext.start(), []
    print("q15 on the integer tensor cores beside the 16-bit flash kernel (float16), same inputs; mJ per head "
          "from NVML")
    print(f"{'N':>6} {'d':>4} {'causal':>6} {'fp16 ms':>9} {'TFLOP/s':>8} {'mJ/head':>8} {'q15 ms':>9} "
          f"{'TFLOP-eq/s':>10} {'mJ/head':>8} {'q15/fp16 time':>13} {'q15 verdict':<12}")
    for n in seqs:
        for dim in (64, 128):
            for causal in (False, True):
                problem = AttentionProblem(heads=HEADS, seq=n, dim=dim, causal=causal, dtype="float16")
                inputs = Inputs(problem)
                pair = []
                for kernel in ("flash", q15_row.KERNEL):
                    options = RunOptions(context, kernel, warmup=WARMUP, iters=iters, settings=settings)
                    [row] = target.run(problem, inputs, options)
                    pair.append(row)
                half, q15 = pair
                rows += pair
                print(f"{n:>6} {dim:>4} {int(causal):>6} {_ms(half)} {_rate(half):>8} {joules_per_head(half):>8} "
                      f"{_ms(q15)} {_rate(q15):>10} {joules_per_head(q15):>8} {_ratio(q15, half):>13} "
                      f"{q15.status:<12}", flush=True)
                for row in pair:
                    if row.status != "ok":
                        print(f"  {row.kernel} {row.dtype}: {row.status}: {row.message}", file=sys.stderr)
    if any(row.energy_j is None for row in rows):  # a '-' says why, as the 16-bit section's do
        print(f"  -: mJ/head: no energy measured on {rows[0].device}")
    return rows


def _ms(row: Result) -> str:
    return f"{row.p50_ms:9.3f}" if row.p50_ms else f"{'-':>9}"


def _rate(row: Result) -> str:
    return figure(row.gflops / 1e3) if row.gflops else "-"


def _ratio(q15: Result, half: Result) -> str:
    return f"{q15.p50_ms / half.p50_ms:.2f}" if q15.p50_ms and half.p50_ms else "-"
