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

``--variants tc|tf32|wgmma [--set all|quick|d128|stages] [--out DIR]`` runs, instead of the ratios, the development
sweep of one kernel's launch configurations (what chose TC_CONFIGS, TF32_CONFIGS and WGMMA_CONFIGS in
kernels/variants.py; it replaces scripts/gpu_{tc,tf32,wgmma}_bench.py): each launch, built from its variant record,
is judged against the float64 golden at N 1, 17, 1000 and 4097 (3 heads), then timed at N 4096 (16 heads; `--seqs`
for others) beside
torch (FLASH and cuDNN in 16 bits, EFFICIENT and the FFMA kernel in fp32, and mma.sync beside wgmma). Every launch
is a row of the one results schema in OUT/results.csv (default reports/latest/variants); a table of the timed rows
ends the run, TFLOP/s by host/problem.py's FLOP formula.

    python -m kernels.headline [--iters 20] [--gpu-device cuda|fake] [--seq-scale N] [--seqs 1024,4096,16384]
                               [--no-16bit] [--q15-seqs 1024,4096] [--no-q15]
    python -m kernels.headline --variants wgmma --set quick --out reports/latest/variants

Exit status: 0 done (every variant row ok or skipped); 1 a kernel wrong (the ratios stop at it), a variant or
q15-section row wrong or failed, the device failed, or no device to run on (no GPU: one line with the reason);
2 bad arguments only; 130 interrupted.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from host.cli_common import Parser, folder, guard, int_list, integer, output_folder
from host.errors import SpecError, TargetError, UnavailableError
from host.problem import AttentionProblem
from host.results import FAILED_STATUSES, Result
from host.results_file import ResultsFile
from host.target_api import Inputs, RunContext
from host.timing import summarize
from host.verdict import check_float
from kernels import target
from kernels.q15_headline import Q15_SEQS, q15_beside_half
from kernels.halves import HALF_DTYPES
from kernels.variants import FLASH_TC, FLASH_TF32, FLASH_WGMMA, TcConfig, Tf32Config, Variant, WgmmaConfig

WARMUP = 3
#: N of the 16-bit comparison (the issue-34 lengths), and of a variant sweep's timed launches, unless --seqs.
HALF_SEQS = (1024, 4096, 16384)
VARIANT_SEQS = (4096,)


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
    return "-" if not ms else f"{problem.flops() / (ms / 1e3) / 1e12:.1f}"


def ratio(theirs: float | None, ours: float) -> str:
    """Our speed over theirs, '-' without their time."""
    return "-" if not theirs else f"{theirs / ours:.2f}"


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


# ---------------------------------------------------------------------------------------------------------- variants

