"""The GPU benchmarks of docs/performance.md, each a ratio measured in one run:

- flash vs naive, fp32, N = 2048, d = 64, 16 heads;
- flash vs torch's scaled_dot_product_attention with the EFFICIENT backend, fp32, N = 4096, d = 64 and 128, 16 heads,
  causal and not (skipped with the reason when torch or a CUDA device is missing): the path the target dispatches
  to (3xTF32 on the tensor cores from sm_80) and beside it the FFMA kernel where that is not the one;
- naive's effective GB/s (modelled bytes) over the measured device-to-device copy bandwidth;
- the tensor-core flash kernel in float16 and bfloat16 against torch's FLASH (FlashAttention-2) and cuDNN backends
  in the same dtype on the same inputs, N = 1024, 4096 and 16384 (`--seqs`), d = 64 and 128, 16 heads, causal and
  not (`--no-16bit` skips it): its TFLOP/s and their fraction of the measured fp16 matmul rate (a cuBLAS 8192²
  product), the path the target dispatches to (wgmma on Hopper), and beside it the mma.sync kernel where that is
  not the one;
- the Q15 contract on the integer tensor cores (`q15`) beside the float16 flash kernel, N = 1024 and 4096
  (`--q15-seqs`), d 64 and 128, causal and not: time, rate, energy per head and the q15 verdict
  (kernels/q15_headline.py; `--no-q15` skips it).

Every kernel's output (torch's included) is judged against the float64 golden (host/verdict.py) before it is
timed; a wrong one stops the run with its verdict. ``--gpu-device fake`` runs the same steps on kernels/fake.py (no
GPU figures: it checks the tool), every N divided by 32 unless ``--seq-scale`` says otherwise.

``--variants tc|tf32|wgmma [--set all|quick|d128|stages|i34|persist|bc192|early_k|sched3] [--out DIR]`` runs, instead
of the ratios, the development sweep of one kernel's launch configurations (kernels/headline_variants.py; it replaces
scripts/gpu_{tc,tf32,wgmma}_bench.py): each launch, built from its variant record, is judged against the float64
golden at N 1, 17, 1000 and 4097 (3 heads), then timed at N 4096 (16 heads; `--seqs` for others) beside torch (FLASH
and cuDNN in 16 bits, EFFICIENT and the FFMA kernel in fp32, and mma.sync beside wgmma). Every launch is a row of the
one results schema in OUT/results.csv (default reports/latest/variants); a table of the timed rows ends the run,
TFLOP/s by host/problem.py's FLOP formula.

    python -m kernels.headline [--iters 20] [--gpu-device cuda|fake] [--seq-scale N] [--seqs 1024,4096,16384]
                               [--no-16bit] [--q15-seqs 1024,4096] [--no-q15]
    python -m kernels.headline --variants wgmma --set quick --out reports/latest/variants

Exit status: 0 done (every variant row ok or skipped); 1 a kernel wrong (the ratios stop at it), a variant or
q15-section row wrong or failed, the device failed, or no device to run on (no GPU: one line with the reason);
2 bad arguments only; 130 interrupted.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Sequence

from host.cli_common import Parser, folder, guard, int_list, integer
from host.errors import SpecError, UnavailableError
from host.problem import AttentionProblem
from host.results import FAILED_STATUSES
from kernels import target
from kernels.halves import HALF_DTYPES
from kernels.headline_timing import kernel_ms, rate, ratio, torch_ms
from kernels.headline_variants import DEFAULT_OUT, RECORDS, VARIANT_SEQS, variants_sweep
from kernels.q15_headline import Q15_SEQS, q15_beside_half

#: N of the 16-bit comparison (the issue-34 lengths) unless --seqs.
HALF_SEQS = (1024, 4096, 16384)


def half_precision(seqs: Sequence[int], iters: int, settings: target.Settings) -> None:
    """The tensor-core kernel against torch FLASH (FlashAttention-2) and cuDNN, same dtype, same inputs, at each N of
    `seqs`; its TFLOP/s over the measured fp16 matmul rate; the mma.sync kernel beside it where the dispatched path
    is another."""
    dev = target.backend(settings)
    probe = AttentionProblem(heads=16, seq=seqs[0], dim=64, dtype="float16")
    path = target.launch_plan(probe, settings, dev).path
    other = None if path == "mma.sync" else target.Settings(device=settings.device, tc_path="mma")
    matmul_gflops = dev.ceilings("float16")[0]
    print(f"16-bit rows: {path} (the target's plan on this device){'; mma.sync beside it' if other else ''}; "
          + (f"fp16 matmul {matmul_gflops / 1e3:.1f} TFLOP/s" if matmul_gflops else "no matmul rate measured"))
    print(f"{'dtype':<9} {'N':>6} {'d':>4} {'causal':>6} {'ours ms':>9} {'TFLOP/s':>8} {'of mm':>6} {'FLASH':>8} "
          f"{'cuDNN':>8} {'mma.sync':>8} {'x FLASH':>8} {'x cuDNN':>8}")
    reasons: set[str] = set()
    for n in seqs:
        for dtype in HALF_DTYPES:
            for dim in (64, 128):
                for causal in (False, True):
                    p = AttentionProblem(heads=16, seq=n, dim=dim, causal=causal, dtype=dtype)
                    ours = kernel_ms("flash", p, iters, settings)
                    mma = kernel_ms("flash", p, iters, other) if other else None
                    flash, why_flash = torch_ms(p, iters, settings, "FLASH_ATTENTION")
                    cudnn, why_cudnn = torch_ms(p, iters, settings, "CUDNN_ATTENTION")
                    reasons.update(why for ms, why in ((flash, why_flash), (cudnn, why_cudnn)) if ms is None)
                    share = (f"{p.flops() / (ours / 1e3) / 1e9 / matmul_gflops:.2f}" if matmul_gflops else "-")
                    print(f"{dtype:<9} {n:>6} {dim:>4} {int(causal):>6} {ours:9.3f} {rate(p, ours):>8} {share:>6} "
                          f"{rate(p, flash):>8} {rate(p, cudnn):>8} {rate(p, mma):>8} {ratio(flash, ours):>8} "
                          f"{ratio(cudnn, ours):>8}", flush=True)
    for reason in sorted(reasons):
        print(f"  -: {reason}")


def scaled(seqs: Sequence[int], seq_scale: int) -> tuple[int, ...]:
    """Each N divided by --seq-scale (at least 1), repeats dropped."""
    return tuple(dict.fromkeys(max(1, n // seq_scale) for n in seqs))


def build_parser() -> Parser:
    parser = Parser(prog="python -m kernels.headline", doc=__doc__)
    parser.add_argument("--iters", type=integer("iters", 1, 10_000), default=20, help="timed launches (default 20)")
    parser.add_argument("--gpu-device", choices=target.DEVICES, default="cuda",
                        help="cuda: the GPU (default); fake: kernels/fake.py, which checks the tool, not a GPU")
    parser.add_argument("--seq-scale", type=integer("seq-scale", 1, 64), default=None,
                        help="divide every N by this (default 1 on cuda; 32 on the fake device, whose numpy runs "
                             "N 4096 for minutes)")
    parser.add_argument("--seqs", type=int_list("seqs", 1, 65536), default=None,
                        help="N of the 16-bit comparison (default 1024,4096,16384) or of a variant sweep's timed "
                             "launches (default 4096), each then divided by --seq-scale")
    parser.add_argument("--no-16bit", action="store_true", help="skip the float16 and bfloat16 comparison")
    parser.add_argument("--q15-seqs", type=int_list("q15-seqs", 1, 32768), default=None,
                        help="N of the q15 section (default 1024,4096), each divided by --seq-scale")
    parser.add_argument("--no-q15", action="store_true", help="skip the q15 kernel beside float16")
    parser.add_argument("--variants", choices=RECORDS, default=None,
                        help="instead of the ratios, sweep this kernel's launch variants (tc: mma.sync, tf32: "
                             "3xTF32, wgmma): each checked at awkward N, then timed at N 4096 beside torch "
                             "(default: the ratios)")
    parser.add_argument("--set", dest="variant_set", default=None,
                        help="with --variants: which launches, all (default), quick (one per d), d128 (tc), "
                             "stages, i34, persist, bc192, early_k or sched3 (wgmma)")
    parser.add_argument("--out", type=folder, default=None,
                        help=f"with --variants: the folder of results.csv (default {DEFAULT_OUT})")
    return parser


def ratios(args, settings: target.Settings) -> int:
    """The ratios of docs/performance.md."""
    dev = target.backend(settings)
    peak_gflops, copy_gbps = dev.ceilings()
    ceilings = (f"copy {copy_gbps:.0f} GB/s; fp32 matmul {peak_gflops / 1e3:.1f} TFLOP/s" if peak_gflops
                else "no ceilings measured")
    print(f"device: {target.device(settings)}; {ceilings}")
    n2, n4 = 2048 // args.seq_scale, 4096 // args.seq_scale
    flash_over_naive(n2, args.iters, settings, copy_gbps)
    for dim, causal in ((64, False), (64, True), (128, False), (128, True)):
        fp32_against_torch(AttentionProblem(heads=16, seq=n4, dim=dim, causal=causal), args.iters, settings)
    if not args.no_16bit:
        half_precision(scaled(args.seqs or HALF_SEQS, args.seq_scale), args.iters, settings)
    if not args.no_q15:
        rows = q15_beside_half(scaled(args.q15_seqs or Q15_SEQS, args.seq_scale), args.iters, settings)
        if any(row.status in FAILED_STATUSES for row in rows):
            return 1
    return 0


def flash_over_naive(n: int, iters: int, settings: target.Settings, copy_gbps: float | None) -> None:
    """flash against naive at N = n, d = 64, 16 heads, and naive's effective bandwidth over the copy's."""
    dev = target.backend(settings)
    p2 = AttentionProblem(heads=16, seq=n, dim=64)
    path = target.launch_plan(p2, settings, dev).path
    print(f"fp32 flash: {path} (the target's plan on this device){'; FFMA beside it' if path != 'simt' else ''}")
    flash, naive = kernel_ms("flash", p2, iters, settings), kernel_ms("naive", p2, iters, settings)
    print(f"N={n} d=64 H=16: flash {flash:.3f} ms, naive {naive:.3f} ms, flash speed-up {naive / flash:.2f}x")
    naive_gbps = target.model_bytes("naive", p2) / (naive / 1e3) / 1e9
    if copy_gbps:
        print(f"naive effective {naive_gbps:.0f} GB/s = {naive_gbps / copy_gbps:.2f} of copy bandwidth")


def fp32_against_torch(p4: AttentionProblem, iters: int, settings: target.Settings) -> None:
    """fp32 flash (the dispatched path, and FFMA beside it where that is not the one) against torch EFFICIENT."""
    dev = target.backend(settings)
    ffma = None if target.launch_plan(p4, settings, dev).path == "simt" else dataclasses.replace(settings,
                                                                                                fp32_path="simt")
    flash4 = kernel_ms("flash", p4, iters, settings)
    beside = ""
    if ffma:
        ffma4 = kernel_ms("flash", p4, iters, ffma)
        beside = f", FFMA {ffma4:.3f} ms ({rate(p4, ffma4)})"
    efficient, note = torch_ms(p4, iters, settings)
    head = f"N={p4.seq} d={p4.dim} causal={int(p4.causal)}: flash {flash4:.3f} ms ({rate(p4, flash4)} TFLOP/s){beside}"
    if efficient is None:
        print(f"{head}; {note}")
    else:
        print(f"{head}, SDPA EFFICIENT {efficient:.3f} ms ({rate(p4, efficient)}); flash/torch "
              f"speed {efficient / flash4:.2f} ({note})")


def check_sections(args) -> None:
    """SpecError where an option would be silently ignored: the q15 and 16-bit options belong to the ratios, not to
    a variant sweep; --seqs with --no-16bit (outside a sweep) and --q15-seqs with --no-q15 set a section not run."""
    if args.variants:
        ratio_only = [flag for flag, on in (("--no-16bit", args.no_16bit), ("--no-q15", args.no_q15),
                                            ("--q15-seqs", args.q15_seqs is not None)) if on]
        if ratio_only:
            raise SpecError(f"{', '.join(ratio_only)} apply only to the ratios, not with --variants "
                            f"{args.variants}; allowed: --seqs for the sweep's timed N")
    elif args.no_16bit and args.seqs is not None:
        raise SpecError("--seqs sets the 16-bit comparison's N, which --no-16bit skips; allowed: one of them")
    if args.no_q15 and args.q15_seqs is not None:
        raise SpecError("--q15-seqs sets the q15 section's N, which --no-q15 skips; allowed: one of them")


def main(argv: Sequence[str] | None = None) -> int:
    def body() -> int:
        args = build_parser().parse_args(argv)
        if not args.variants and (args.variant_set is not None or args.out is not None):
            raise SpecError("--set and --out apply only with --variants; allowed: --variants tc|tf32|wgmma with them, "
                            "or neither for the ratios")
        check_sections(args)
        args.variant_set = args.variant_set or "all"
        args.out = args.out or DEFAULT_OUT
        if args.seq_scale is None:
            args.seq_scale = 32 if args.gpu_device == "fake" else 1
        settings = target.Settings(device=args.gpu_device)
        ok, reason = target.available(settings)
        if not ok:
            raise UnavailableError(f"nothing can be measured: {reason} (--gpu-device fake checks the tool without a "
                                   "GPU)")
        if args.variants:
            return variants_sweep(args.variants, args.variant_set, args.iters, args.seq_scale, settings, args.out,
                                  scaled(args.seqs or VARIANT_SEQS, args.seq_scale))
        return ratios(args, settings)

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
