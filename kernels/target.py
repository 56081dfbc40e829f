"""The GPU target: naive, fused and flash attention kernels (kernels/*.cu) compiled by CuPy, timed with CUDA events.

Timing covers the kernel launches only (inputs are on the device before the first event), after warm-ups, with the
L2 cache flushed between repeats. Each row carries GFLOP/s, the modelled HBM bytes of its kernel (`model_bytes`,
formulas in docs/gpu.md) and the device's own ceilings measured once per process (a large device-to-device copy
and a large float32 matmul). CuPy is imported inside functions only: this module imports on machines without it.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from host.errors import SpecError, TargetError
from host.problem import AttentionProblem
from host.reference import errors
from host.results import Result
from host.target import Inputs, RunOptions
from host.timing import summarize
from kernels.budget import flash_smem_bytes

#: kernel name → the dtype it computes in.
KERNELS = {"naive": "float32", "fused": "float32", "flash": "float32"}

SOURCE_DIR = Path(__file__).resolve().parent
FLASH_THREADS = 128
FUSED_THREADS = 256
NAIVE_TILE = 16
SOFTMAX_THREADS = 256
TILE_CHOICES = (8, 16, 32, 64, 128)
LOG2E = 1.4426950408889634

#: Default flash tiles by head dimension, (Br, Bc): the H200 sweeps' best at N = 2048 and 4096 for d = 64 and at
#: N = 4096 for d = 128 (docs/gpu.md); d = 256 from the shared-memory budget (two blocks per SM), not swept.
DEFAULT_TILES = {64: (128, 64), 128: (64, 32), 256: (16, 32)}
#: Below this many query tiles per SM, halve Br (down to 32) to fill the SMs: the sweep's best at N <= 1024.
MIN_TILES_PER_SM = 1
H200_SMS = 132


def default_tile(problem: AttentionProblem, sms: int = H200_SMS) -> tuple[int, int]:
    """The (Br, Bc) used when none is given: the entry for the smallest tabulated d >= problem.dim, with Br halved
    (not below 32) while the grid would give fewer than MIN_TILES_PER_SM blocks per SM."""
    limit = next((d for d in sorted(DEFAULT_TILES) if problem.dim <= d), None)
    if limit is None:
        raise SpecError(f"dim={problem.dim} is out of range for the GPU kernels; allowed: 1..{max(DEFAULT_TILES)}")
    br, bc = DEFAULT_TILES[limit]
    bh = problem.batch * problem.heads
    while br > 32 and -(-problem.seq // br) * bh < MIN_TILES_PER_SM * sms:
        br //= 2
    return br, bc


def sm_count() -> int:
    """The device's multiprocessor count (H200_SMS when no GPU answers)."""
    try:
        import cupy

        return int(cupy.cuda.Device().attributes["MultiProcessorCount"])
    except Exception:  # noqa: BLE001 - no device: plan for the H200
        return H200_SMS


def model_bytes(kernel: str, problem: AttentionProblem) -> int:
    """Modelled device-memory traffic of one call, fp32 (docs/gpu.md):

    naive: Q, K read and S written by the score kernel; S read and P written by the softmax; P, V read and O written
    by P·V: 4·BH·(4·N·d + 4·N²). fused and flash: Q, K, V read once and O written once, 4·BH·4·N·d; the re-reads of K
    and V by every query row (fused) or query tile (flash) are served by the L2 cache, not counted here.
    """
    bh, n, d = problem.batch * problem.heads, problem.seq, problem.dim
    if kernel == "naive":
        return 4 * bh * (4 * n * d + 4 * n * n)
    return 4 * bh * 4 * n * d


def naive_scores_bytes(problem: AttentionProblem) -> int:
    """Device memory the naive kernel needs for S (P overwrites it): 4·B·H·N² bytes."""
    return 4 * problem.batch * problem.heads * problem.seq * problem.seq


def available() -> tuple[bool, str]:
    """Whether CuPy sees a CUDA device, and if not, why."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except ImportError:
        return False, "CuPy is not installed (pip install -e '.[gpu]' for CUDA 12, '.[gpu-cuda13]' for CUDA 13)"
    except Exception as exc:  # noqa: BLE001 - CuPy raises driver/runtime errors of several kinds
        return False, f"no usable CUDA device ({type(exc).__name__}: {exc})"
    if count == 0:
        return False, "no CUDA device"
    return True, device()


@functools.lru_cache(maxsize=None)
def device() -> str:
    """The GPU's name, e.g. 'NVIDIA H200 (132 SMs)'."""
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    except Exception:  # noqa: BLE001 - no device: no name
        return ""
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return f"{name} ({props['multiProcessorCount']} SMs)"


