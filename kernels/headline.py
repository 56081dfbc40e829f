"""The GPU benchmarks of docs/performance.md, each a ratio measured in one run:

- flash vs naive, fp32, N = 2048, d = 64, 16 heads;
- flash vs torch's scaled_dot_product_attention with the EFFICIENT backend, fp32, N = 4096, d = 64, 16 heads
  (skipped with the reason when torch or a CUDA device is missing);
- naive's effective GB/s (modelled bytes) over the measured device-to-device copy bandwidth.

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

WARMUP = 3


def kernel_ms(kernel: str, problem: AttentionProblem, iters: int, settings: target.Settings) -> float:
    """Median ms of `iters` launches, after checking one launch against the golden."""
    dev = target.backend(settings)
    inputs = Inputs(problem)
    launch = target.launcher(kernel, problem, inputs, *target.default_tile(problem, target.sm_count(settings)[0]),
                             dev)
    launch.launch()
    out = launch.output()
    target.check_output(kernel, out)
    _judge(kernel, check_float(out, problem, inputs.golden))
    return float(np.median(dev.event_times(launch.launch, warmup=WARMUP, iters=iters)))


def _judge(name: str, verdict) -> None:
    if not verdict.passed:
        raise TargetError(f"{name}: {verdict.message}", status="wrong")


def torch_efficient_ms(problem: AttentionProblem, iters: int, settings: target.Settings) -> tuple[float | None, str]:
    """Median ms of torch SDPA (EFFICIENT backend) after checking its output; (None, why) without torch or CUDA."""
    if settings.device != "cuda":
        return None, "torch anchor not timed on the fake device"
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as exc:
        return None, f"torch unavailable: {exc}"
    inputs = Inputs(problem)
    q, k, v = (torch.from_numpy(x).cuda() for x in (inputs.q, inputs.k, inputs.v))
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        call = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=problem.causal)  # noqa: E731
        _judge("torch SDPA", check_float(call().cpu().numpy(), problem, inputs.golden))
        ms = float(np.median(target.backend(settings).event_times(call, warmup=WARMUP, iters=iters)))
    return ms, "torch " + torch.__version__


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog="python -m kernels.headline", description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=integer("iters", 1, 10_000), default=20, help="timed launches (default 20)")
    parser.add_argument("--gpu-device", choices=target.DEVICES, default="cuda",
                        help="cuda: the GPU (default); fake: kernels/fake.py, which checks the tool, not a GPU")
    parser.add_argument("--seq-scale", type=integer("seq-scale", 1, 64), default=1,
                        help="divide every N by this (default 1; the fake device's test uses 32)")

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
        flash, naive = kernel_ms("flash", p2, args.iters, settings), kernel_ms("naive", p2, args.iters, settings)
        print(f"N={n2} d=64 H=16: flash {flash:.3f} ms, naive {naive:.3f} ms, flash speed-up {naive / flash:.2f}x")
        naive_gbps = target.model_bytes("naive", p2) / (naive / 1e3) / 1e9
        if copy_gbps:
            print(f"naive effective {naive_gbps:.0f} GB/s = {naive_gbps / copy_gbps:.2f} of copy bandwidth")
        for causal in (False, True):
            p4 = AttentionProblem(heads=16, seq=n4, dim=64, causal=causal)
            flash4 = kernel_ms("flash", p4, args.iters, settings)
            torch_ms, note = torch_efficient_ms(p4, args.iters, settings)
            tflops = p4.flops() / (flash4 / 1e3) / 1e12
            if torch_ms is None:
                print(f"N={n4} causal={int(causal)}: flash {flash4:.3f} ms ({tflops:.1f} TFLOP/s); {note}")
            else:
                print(f"N={n4} causal={int(causal)}: flash {flash4:.3f} ms ({tflops:.1f} TFLOP/s), SDPA EFFICIENT "
                      f"{torch_ms:.3f} ms ({p4.flops() / (torch_ms / 1e3) / 1e12:.1f}); flash/torch speed "
                      f"{torch_ms / flash4:.2f} ({note})")
        return 0

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