#: --variants KERNEL --set NAME: the launch configurations a development sweep tries (what scripts/gpu_tc_bench.py,
#: gpu_tf32_bench.py and gpu_wgmma_bench.py did), per head dimension; "all" is the sweep that chose the committed
#: TC_CONFIGS, TF32_CONFIGS and WGMMA_CONFIGS (kernels/variants.py), "quick" one launch per d.
VARIANT_SETS = {
    "tc": {"all": {64: [TcConfig(4, 64, 2), TcConfig(8, 64, 2), TcConfig(4, 128, 1), TcConfig(4, 128, 2)],
                   128: [TcConfig(8, 128, 1), TcConfig(4, 32, 2), TcConfig(8, 32, 2), TcConfig(4, 64, 2),
                         TcConfig(8, 64, 2)]},
           "quick": {64: [TcConfig(4, 64, 1)], 128: [TcConfig(4, 64, 1)]}},
    "tf32": {"all": {64: [Tf32Config(4, 32, 2, False), Tf32Config(4, 32, 1, True), Tf32Config(4, 64, 1, True),
                          Tf32Config(8, 64, 1, True)],
                     128: [Tf32Config(8, 64, 1, False), Tf32Config(8, 32, 1, False), Tf32Config(4, 32, 1, False)]},
             "quick": {64: [Tf32Config(4, 32, 2, False)], 128: [Tf32Config(8, 64, 1, False)]}},
    "wgmma": {"all": {64: [WgmmaConfig(128, c, 2, s) for c in (2, 3) for s in (0, 1, 2)]
                      + [WgmmaConfig(128, 2, 3, 2), WgmmaConfig(128, 3, 3, 2)],
                      128: [WgmmaConfig(128, 2, 2, s) for s in (0, 1, 2)] + [WgmmaConfig(128, 2, 3, 2)]},
              "quick": {64: [WgmmaConfig(128, 2, 3, 2)], 128: [WgmmaConfig(128, 2, 3, 2)]},
              "stages": {64: [WgmmaConfig(128, 2, 3, s) for s in (0, 1, 2)] + [WgmmaConfig(128, 2, 4, 2)],
                         128: [WgmmaConfig(128, 2, 3, s) for s in (0, 1, 2)]},
              # issue 34: three consumer warpgroups (Br 192, FlashAttention-3's d-64 tile) now that the producer
              # warpgroup and the turns exist (last tried at 2 stages, schedule 0), the stage count at each d, and
              # the larger key blocks (FA3's Bc 176 at d 128; Bc 192 fills 227 KB at d 128 with 2 stages): the
              # softmax bookkeeping a block (max, shuffles, rescale of O) spread over more MMA work
              "i34": {64: [WgmmaConfig(128, 2, 3, 2), WgmmaConfig(128, 3, 3, 2), WgmmaConfig(128, 3, 4, 2),
                           WgmmaConfig(128, 2, 4, 2), WgmmaConfig(192, 2, 2, 2), WgmmaConfig(192, 2, 3, 2)],
                      128: [WgmmaConfig(128, 2, 3, 2), WgmmaConfig(128, 2, 2, 2), WgmmaConfig(176, 2, 2, 2),
                            WgmmaConfig(192, 2, 2, 2)]}},
}
VARIANT_SETS["tc"]["d128"] = {128: VARIANT_SETS["tc"]["all"][128]}
RECORDS = {"tc": FLASH_TC, "tf32": FLASH_TF32, "wgmma": FLASH_WGMMA}
#: The awkward lengths each launch is checked at (3 heads) before it is timed at N 4096 (16 heads).
CHECK_SEQS = (1, 17, 1000, 4097)
DEFAULT_OUT = Path("reports/latest/variants")


def configured(record: Variant, config: tuple, dim: int) -> Variant:
    """`record` launching `config` at head dimension `dim`, causal or not."""
    keys = [dim] if record is FLASH_WGMMA else [(dim, False), (dim, True)]
    return dataclasses.replace(record, configs=tuple((key, config) for key in keys))


def variant_row(chosen: Variant, problem: AttentionProblem, iters: int, dev, context: RunContext,
                timed: bool) -> Result:
    """One launch of `chosen` judged against the float64 golden (host/verdict.py) and, when `timed`, timed with the
    device's timer; a launch over the device's shared memory is skipped, one that fails to build or run an error."""
    config = chosen.config(problem)
    [launch_record] = chosen.launches(problem, config.br, config.bc)
    fields = dict(br=config.br, bc=config.bc, warmup=WARMUP if timed else 0,
                  message=f"{launch_record.function}: {launch_record.block[0]} threads, {launch_record.smem} B shared")
    if launch_record.smem > dev.smem_optin():
        return context.result(problem, "gpu", "flash", dev.describe(), status="skipped",
                              **{**fields, "message": fields["message"] + f" > {dev.smem_optin()} B opt-in"})
    try:
        inputs = Inputs(problem)
        launch = dev.launcher("flash", problem, inputs, config.br, config.bc, chosen.path, chosen=chosen)
        launch.launch()
        out = launch.output()
        target.check_output("flash", out)
        verdict = check_float(out, problem, inputs.golden_from(dev.golden))
        if timed:
            fields.update(summarize(dev.event_times(launch.launch, WARMUP, iters)).as_fields(),
                          timing_source=dev.timing_source)
    except Exception as exc:  # noqa: BLE001 - a launch that does not build or run is its row; the sweep goes on
        return context.result(problem, "gpu", "flash", dev.describe(), status="error",
                              **{**fields, "message": f"{fields['message']}: {type(exc).__name__}: {exc}"[:500]})
    return context.result(problem, "gpu", "flash", dev.describe(), verdict=verdict, **fields)


