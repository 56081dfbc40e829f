"""The GPU target's `q15` row: the Q15 contract (docs/q15.md) on the device's integer tensor cores (kernels/q15.cu),
judged like every Q15 row (mcu/target.py, codesign/target.py): bit-exact with host/q15.py and within the contract's
bound of the float64 golden (host/verdict.check_q15), timed like the GPU's other kernels (the device's event timer,
the L2 flushed before each call) and with the device's energy (NVML on a GPU; none on the fake).

The problem's float inputs are quantised per tensor with host/q15.py `prepare` at the contract's Bc (`q15.BC`, as
every Q15 target); the device computes every head's values and row shifts (a `Q15Out`), and `quantized.expected()`
(the numpy model, head by head) is what they must equal. The row's GFLOP/s are FLOP-equivalents of the problem's one
formula (problem.flops(): each 16-bit multiply-add counted as 2 operations, as four int8 products on the device).
"""

from __future__ import annotations

import numpy as np

from host import q15
from host.errors import TargetError
from host.problem import AttentionProblem
from host.results import Result
from host.target_api import Inputs, RunOptions
from host.timing import summarize
from host.verdict import check_q15

#: The kernel's name in the gpu target's table, and the dtype it computes in.
KERNEL = "q15"


def model_bytes(problem: AttentionProblem) -> int:
    """Modelled device-memory traffic of one call: Q, K, V read and O written once in int16 (problem.min_bytes at
    dtype q15) and a byte of row shift for each output row; K and V re-reads by other query tiles come from L2."""
    return problem.with_(dtype="q15").min_bytes() + problem.batch * problem.heads * problem.queries


def check_output(out: q15.Q15Out) -> None:
    """A row shift past host.q15.OUT_SHIFT_MAX left in the output: a row the kernel never wrote (its shifts are
    poisoned with 255 before the launch); TargetError naming the first."""
    unwritten = np.argwhere(np.asarray(out.shift) > q15.OUT_SHIFT_MAX)
    if len(unwritten):
        first = tuple(int(i) for i in unwritten[0])
        raise TargetError(f"q15 left row {first} unwritten (its shift is still the poison "
                          f"{int(out.shift[first])})")


def run(problem: AttentionProblem, inputs: Inputs, options: RunOptions, dev) -> list[Result]:
    """Quantise, launch once, judge the values and shifts, then time; one row (dtype q15) with the verdict, timing,
    modelled bytes and energy. `dev`: kernels.cuda.CudaDevice or kernels.fake.FakeDevice."""
    problem = problem.with_(dtype="q15")
    quantized = q15.prepare(problem, inputs.q, inputs.k, inputs.v)  # at the contract's Bc, as every Q15 target
    try:
        launch = dev.q15_launcher(problem, quantized)
        launch.launch()  # compile, check it runs
        dev.synchronize()
        out = launch.output()
        check_output(out)
        verdict = check_q15(out, quantized.expected(), quantized.dequantize(out), inputs.golden_from(dev.golden),
                            q15.error_bound(inputs.q, inputs.k, inputs.v, quantized))
        samples = dev.event_times(launch.launch, options.warmup, options.iters)
        energy = dev.energy(launch.launch)
    except dev.out_of_memory() as exc:
        raise TargetError(f"out of device memory: {exc or type(exc).__name__}", status="oom") from exc
    timing = summarize(samples)
    config = launch.config
    return [options.context.result(
        problem, target="gpu", kernel=KERNEL, device=dev.describe(), warmup=options.warmup, br=config.rows,
        bc=quantized.params.bc, **timing.as_fields(), timing_source=dev.timing_source,
        model_bytes=model_bytes(problem), energy_j=energy.joules_per_call if energy else None,
        energy_source=energy.source if energy else "", verdict=verdict,
        message="; ".join(filter(None, [dev.q15_note(config), energy.reason if energy else ""])))]
