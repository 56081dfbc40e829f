"""The GPU benchmarks of docs/performance.md, each a ratio measured in one run:

- flash vs naive, fp32, N = 2048, d = 64, 16 heads;
- flash vs torch's scaled_dot_product_attention with the EFFICIENT backend, fp32, N = 4096, d = 64, 16 heads
  (skipped with the reason when torch is missing);
- naive's effective GB/s (modelled bytes) over the measured device-to-device copy bandwidth.

    python -m kernels.headline [--iters 20]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from host.problem import AttentionProblem
from host.target_api import Inputs
from kernels import target


def kernel_ms(kernel: str, problem: AttentionProblem, iters: int) -> float:
    launcher = target.Launcher(kernel, problem, Inputs(problem), *target.default_tile(problem, target.sm_count()))
    return float(np.median(target._event_times(launcher.launch, warmup=3, iters=iters)))


def torch_efficient_ms(problem: AttentionProblem, iters: int) -> tuple[float | None, str]:
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as exc:
        return None, f"torch unavailable: {exc}"
    q, k, v = (torch.from_numpy(x).cuda() for x in problem.inputs())
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        call = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=problem.causal)  # noqa: E731
        return float(np.median(target._event_times(call, warmup=3, iters=iters))), "torch " + torch.__version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels.headline", description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args(argv)
    ok, reason = target.available()
    if not ok:
        print(f"kbench: GPU benchmarks skipped: {reason}", file=sys.stderr)
        return 0
    peak_gflops, copy_gbps = target.ceilings()
    print(f"device: {target.device()}; copy {copy_gbps:.0f} GB/s; fp32 matmul {peak_gflops / 1e3:.1f} TFLOP/s")
    p2048 = AttentionProblem(heads=16, seq=2048, dim=64)
    flash, naive = kernel_ms("flash", p2048, args.iters), kernel_ms("naive", p2048, args.iters)
    print(f"N=2048 d=64 H=16: flash {flash:.3f} ms, naive {naive:.3f} ms, flash speed-up {naive / flash:.2f}x")
    naive_gbps = target.model_bytes("naive", p2048) / (naive / 1e3) / 1e9
    print(f"naive effective {naive_gbps:.0f} GB/s = {naive_gbps / copy_gbps:.2f} of copy bandwidth")
    for causal in (False, True):
        p4096 = AttentionProblem(heads=16, seq=4096, dim=64, causal=causal)
        flash4 = kernel_ms("flash", p4096, args.iters)
        torch_ms, note = torch_efficient_ms(p4096, args.iters)
        tflops = p4096.flops() / (flash4 / 1e3) / 1e12
        if torch_ms is None:
            print(f"N=4096 causal={int(causal)}: flash {flash4:.3f} ms ({tflops:.1f} TFLOP/s); {note}")
        else:
            print(f"N=4096 causal={int(causal)}: flash {flash4:.3f} ms ({tflops:.1f} TFLOP/s), SDPA EFFICIENT "
                  f"{torch_ms:.3f} ms ({p4096.flops() / (torch_ms / 1e3) / 1e12:.1f}); flash/torch speed "
                  f"{torch_ms / flash4:.2f} ({note})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
