"""The GPU target: naive, fused and flash attention kernels (kernels/*.cu), timed on a device, in float32, and the
flash kernel on tensor cores in float16 and bfloat16 (`--gpu-dtype`): on Hopper (sm_90) the warpgroup-MMA kernel
(kernels/flash_wgmma.cu), elsewhere from sm_80 the mma.sync one (kernels/flash_tc.cu); `--gpu-tc-path` forces one,
and each 16-bit row's message names the path that ran. float32 flash runs from sm_80 at d 64 and 128 on the tensor
cores by 3xTF32 (kernels/flash_tf32.cu, the arithmetic of torch's EFFICIENT kernel in fp32), elsewhere (or with
`--gpu-fp32-path simt`, or a forced `--gpu-tile`) in FFMA (kernels/flash.cu); its row's message says which.

Every kernel runs every shape of the problem: decode and chunks of prefill (q_len queries against a KV cache of
seq keys, the causal mask aligned to the bottom right) and grouped-query heads (kv_heads dividing heads). The plan
(kernels/plan.py) sends a head of fewer than SPLIT_BELOW_ROWS queries against a longer KV cache (decode) down the
split-KV path: a K/V head's query heads packed into one block's rows, so that K and V are read once for the group,
and the (tile, key block) units shared equally among a block for every block slot of the SMs (a stream-K schedule,
kernels/shares.py), a second launch combining the partial softmax states of the tiles a share boundary cut
(Flash-Decoding's combine).

`q15` is the Q15 contract (docs/q15.md) on the integer tensor cores (kernels/q15.cu, its row kernels/q15_row.py):
bit-exact with host/q15.py on every shape of the contract. It runs where asked for, by `--kernels q15` or
`--gpu-dtype ...,q15`, and not in a default sweep (its verdict runs the numpy model on the host, seconds a head at
long sequences).
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass

import numpy as np

from host.errors import SpecError, TargetError
from host.problem import AttentionProblem
from host.q15 import SEQ_MAX
from host.results import Result
from host.target_api import ClusterNeeds, Inputs, RunOptions
from host.timing import summarize
from host.verdict import check_float
from kernels import q15_row
from kernels.halves import HALF_DTYPES
from kernels.plan import (H200_SMS, MIN_TILES_PER_SM, SHARE_MIN_KEY_BLOCKS, SPLIT_BELOW_ROWS,  # noqa: F401
                          SPLIT_PARTIAL_SHARE, Plan, default_tile, device_sms, fp32_plan, kv_parts, launch_plan,
                          partial_bytes, split_plan, tc_plan, WGMMA_SPLIT_AUTO)
from kernels.variants import (FLASH, MAX_GRID_X, SPLIT_PATHS, SPLIT_WGMMA, TILE_CHOICES, check_tile, flash_grid,
                              head_rows, variant)

#: kernel name → the dtype it computes in (float32, the default dtype; `kernels(settings)` adds the 16-bit ones).
KERNELS = {"naive": "float32", "fused": "float32", "flash": "float32"}
#: --gpu-dtype names → problem dtypes (q15: the Q15 contract's kernel, kernels/q15_row.py).
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "q15": "q15"}

#: The FFMA flash kernel's threads per block (kernels/variants.py FLASH; its tiles are TILE_CHOICES, its default
#: tile per d DEFAULT_TILES, both from there).
FLASH_THREADS = FLASH.threads
DEVICES = ("cuda", "fake")
#: The most (batch, head) pairs one launch takes: CUDA's limit on a grid's y and z extent, where naive and fused put
#: them (flash puts tiles × pairs on x: variants.MAX_GRID_X).
MAX_GRID_BH = 65535
#: --gpu-tc-path: which tensor-core kernel runs the 16-bit rows. auto: wgmma on sm_90, mma.sync elsewhere.
TC_PATHS = ("auto", "wgmma", "mma")
#: --gpu-fp32-path: how float32 flash computes. auto: 3xTF32 on the tensor cores where it is built (sm_80+, d 64 and
#: 128, no forced tile), FFMA elsewhere; 3xtf32 (skipped flash rows where it is not built); simt (FFMA everywhere).
FP32_PATHS = ("auto", "3xtf32", "simt")


@dataclass(frozen=True)
class Settings:
    """The GPU target's options: which device (the CUDA GPU, or the numpy fake) and a flash tile to force."""

    device: str = "cuda"
    tile: tuple[int, int] | None = None  # (Br, Bc); None: default_tile
    dtypes: tuple[str, ...] = ("float32",)  # float32 (every float kernel), float16, bfloat16 (flash), q15 (q15)
    tc_path: str = "auto"  # the 16-bit rows' kernel, from TC_PATHS
    fp32_path: str = "auto"  # float32 flash's arithmetic, from FP32_PATHS

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise SpecError(f"--gpu-device {self.device!r} is unknown; allowed: {', '.join(DEVICES)}")
        if self.tc_path not in TC_PATHS:
            raise SpecError(f"--gpu-tc-path {self.tc_path!r} is unknown; allowed: {', '.join(TC_PATHS)}")
        if self.fp32_path not in FP32_PATHS:
            raise SpecError(f"--gpu-fp32-path {self.fp32_path!r} is unknown; allowed: {', '.join(FP32_PATHS)}")
        if self.tile is not None and self.fp32_path == "3xtf32":
            raise SpecError("--gpu-tile sets the FFMA flash kernel's tile; --gpu-fp32-path 3xtf32 runs with its "
                            "fixed tile per d (kernels/variants.py TF32_CONFIGS): drop one of the two")
        for dtype in self.dtypes:
            if dtype not in DTYPES.values():
                raise SpecError(f"dtype {dtype!r} is unknown; allowed: {', '.join(DTYPES.values())}")
        if self.tile is not None:
            check_tile(*self.tile)