@functools.lru_cache(maxsize=None)
def _module(name: str, expressions: tuple[str, ...] = ()):
    import cupy

    source = (SOURCE_DIR / name).read_text()
    return cupy.RawModule(code=source, options=("-std=c++17", f"-I{SOURCE_DIR}"),
                          name_expressions=list(expressions) or None)


def flash_kernel(br: int, bc: int, dim: int):
    """The flash_fwd<Br, Bc, D> instantiation, with its dynamic shared memory opted in when above 48 KB."""
    import cupy

    expression = f"flash_fwd<{br},{bc},{dim}>"
    kernel = _module("flash.cu", (expression,)).get_function(expression)
    smem = flash_smem_bytes(br, bc, dim)
    limit = cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                                 cupy.cuda.Device().id)
    if smem > limit:
        raise SpecError(f"flash Br={br}, Bc={bc}, d={dim} needs {smem} B of shared memory per block; "
                        f"this device allows {limit} B")
    if smem > 48 * 1024:
        kernel.max_dynamic_shared_size_bytes = smem
    return kernel, smem


def fused_cap() -> int:
    """The largest N the fused kernel takes: N + 32 floats must fit one block's opt-in shared memory."""
    import cupy

    limit = cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                                 cupy.cuda.Device().id)
    return limit // 4 - 32


def check_tile(br: int, bc: int) -> None:
    for name, value in (("Br", br), ("Bc", bc)):
        if value not in TILE_CHOICES:
            raise SpecError(f"{name}={value} is not supported; allowed: {', '.join(map(str, TILE_CHOICES))}")


