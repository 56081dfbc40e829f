"""How the GPU headline (kernels/headline.py) and its variant sweep (kernels/headline_variants.py) time a kernel
of the gpu target or a torch SDPA backend: each output judged against the float64 golden on the same seeded inputs
before its median over timed launches is taken, and the TFLOP/s and speed ratios their tables print.
"""

from __future__ import annotations

import functools

import numpy as np

from host.errors import TargetError
from host.problem import AttentionProblem
from host.target_api import Inputs
from host.verdict import check_float
from kernels import target

WARMUP = 3


@functools.lru_cache(maxsize=1)
def problem_inputs(problem: AttentionProblem) -> Inputs:
    """The problem's seeded inputs, kept while the kernels and torch's backends are timed on them (one golden)."""
    return Inputs(problem)


def kernel_ms(kernel: str, problem: AttentionProblem, iters: int, settings: target.Settings) -> float:
    """Median ms of `iters` launches, after checking one launch against the golden."""
    dev = target.backend(settings)
    inputs = problem_inputs(problem)
    plan = target.launch_plan(problem, settings, dev)
    launch = target.launcher(kernel, problem, inputs, plan.br, plan.bc, dev, plan.path, plan.parts)
    launch.launch()
    out = launch.output()
    target.check_output(kernel, out)
    _judge(kernel, check_float(out, problem, inputs.golden_from(dev.golden)))
    return float(np.median(dev.event_times(launch.launch, warmup=WARMUP, iters=iters)))


def _judge(name: str, verdict) -> None:
    if not verdict.passed:
        raise TargetError(f"{name}: {verdict.message}", status="wrong")


def torch_ms(problem: AttentionProblem, iters: int, settings: target.Settings,
             backend: str = "EFFICIENT_ATTENTION") -> tuple[float | None, str]:
    """Median ms of torch SDPA with one backend, in the problem's dtype on the same inputs, after checking its output;
    (None, why) without torch, CUDA or that backend."""
    if settings.device != "cuda":
        return None, "torch anchor not timed on the fake device"
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as exc:
        return None, f"torch unavailable: {exc}"
    if problem.causal and problem.queries != problem.seq:
        return None, ("torch SDPA's is_causal aligns the mask to the top left when q_len < seq; this problem's is "
                      "aligned to the bottom right (a KV cache's)")
    inputs = problem_inputs(problem)
    dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[problem.dtype]
    q, k, v = (torch.from_numpy(x).cuda().to(dtype) for x in (inputs.q, inputs.k, inputs.v))
    grouped = problem.kv_head_count != problem.heads  # K/V heads shared by query groups (torch >= 2.5)
    try:
        with sdpa_kernel(getattr(SDPBackend, backend)):
            call = lambda: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
                q, k, v, is_causal=problem.causal, **({"enable_gqa": True} if grouped else {}))
            golden = inputs.golden_from(target.backend(settings).golden)
            _judge(f"torch SDPA {backend}", check_float(call().float().cpu().numpy(), problem, golden))
            ms = float(np.median(target.backend(settings).event_times(call, warmup=WARMUP, iters=iters)))
    except RuntimeError as exc:  # the backend refuses this shape or dtype
        return None, f"torch {backend} unavailable here: {str(exc).splitlines()[0]}"
    return ms, "torch " + torch.__version__


def rate(problem: AttentionProblem, ms: float | None) -> str:
    """TFLOP/s of `problem` in `ms` (host/problem.py's FLOP formula), '-' without a time."""
    return "-" if not ms else figure(problem.flops() / (ms / 1e3) / 1e12)


def figure(value: float) -> str:
    """A rate to three significant figures, as a table prints it: 588, 41.2, 0.00312; never a small rate rounded to
    a silent 0.0."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def ratio(theirs: float | None, ours: float) -> str:
    """Our speed over theirs, '-' without their time."""
    return "-" if not theirs else f"{theirs / ours:.2f}"