def parse_tile(text: str) -> tuple[int, int]:
    """An argparse type: 'BRxBC', e.g. '64x32', each from TILE_CHOICES."""
    match = re.fullmatch(r"\s*(\d+)\s*[x×]\s*(\d+)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a tile BRxBC, e.g. 64x32")
    tile = int(match[1]), int(match[2])
    try:
        check_tile(*tile)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return tile


def add_device_options(group: argparse._ArgumentGroup) -> None:
    """The option that chooses the device, shared by host.compare and a cluster worker (CLUSTER)."""
    group.add_argument("--gpu-device", choices=DEVICES, default="cuda",
                       help="cuda: the GPU through CuPy (default); fake: numpy standing in for it, to try the "
                            "harness without a GPU (its rows are no GPU measurement)")


def add_options(group: argparse._ArgumentGroup) -> None:
    add_device_options(group)
    group.add_argument("--gpu-tile", type=parse_tile, default=None, metavar="BRxBC",
                       help=f"flash tile, Br and Bc from {','.join(map(str, TILE_CHOICES))} (default: by d, "
                            "see kernels/variants.py DEFAULT_TILES); float32 FFMA kernel only (implies "
                            "--gpu-fp32-path simt)")
    group.add_argument("--gpu-dtype", "--dtype", type=parse_dtypes, default=("float32",), metavar="LIST",
                       help="precisions, comma-separated: fp32 (naive, fused, flash), fp16 and bf16 (flash on "
                            "tensor cores, d 64 and 128), q15 (the Q15 contract on the integer tensor cores, kernel "
                            "q15; --kernels q15 adds it too); default fp32")
    split_auto = (f"Hopper's wgmma one at d {', '.join(str(d) for d, _ in SPLIT_WGMMA.configs)}, else mma.sync's"
                  if WGMMA_SPLIT_AUTO else "mma.sync's, the wgmma one only where forced until it has run on a GPU: "
                  "kernels/plan.py WGMMA_SPLIT_AUTO")
    group.add_argument("--gpu-tc-path", choices=TC_PATHS, default="auto",
                       help="the 16-bit rows' kernel: auto (default: wgmma on Hopper, mma.sync elsewhere from "
                            f"sm_80; decode heads on a split-KV path: {split_auto}), wgmma (skipped rows off Hopper; "
                            "decode heads on the wgmma split-KV path), mma (mma.sync everywhere, for comparison)")
    group.add_argument("--gpu-fp32-path", choices=FP32_PATHS, default="auto",
                       help="float32 flash's arithmetic: auto (default: 3xTF32 on the tensor cores from sm_80 at d 64 "
                            "and 128, as torch's EFFICIENT kernel; FFMA elsewhere), 3xtf32 (skipped flash rows "
                            "where not built), simt (FFMA everywhere)")


def parse_dtypes(text: str) -> tuple[str, ...]:
    """An argparse type: a comma-separated list of fp32, fp16, bf16, q15."""
    names = [name.strip() for name in text.split(",")]
    for name in names:
        if name not in DTYPES:
            raise argparse.ArgumentTypeError(f"dtype {name!r} is unknown; allowed: {', '.join(DTYPES)}")
    return tuple(dict.fromkeys(DTYPES[name] for name in names))