class Launcher:
    """Device buffers for one problem and a `launch()` for one kernel; `out` is poisoned with NaN before use."""

    def __init__(self, kernel: str, problem: AttentionProblem, inputs: Inputs, br: int, bc: int):
        import cupy

        self.kernel, self.problem = kernel, problem
        bh, n, d = problem.batch * problem.heads, problem.seq, problem.dim
        if kernel == "naive":  # refuse before any allocation: S alone can exceed the device
            need = naive_scores_bytes(problem)
            free, _ = cupy.cuda.runtime.memGetInfo()
            if need + problem.min_bytes() > free:
                raise TargetError(f"naive needs {need} B ({need / 2**30:.1f} GiB) for S = 4·B·H·N², "
                                  f"{free / 2**30:.1f} GiB free", status="oom")
        self.q, self.k, self.v = (cupy.asarray(x.reshape(bh, n, d)) for x in (inputs.q, inputs.k, inputs.v))
        self.out = cupy.full((bh, n, d), np.nan, dtype=cupy.float32)
        self.args = (np.int32(n), np.int32(d))
        causal = np.int32(problem.causal)
        if kernel == "naive":
            self.s = cupy.empty((bh, n, n), dtype=cupy.float32)
            module = _module("naive.cu")
            scores, softmax, pv = (module.get_function(f"naive_{x}") for x in ("scores", "softmax", "pv"))
            tiles = (n + NAIVE_TILE - 1) // NAIVE_TILE
            scale = np.float32(problem.scale)
            self.calls = [
                (scores, (tiles, tiles, bh), (NAIVE_TILE, NAIVE_TILE), (self.q, self.k, self.s, *self.args, scale, causal), 0),
                (softmax, (n, bh), (SOFTMAX_THREADS,), (self.s, np.int32(n)), 0),
                (pv, ((d + NAIVE_TILE - 1) // NAIVE_TILE, tiles, bh), (NAIVE_TILE, NAIVE_TILE),
                 (self.s, self.v, self.out, *self.args), 0),
            ]
        elif kernel == "fused":
            cap = fused_cap()
            if n > cap:
                raise SpecError(f"fused keeps a row's N scores in shared memory: N={n} exceeds this device's cap "
                                f"of {cap} (opt-in shared memory per block / 4 bytes − 32)")
            fn = _module("fused.cu").get_function("fused_row")
            smem = 4 * (n + 32)
            if smem > 48 * 1024:
                fn.max_dynamic_shared_size_bytes = smem
            scale = np.float32(problem.scale * LOG2E)
            self.calls = [(fn, (n, bh), (FUSED_THREADS,), (self.q, self.k, self.v, self.out, *self.args, scale, causal),
                           smem)]
        elif kernel == "flash":
            check_tile(br, bc)
            fn, smem = flash_kernel(br, bc, d)
            scale = np.float32(problem.scale * LOG2E)
            self.calls = [(fn, ((n + br - 1) // br, bh), (FLASH_THREADS,),
                           (self.q, self.k, self.v, self.out, np.int32(n), scale, causal), smem)]
        else:
            raise SpecError(f"kernel {kernel!r} is unknown; allowed: {', '.join(KERNELS)}")

    def launch(self) -> None:
        for fn, grid, block, args, smem in self.calls:
            fn(grid, block, args, shared_mem=smem)


@functools.lru_cache(maxsize=None)
def ceilings() -> tuple[float, float]:
    """(GFLOP/s of a float32 8192² cuBLAS matmul, GB/s of a 1 GiB device-to-device copy, read + write), medians."""
    import cupy

    a = cupy.random.default_rng(1).standard_normal((8192, 8192), dtype=cupy.float32)
    matmul_ms = _event_times(lambda: a @ a, warmup=2, iters=5, flush=None)
    src = cupy.ones(1 << 28, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    copy_ms = _event_times(lambda: dst.__setitem__(Ellipsis, src), warmup=2, iters=10, flush=None)
    return (float(2 * 8192**3 / (np.median(matmul_ms) / 1e3) / 1e9),
            float(2 * src.nbytes / (np.median(copy_ms) / 1e3) / 1e9))


@functools.lru_cache(maxsize=None)
def _l2_flush_buffer():
    import cupy

    l2 = cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrL2CacheSize, cupy.cuda.Device().id)
    return cupy.empty(2 * l2 // 4 + 1, dtype=cupy.float32)


def _event_times(fn, warmup: int, iters: int, flush=_l2_flush_buffer) -> list[float]:
    """Milliseconds of each of `iters` calls of fn between two CUDA events, after `warmup` calls; the L2 cache is
    overwritten before each timed call (outside the events) unless flush is None."""
    import cupy

    for _ in range(warmup):
        fn()
    buffer = flush() if flush else None
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(iters):
        if buffer is not None:
            buffer.fill(0)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return times


def run(problem: AttentionProblem, inputs: Inputs, options: RunOptions) -> list[Result]:
    """Time one kernel on one problem: one row with timing, throughput, modelled bytes, ceilings and errors.

    options.extra["br"], ["bc"]: the flash tile (default by d: DEFAULT_TILES).
    """
    import cupy

    kernel = options.kernel
    br, bc = default_tile(problem, sm_count())
    br, bc = options.extra.get("br") or br, options.extra.get("bc") or bc
    tile = {"br": br, "bc": bc} if kernel == "flash" else {}
    try:
        launcher = Launcher(kernel, problem, inputs, br, bc)
        launcher.launch()  # compile, check it runs
        cupy.cuda.Device().synchronize()
        out = cupy.asnumpy(launcher.out).reshape(problem.shape)
        samples = _event_times(launcher.launch, options.warmup, options.iters)
    except cupy.cuda.memory.OutOfMemoryError as exc:
        raise TargetError(f"out of device memory: {exc}", status="oom") from exc
    if np.isnan(out).any():
        first = tuple(int(i) for i in np.argwhere(np.isnan(out))[0])
        raise TargetError(f"{kernel} left O{first} unwritten (NaN poison) or produced NaN")
    timing = summarize(samples)
    err = errors(out, inputs.golden)
    seconds = timing.p50_ms / 1e3
    peak_gflops, peak_gbps = ceilings()
    return [options.context.result(
        problem, target="gpu", kernel=kernel, device=device(), warmup=options.warmup, **tile, **timing.as_fields(),
        gflops=problem.flops() / seconds / 1e9, model_bytes=model_bytes(kernel, problem),
        gbps=model_bytes(kernel, problem) / seconds / 1e9, peak_gflops=peak_gflops, peak_gbps=peak_gbps,
        max_abs=err.max_abs, rel_l2=err.rel_l2)]