def anchors(kind: str, problem: AttentionProblem, iters: int, settings: target.Settings) -> dict[str, float | None]:
    """Median ms of what a variant is timed beside: torch FLASH and cuDNN (16-bit), torch EFFICIENT and the FFMA
    kernel (3xTF32), and the mma.sync kernel beside wgmma."""
    if kind == "tf32":
        found = {"EFFICIENT": torch_ms(problem, iters, settings)[0],
                 "FFMA": kernel_ms("flash", problem, iters, dataclasses.replace(settings, fp32_path="simt"))}
    else:
        found = {name: torch_ms(problem, iters, settings, f"{name}_ATTENTION")[0] for name in ("FLASH", "CUDNN")}
    if kind == "wgmma":
        found["mma.sync"] = kernel_ms("flash", problem, iters, dataclasses.replace(settings, tc_path="mma"))
    return found


def variants_sweep(kind: str, chosen_set: str, iters: int, seq_scale: int, settings: target.Settings,
                   out: Path, seqs: Sequence[int] = VARIANT_SEQS) -> int:
    """Every launch of VARIANT_SETS[kind][chosen_set], in each dtype of the kernel and both masks: checked at the
    awkward CHECK_SEQS, then timed at each N of `seqs` (already divided by the scale) beside its anchors; rows into
    OUT/results.csv, a table on stdout."""
    record, dev = RECORDS[kind], target.backend(settings)
    if chosen_set not in VARIANT_SETS[kind]:
        raise SpecError(f"--set {chosen_set!r} has no {kind} variants; allowed: {', '.join(VARIANT_SETS[kind])}")
    results, context = ResultsFile(output_folder(out) / "results.csv"), RunContext.start()
    checks = sorted({max(1, seq // seq_scale) for seq in CHECK_SEQS})
    table = []
    for dtype in record.dtypes:
        for dim, configs in VARIANT_SETS[kind][chosen_set].items():
            for causal in (False, True):
                checked = AttentionProblem(heads=3, seq=1, dim=dim, causal=causal, dtype=dtype)
                for config in configs:
                    chosen = configured(record, config, dim)
                    for seq in checks:
                        results.append(row := variant_row(chosen, checked.with_(seq=seq), iters, dev, context,
                                                          timed=False))
                        print(f"  check {row.message.split(':')[0]} N={seq} causal={int(causal)}: {row.status}",
                              file=sys.stderr, flush=True)
                for n in seqs:
                    timed = checked.with_(heads=16, seq=n)
                    beside = anchors(kind, timed, iters, settings)
                    for config in configs:
                        results.append(row := variant_row(configured(record, config, dim), timed, iters, dev,
                                                          context, timed=True))
                        table.append((row, config, beside))
    print_variants(table)
    print(f"{results.path}")
    return 1 if any(row.status in FAILED_STATUSES for row in results.read()) else 0


def print_variants(table: list) -> None:
    """The timed rows: the launch, ms and TFLOP/s (host/problem.py's FLOP formula), each anchor's TFLOP/s and our
    speed over it."""
    for row, config, beside in table:
        problem = AttentionProblem(heads=row.heads, seq=row.seq, dim=row.dim, causal=row.causal, dtype=row.dtype)
        ours = row.p50_ms
        versus = "  ".join(f"{name} {rate(problem, ms)} (x{ratio(ms, ours)})" if ours and ms else f"{name} -"
                           for name, ms in beside.items())
        timing = f"{ours:8.3f} ms {rate(problem, ours):>6} TFLOP/s" if ours else f"{row.status:>24}"
        print(f"{row.dtype:<9} N{row.seq:<6} d{row.dim:<4} causal={int(row.causal)} {tuple(config)!s:<20} {timing}  "
              f"{versus}")


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
                             "stages or i34 (wgmma)")
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
        beside = f", FFMA {ffma4:.3f} ms ({p4.flops() / (ffma4 / 1e3) / 1e12:.1f})"
    efficient, note = torch_ms(p4, iters, settings)
    tflops = p4.flops() / (flash4 / 1e3) / 1e12
    head = f"N={p4.seq} d={p4.dim} causal={int(p4.causal)}: flash {flash4:.3f} ms ({tflops:.1f} TFLOP/s){beside}"
    if efficient is None:
        print(f"{head}; {note}")
    else:
        print(f"{head}, SDPA EFFICIENT {efficient:.3f} ms ({p4.flops() / (efficient / 1e3) / 1e12:.1f}); flash/torch "
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