def settings(args: argparse.Namespace) -> Settings:
    if args.gpu_tile is not None and "float32" not in args.gpu_dtype:
        raise SpecError("--gpu-tile sets the float32 flash kernel's tile; --gpu-dtype has no fp32 (the tensor-core "
                        "kernel's tile is fixed per d and mask: kernels/variants.py TC_CONFIGS)")
    # an option that chooses how rows run while no row it chooses for is asked: refused, as --gpu-tile above is
    if args.gpu_tc_path != "auto" and not set(args.gpu_dtype) & set(HALF_DTYPES):
        raise SpecError(f"--gpu-tc-path {args.gpu_tc_path} chooses the 16-bit rows' kernel; --gpu-dtype has no fp16 "
                        "or bf16: add one, or drop --gpu-tc-path")
    if args.gpu_fp32_path != "auto" and "float32" not in args.gpu_dtype:
        raise SpecError(f"--gpu-fp32-path {args.gpu_fp32_path} chooses float32 flash's arithmetic; --gpu-dtype has "
                        "no fp32: add it, or drop --gpu-fp32-path")
    kernels = getattr(args, "kernels", None) or ()
    if kernels and "flash" not in kernels:
        for flag, given in (("--gpu-tile", args.gpu_tile is not None), ("--gpu-tc-path", args.gpu_tc_path != "auto"),
                            ("--gpu-fp32-path", args.gpu_fp32_path != "auto")):
            if given:
                raise SpecError(f"{flag} chooses how flash runs; --kernels {','.join(kernels)} runs no flash row: add "
                                f"flash, or drop {flag}")
    dtypes = args.gpu_dtype
    if q15_row.KERNEL in (getattr(args, "kernels", None) or ()) and "q15" not in dtypes:
        dtypes += ("q15",)  # --kernels q15 asks for it whatever --gpu-dtype says
    return Settings(device=args.gpu_device, tile=args.gpu_tile, dtypes=dtypes, tc_path=args.gpu_tc_path,
                    fp32_path=args.gpu_fp32_path)


def add_worker_options(group: argparse._ArgumentGroup) -> None:
    """A cluster worker's GPU options: --gpu-device (as host.compare has it) and which CUDA GPU (--gpu INDEX)."""
    add_device_options(group)
    group.add_argument("--gpu", metavar="INDEX", dest="gpu_index",
                       help="with --gpu-device cuda: the GPU's index (sets CUDA_VISIBLE_DEVICES; default: the one "
                            "CUDA shows first)")


def prepare_worker(args: argparse.Namespace) -> None:
    """Before a worker opens anything: --gpu INDEX becomes CUDA_VISIBLE_DEVICES, so CUDA sees that GPU only."""
    index = getattr(args, "gpu_index", None)
    if index is None:
        return
    if not index.isascii() or not index.isdigit():
        raise SpecError(f"--gpu {index!r} is not a GPU index; allowed: 0, 1, 2, ...")
    if getattr(args, "gpu_device", None) != "cuda":
        raise SpecError(f"--gpu {index} picks a CUDA GPU; give --gpu-device cuda too")
    os.environ["CUDA_VISIBLE_DEVICES"] = index


def model(settings: Settings, session: object = None) -> str:
    """The device's model name, e.g. 'NVIDIA H200' ('fake GPU' for the fake): a cluster worker's resource names it."""
    return backend(settings).model()


#: A cluster worker owns a GPU (--gpu-device cuda [--gpu INDEX]) or the fake (--gpu-device fake); its rows ask for
#: one GPU, or one of a model (host.compare --cluster-gpu MODEL).
CLUSTER = ClusterNeeds(settings=Settings, options={"device": "--gpu-device"}, add_options=add_worker_options,
                       usage="--gpu-device cuda|fake [--gpu INDEX]", resource="gpu", model=model,
                       prepare=prepare_worker)


def kernels(settings: Settings) -> list[tuple[str, str]]:
    """(kernel, dtype) pairs to run: every float kernel in float32, flash (tensor cores) in each 16-bit dtype, q15
    in the Q15 contract's integers."""
    pairs = []
    for dtype in settings.dtypes:
        pairs += (list(KERNELS.items()) if dtype == "float32" else [(q15_row.KERNEL, dtype)] if dtype == "q15"
                  else [("flash", dtype)])
    return pairs


def backend(settings: Settings | None = None):
    """The device object for these settings: kernels.cuda.CudaDevice or kernels.fake.FakeDevice."""
    if settings is not None and settings.device == "fake":
        from kernels.fake import FakeDevice

        return FakeDevice
    from kernels.cuda import CudaDevice

    return CudaDevice


