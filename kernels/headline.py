"""The GPU benchmarks of docs/performance.md, each a ratio measured in one run:

- flash vs naive, fp32, N = 2048, d = 64, 16 heads;
- flash vs torch's scaled_dot_product_attention with the EFFICIENT backend, fp32, N = 4096, d = 64 and 128, 16 heads,
  causal and not (skipped with the reason when torch or a CUDA device is missing): the path the target dispatches
  to (3xTF32 on the tensor cores from sm_80) and beside it the FFMA kernel where that is not the one;
- naive's effective GB/s (modelled bytes) over the measured device-to-device copy bandwidth;
- the tensor-core flash kernel in float16 and bfloat16 against torch's FLASH (FlashAttention-2) and cuDNN backends
  in the same dtype on the same inputs, N = 4096, d = 64 and 128, 16 heads, causal and not (`--no-16bit` skips it);
  the path the target dispatches to (wgmma on Hopper), and beside it the mma.sync kernel where that is not the one.

Every kernel's output (torch's included) is judged against the float64 golden (host/verdict.py) before it is
timed; a wrong one stops the run with its verdict. ``--gpu-device fake`` runs the same steps on kernels/fake.py (no
GPU figures: it checks the tool).

    python -m kernels.headline [--iters 20] [--gpu-device cuda|fake] [--seq-scale 1]
"""

from __future__ import annotations

import sys
from typing import Sequence

import numpy as np

from host.cli_common import Parser, guard, integer
from host.errors import SpecError, TargetError
from host.problem import AttentionProblem
from host.target_api import Inputs
from host.verdict import check_float
from kernels import target
from kernels.halves import HALF_DTYPES

WARMUP = 3


def kernel_ms(kernel: str, problem: AttentionProblem, iters: int, settings: target.Settings) -> float:
    """Median ms of `iters` launches, after checking one launch against the golden."""
    dev = target.backend(settings)
    inputs = Inputs(problem)
    plan = target.launch_plan(problem, settings, dev)
    launch = target.launcher(kernel, problem, inputs, plan.br, plan.bc, dev, plan.path)
    launch.launch()
    out = launch.output()
    target.check_output(kernel, out)
    _judge(kernel, check_float(out, problem, inputs.golden))
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
    inputs = Inputs(problem)
    dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[problem.dtype]
    q, k, v = (torch.from_numpy(x).cuda().to(dtype) for x in (inputs.q, inputs.k, inputs.v))
    try:
        with sdpa_kernel(getattr(SDPBackend, backend)):
            call = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=problem.causal)  # noqa: E731
            _judge(f"torch SDPA {backend}", check_float(call().float().cpu().numpy(), problem, inputs.golden))
            ms = float(np.median(target.backend(settings).event_times(call, warmup=WARMUP, iters=iters)))
    except RuntimeError as exc:  # the backend refuses this shape or dtype
        return None, f"torch {backend} unavailable here: {str(exc).splitlines()[0]}"
    return ms, "torch " + torch.__version__