def available(settings: Settings | None = None) -> tuple[bool, str]:
    """Whether the chosen device can run, and if not, why."""
    return backend(settings).available()


def supports(problem: AttentionProblem) -> tuple[bool, str]:
    """Every GPU kernel runs every shape: q_len < seq (the mask aligned to the bottom right) and grouped K/V heads
    (kernels/kv_rows.cuh); q15 within the contract's keys (host.q15.SEQ_MAX)."""
    if problem.dtype == "q15" and problem.seq > SEQ_MAX:
        return False, f"seq={problem.seq} is past the Q15 contract's {SEQ_MAX} keys (host.q15.SEQ_MAX)"
    return True, ""


def device(settings: Settings | None = None, session: object = None) -> str:
    """The device in words, e.g. 'NVIDIA H200 (132 SMs)'; '' when it cannot be asked."""
    ok, _ = available(settings)
    return backend(settings).describe() if ok else ""


def sm_count(settings: Settings | None = None) -> tuple[int, str]:
    """(the chosen device's multiprocessor count, '') or (the H200's, why it fell back to it)."""
    return device_sms(backend(settings))


def model_bytes(kernel: str, problem: AttentionProblem, plan: Plan | None = None) -> int:
    """Modelled device-memory traffic of one call (docs/gpu.md), in the problem's dtype (4 bytes for float32, 2 for
    float16 and bfloat16), for M = q_len queries against N keys, B·H query heads and B·Hkv K/V heads:

    naive: Q, K read and S written by the score kernel; S read and P written by the softmax; P, V read and O written
    by P·V: 4·(2·BH·M·d + 2·BHkv·N·d + 4·BH·M·N) (square: 4·BH·(4·N·d + 4·N²)). fused and flash: Q, K, V read once
    and O written once (problem.min_bytes); the re-reads of K and V by every query row (fused), query tile or query
    head of a group (flash) are served by the L2 cache, not counted here. A split-KV call (`plan`) adds its partial
    states, written and read once in float32: 2·4·(d + 1) for each row of a partial segment (plan.partial_bytes).
    """
    bh, bkv, m, n, d = (problem.batch * problem.heads, problem.batch * problem.kv_head_count, problem.queries,
                        problem.seq, problem.dim)
    if kernel == "naive":
        return 4 * (2 * bh * m * d + 2 * bkv * n * d + 4 * bh * m * n)
    partials = partial_bytes(problem, plan.br, plan.bc, plan.parts) if plan is not None and plan.parts else 0
    return problem.min_bytes() + partials


def naive_scores_bytes(problem: AttentionProblem) -> int:
    """Device memory the naive kernel needs for S (P overwrites it): 4·B·H·q_len·N bytes."""
    return 4 * problem.batch * problem.heads * problem.queries * problem.seq


def fused_cap(dev) -> int:
    """The largest N the fused kernel takes: N + 32 floats must fit one block's opt-in shared memory."""
    return dev.smem_optin() // 4 - 32


def launcher(kernel: str, problem: AttentionProblem, inputs: Inputs, br: int, bc: int, dev=None,
             path: str = "mma.sync", parts: int = 0):
    """Check the launch against the device's limits, then build its launcher (buffers allocated, O poisoned); `path`
    picks the flash kernel (Plan.path): the tensor-core kernel of a 16-bit problem, 3xtf32 or the FFMA one (any
    other path) in float32, split-kv (`parts` blocks sharing the keys) in either."""
    dev = dev or backend()
    if kernel not in KERNELS:
        raise SpecError(f"kernel {kernel!r} is unknown; allowed: {', '.join(KERNELS)}")
    if kernel != "flash" and problem.batch * problem.heads > MAX_GRID_BH:  # their grid's y or z axis
        raise TargetError(f"{kernel} puts batch·heads = {problem.batch * problem.heads} on a grid axis that holds "
                          f"1..{MAX_GRID_BH} (CUDA's grid y and z limit); flash takes them", status="skipped")
    rows = head_rows(problem, packed=path in SPLIT_PATHS)
    blocks = flash_grid(rows.nq, br, rows.heads) if kernel == "flash" else 0
    if blocks > MAX_GRID_X:
        raise SpecError(f"flash Br={br} at q_len={problem.queries}, batch·heads={problem.batch * problem.heads} needs "
                        f"{blocks} blocks; allowed: 1..{MAX_GRID_X} (CUDA's grid x limit): take a larger Br")
    if kernel == "naive":  # refuse before any allocation: S alone can exceed the device
        need, free = naive_scores_bytes(problem), dev.free_bytes()
        if need + problem.min_bytes() > free:
            raise TargetError(f"naive needs {need} B ({need / 2**30:.1f} GiB) for S = 4·B·H·N², "
                              f"{free / 2**30:.1f} GiB free", status="oom")
    elif kernel == "fused" and problem.seq > fused_cap(dev):  # a shape this kernel cannot run here: skipped
        raise TargetError(f"fused keeps a row's N scores in shared memory: N={problem.seq} exceeds this device's cap "
                          f"of {fused_cap(dev)} (opt-in shared memory per block / 4 bytes − 32)", status="skipped")
    elif kernel == "flash":
        chosen = variant(kernel, problem.dtype, path)
        if chosen is FLASH:
            check_tile(br, bc)
        smem = chosen.smem(problem, br, bc, parts)
        if smem > dev.smem_optin():  # this shape cannot run in this tile here: a skipped row, as the sweep's cells
            raise TargetError(f"{chosen.label} Br={br}, Bc={bc}, d={problem.dim} needs {smem} B of shared memory per "
                              f"block; this device allows {dev.smem_optin()} B", status="skipped")
    return dev.launcher(kernel, problem, inputs, br, bc, path, parts=parts)