def half_precision(n: int, iters: int, settings: target.Settings) -> None:
    """The tensor-core kernel against torch FLASH (FlashAttention-2) and cuDNN, same dtype, same inputs; the
    mma.sync kernel beside it where the dispatched path is another."""
    dev = target.backend(settings)
    probe = AttentionProblem(heads=16, seq=n, dim=64, dtype="float16")
    path = target.launch_plan(probe, settings, dev).path
    other = None if path == "mma.sync" else target.Settings(device=settings.device, tc_path="mma")
    print(f"16-bit rows: {path} (the target's plan on this device){'; mma.sync beside it' if other else ''}")
    print(f"{'dtype':<9} {'d':>4} {'causal':>6} {'ours ms':>9} {'TFLOP/s':>8} {'FLASH':>8} {'cuDNN':>8} "
          f"{'mma.sync':>8} {'x FLASH':>8} {'x cuDNN':>8}")
    reasons: set[str] = set()
    for dtype in HALF_DTYPES:
        for dim in (64, 128):
            for causal in (False, True):
                p = AttentionProblem(heads=16, seq=n, dim=dim, causal=causal, dtype=dtype)
                ours = kernel_ms("flash", p, iters, settings)
                mma = kernel_ms("flash", p, iters, other) if other else None
                flash, why_flash = torch_ms(p, iters, settings, "FLASH_ATTENTION")
                cudnn, why_cudnn = torch_ms(p, iters, settings, "CUDNN_ATTENTION")
                reasons.update(why for ms, why in ((flash, why_flash), (cudnn, why_cudnn)) if ms is None)
                rate = lambda ms: "-" if ms is None else f"{p.flops() / (ms / 1e3) / 1e12:.1f}"  # noqa: E731
                ratio = lambda ms: "-" if ms is None else f"{ms / ours:.2f}"  # noqa: E731
                print(f"{dtype:<9} {dim:>4} {int(causal):>6} {ours:9.3f} {rate(ours):>8} {rate(flash):>8} "
                      f"{rate(cudnn):>8} {rate(mma):>8} {ratio(flash):>8} {ratio(cudnn):>8}")
    for reason in sorted(reasons):
        print(f"  -: {reason}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog="python -m kernels.headline", description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=integer("iters", 1, 10_000), default=20, help="timed launches (default 20)")
    parser.add_argument("--gpu-device", choices=target.DEVICES, default="cuda",
                        help="cuda: the GPU (default); fake: kernels/fake.py, which checks the tool, not a GPU")
    parser.add_argument("--seq-scale", type=integer("seq-scale", 1, 64), default=1,
                        help="divide every N by this (default 1; the fake device's test uses 32)")
    parser.add_argument("--no-16bit", action="store_true", help="skip the float16 and bfloat16 comparison")

    def body() -> int:
        args = parser.parse_args(argv)
        settings = target.Settings(device=args.gpu_device)
        ok, reason = target.available(settings)
        if not ok:
            raise SpecError(f"nothing can be measured: {reason} (--gpu-device fake checks the tool without a GPU)")
        dev = target.backend(settings)
        peak_gflops, copy_gbps = dev.ceilings()
        ceilings = (f"copy {copy_gbps:.0f} GB/s; fp32 matmul {peak_gflops / 1e3:.1f} TFLOP/s" if peak_gflops
                    else "no ceilings measured")
        print(f"device: {target.device(settings)}; {ceilings}")
        n2, n4 = 2048 // args.seq_scale, 4096 // args.seq_scale
        p2 = AttentionProblem(heads=16, seq=n2, dim=64)
        path = target.launch_plan(p2, settings, dev).path
        ffma = None if path == "simt" else target.Settings(device=settings.device, fp32_path="simt")
        print(f"fp32 flash: {path} (the target's plan on this device){'; FFMA beside it' if ffma else ''}")
        flash, naive = kernel_ms("flash", p2, args.iters, settings), kernel_ms("naive", p2, args.iters, settings)
        print(f"N={n2} d=64 H=16: flash {flash:.3f} ms, naive {naive:.3f} ms, flash speed-up {naive / flash:.2f}x")
        naive_gbps = target.model_bytes("naive", p2) / (naive / 1e3) / 1e9
        if copy_gbps:
            print(f"naive effective {naive_gbps:.0f} GB/s = {naive_gbps / copy_gbps:.2f} of copy bandwidth")
        for dim, causal in ((64, False), (64, True), (128, False), (128, True)):
            p4 = AttentionProblem(heads=16, seq=n4, dim=dim, causal=causal)
            flash4 = kernel_ms("flash", p4, args.iters, settings)
            beside = ""
            if ffma:
                ffma4 = kernel_ms("flash", p4, args.iters, ffma)
                beside = f", FFMA {ffma4:.3f} ms ({p4.flops() / (ffma4 / 1e3) / 1e12:.1f})"
            efficient, note = torch_ms(p4, args.iters, settings)
            tflops = p4.flops() / (flash4 / 1e3) / 1e12
            if efficient is None:
                print(f"N={n4} d={dim} causal={int(causal)}: flash {flash4:.3f} ms ({tflops:.1f} TFLOP/s){beside}; "
                      f"{note}")
            else:
                print(f"N={n4} d={dim} causal={int(causal)}: flash {flash4:.3f} ms ({tflops:.1f} TFLOP/s){beside}, "
                      f"SDPA EFFICIENT {efficient:.3f} ms ({p4.flops() / (efficient / 1e3) / 1e12:.1f}); flash/torch "
                      f"speed {efficient / flash4:.2f} ({note})")
        if not args.no_16bit:
            half_precision(n4, args.iters, settings)
        return 0

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