def run_note(kernel: str, problem: AttentionProblem, plan: Plan, dev) -> str:
    """A row's note on what ran, in the device's words: on a GPU a flash row's kernel and arithmetic ('' for naive
    and fused); on the fake, for every kernel, that numpy ran and no GPU did."""
    return dev.run_note(plan.note, variant(kernel, problem.dtype, plan.path))


def check_output(kernel: str, out: np.ndarray) -> None:
    """NaN left in O: an unwritten element (O is poisoned before the launch) or a NaN computed; TargetError."""
    if np.isnan(out).any():
        first = tuple(int(i) for i in np.argwhere(np.isnan(out))[0])
        raise TargetError(f"{kernel} left O{first} unwritten (NaN poison) or produced NaN")


def run(problem: AttentionProblem, inputs: Inputs, options: RunOptions[Settings]) -> list[Result]:
    """Launch once, judge the output against the golden, then time: one row with timing, throughput, modelled
    bytes, ceilings and the verdict (a q15 row: kernels/q15_row.py). options.settings (Settings): the device and a
    forced tile."""
    chosen = options.settings if isinstance(options.settings, Settings) else Settings()
    dev = backend(chosen)
    kernel = options.kernel
    if kernel == q15_row.KERNEL:
        return q15_row.run(problem, inputs, options, dev)
    if problem.dtype in HALF_DTYPES and kernel != "flash":
        raise SpecError(f"kernel {kernel!r} computes in float32 only; {problem.dtype} runs on flash (tensor cores)")
    # the fp32 path and the tile are flash's alone: a forced --gpu-fp32-path skips no naive or fused row
    plan = launch_plan(problem, chosen, dev) if kernel == "flash" else Plan(0, 0)
    tile = {"br": plan.br, "bc": plan.bc} if kernel == "flash" else {}
    try:
        launch = launcher(kernel, problem, inputs, plan.br, plan.bc, dev, plan.path, plan.parts)
        launch.launch()  # compile, check it runs
        dev.synchronize()
        out = launch.output()
        check_output(kernel, out)
        verdict = check_float(out, problem, inputs.golden_from(dev.golden))
        samples = dev.event_times(launch.launch, options.warmup, options.iters)
        energy = dev.energy(launch.launch)
    except dev.out_of_memory() as exc:
        raise TargetError(f"out of device memory: {exc or type(exc).__name__}", status="oom") from exc
    timing = summarize(samples)
    peak_gflops, peak_gbps = dev.ceilings(problem.dtype)
    peak_source = ("measured" if problem.dtype == "float32" else
                   "measured: fp16 tensor-core matmul (cuBLAS) in this run; bf16 runs at the same rate")
    return [options.context.result(
        problem, target="gpu", kernel=kernel, device=dev.describe(), warmup=options.warmup, **tile,
        **timing.as_fields(), timing_source=dev.timing_source, model_bytes=model_bytes(kernel, problem, plan),
        peak_gflops=peak_gflops, peak_gbps=peak_gbps, peak_source=peak_source if peak_gflops else "",
        energy_j=energy.joules_per_call if energy else None, energy_source=energy.source if energy else "",
        verdict=verdict, message="; ".join(filter(None, [run_note(kernel, problem, plan, dev),
                                                         energy.reason if energy else ""])))]
