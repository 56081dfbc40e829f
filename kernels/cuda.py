"""The GPU target's real device: kernels/*.cu compiled by CuPy (NVRTC) and launched on a CUDA GPU.

`CudaDevice` implements the device contract of kernels/target.py (buffers, launches, the CUDA-event timer, the
device's measured ceilings); `event_times` is the one timing loop every GPU tool uses (the target, the tile sweep,
the headline, Nsight runs): warm-ups, then one pair of CUDA events around each call, the L2 cache overwritten
before each timed call. CuPy is imported inside functions only, so this module imports on machines without it.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

import numpy as np

from host.errors import SpecError
from host.problem import AttentionProblem
from host.reference import DEVICE_SLAB_ELEMENTS, attention
from host.target_api import Inputs
from kernels.budget import (TC_CONFIGS, TF32_CONFIGS, WGMMA_CONFIGS, flash_grid, flash_smem_bytes,
                            flash_tc_smem_bytes, flash_tf32_smem_bytes, flash_wgmma_smem_bytes, flash_wgmma_threads)
from kernels.halves import HALF_DTYPES, NAN_BITS, from_bits, to_bits

SOURCE_DIR = Path(__file__).resolve().parent
FLASH_THREADS = 128
FUSED_THREADS = 256
NAIVE_TILE = 16
SOFTMAX_THREADS = 256
LOG2E = 1.4426950408889634
#: Ceiling measurements: an 8192² float32 cuBLAS matmul (1.1 TFLOP) and a 1 GiB device-to-device copy.
CEILING_MATMUL_N = 8192
CEILING_COPY_FLOATS = 1 << 28


def event_times(fn: Callable[[], object], warmup: int, iters: int, flush: bool = True) -> list[float]:
    """Milliseconds of each of `iters` calls of fn between two CUDA events, after `warmup` untimed calls; the L2
    cache is overwritten before each timed call (outside the events) unless flush is False."""
    import cupy

    for _ in range(warmup):
        fn()
    buffer = _l2_flush_buffer() if flush else None
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


@functools.lru_cache(maxsize=None)
def _l2_flush_buffer():
    import cupy

    l2 = cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrL2CacheSize, cupy.cuda.Device().id)
    return cupy.empty(2 * l2 // 4 + 1, dtype=cupy.float32)


@functools.lru_cache(maxsize=None)
def _module(name: str, expressions: tuple[str, ...] = (), extra: tuple[str, ...] = ()):
    import cupy

    source = (SOURCE_DIR / name).read_text()
    return cupy.RawModule(code=source, options=("-std=c++17", f"-I{SOURCE_DIR}", *extra),
                          name_expressions=list(expressions) or None)


class CudaLauncher:
    """Device buffers for one problem and `launch()` for one kernel; `out` is poisoned with NaN before use.
    The target has already checked the plan (memory, shared memory, tile) against this device's limits."""

    def __init__(self, kernel: str, problem: AttentionProblem, inputs: Inputs, br: int, bc: int,
                 path: str = "mma.sync"):
        import cupy

        self.kernel, self.problem = kernel, problem
        bh, n, d = problem.batch * problem.heads, problem.seq, problem.dim
        causal = np.int32(problem.causal)
        if problem.dtype in HALF_DTYPES:  # 16-bit storage: Q, K, V, O hold fp16 or bf16 bit patterns
            if kernel != "flash":
                raise SpecError(f"kernel {kernel!r} computes in float32 only; {problem.dtype} runs on flash")
            self.q, self.k, self.v = (cupy.asarray(to_bits(x.reshape(bh, n, d), problem.dtype))
                                      for x in (inputs.q, inputs.k, inputs.v))
            self.out = cupy.full((bh, n, d), NAN_BITS[problem.dtype], dtype=cupy.uint16)  # NaN until written
            scale = np.float32(problem.scale * LOG2E)
            if path == "wgmma":
                self.calls = [self._wgmma_call(problem, br, bc, scale, causal)]
                return
            warps, _, m_tiles = TC_CONFIGS[d, problem.causal]
            kind = {"float16": "__half", "bfloat16": "__nv_bfloat16"}[problem.dtype]
            expression = f"flash_tc_fwd<{kind},{d},{warps},{bc},{m_tiles}>"
            fn = _module("flash_tc.cu", (expression,)).get_function(expression)  # built for this device's arch
            smem = flash_tc_smem_bytes(br, bc, d)
            if smem > 48 * 1024:
                fn.max_dynamic_shared_size_bytes = smem
            self.calls = [(fn, (flash_grid(n, br, bh),), (32 * warps,),
                           (self.q, self.k, self.v, self.out, np.int32(n), scale, causal), smem)]
            return
        self.q, self.k, self.v = (cupy.asarray(x.reshape(bh, n, d)) for x in (inputs.q, inputs.k, inputs.v))
        self.out = cupy.full((bh, n, d), np.nan, dtype=cupy.float32)  # (BH, N, d), NaN until written
        if kernel == "naive":
            self.s = cupy.empty((bh, n, n), dtype=cupy.float32)  # (BH, N, N): S, then P in place
            module = _module("naive.cu")
            scores, softmax, pv = (module.get_function(f"naive_{x}") for x in ("scores", "softmax", "pv"))
            tiles = (n + NAIVE_TILE - 1) // NAIVE_TILE
            sizes = (np.int32(n), np.int32(d))
            self.calls = [
                (scores, (tiles, tiles, bh), (NAIVE_TILE, NAIVE_TILE),
                 (self.q, self.k, self.s, *sizes, np.float32(problem.scale), causal), 0),
                (softmax, (n, bh), (SOFTMAX_THREADS,), (self.s, np.int32(n)), 0),
                (pv, ((d + NAIVE_TILE - 1) // NAIVE_TILE, tiles, bh), (NAIVE_TILE, NAIVE_TILE),
                 (self.s, self.v, self.out, *sizes), 0),
            ]
        elif kernel == "fused":
            fn = _module("fused.cu").get_function("fused_row")
            smem = 4 * (n + 32)
            if smem > 48 * 1024:
                fn.max_dynamic_shared_size_bytes = smem
            self.calls = [(fn, (n, bh), (FUSED_THREADS,), (self.q, self.k, self.v, self.out, np.int32(n), np.int32(d),
                                                           np.float32(problem.scale * LOG2E), causal), smem)]
        elif kernel == "flash":
            if path == "3xtf32":
                warps, _, m_tiles, q_in_regs = TF32_CONFIGS[d, problem.causal]
                expression = f"flash_tf32_fwd<{d},{warps},{bc},{m_tiles},{str(q_in_regs).lower()}>"
                source = "flash_tf32.cu"
                threads, smem = 32 * warps, flash_tf32_smem_bytes(br, bc, d)
            else:
                expression, source = f"flash_fwd<{br},{bc},{d}>", "flash.cu"
                threads, smem = FLASH_THREADS, flash_smem_bytes(br, bc, d)
            fn = _module(source, (expression,)).get_function(expression)
            if smem > 48 * 1024:
                fn.max_dynamic_shared_size_bytes = smem
            self.calls = [(fn, (flash_grid(n, br, bh),), (threads,),
                           (self.q, self.k, self.v, self.out, np.int32(n), np.float32(problem.scale * LOG2E), causal),
                           smem)]
        else:
            raise SpecError(f"kernel {kernel!r} is unknown; allowed: naive, fused, flash")

    def _wgmma_call(self, problem: AttentionProblem, br: int, bc: int, scale: np.float32, causal: np.int32):
        """The Hopper kernel's launch: built for sm_90a, with the copy engine's maps of Q, K and V (kernels/hopper.py),
        which the launcher keeps alive beside the buffers they point into."""
        from kernels import hopper

        bh, n, d = problem.batch * problem.heads, problem.seq, problem.dim
        _, consumers, stages, schedule = WGMMA_CONFIGS[d]
        smem = flash_wgmma_smem_bytes(d, bc, consumers, stages)
        kind = {"float16": 0, "bfloat16": 1}[problem.dtype]
        fn = hopper.kernel(f"flash_wgmma_fwd<{kind},{d},{bc},{consumers},{stages},{schedule}>", smem)
        self.maps = (hopper.tensor_map(self.q, br), hopper.tensor_map(self.k, bc), hopper.tensor_map(self.v, bc))
        return (fn, (flash_grid(n, br, bh),), (flash_wgmma_threads(consumers),),
                (*self.maps, self.out, np.int32(n), scale, causal), smem)

    def launch(self) -> None:
        for fn, grid, block, args, smem in self.calls:
            fn(grid, block, args, shared_mem=smem)

    def output(self) -> np.ndarray:
        """O on the host, (B, H, N, d) float32 (16-bit outputs widened exactly); waits for the launches."""
        import cupy

        out = cupy.asnumpy(self.out)
        if self.problem.dtype in HALF_DTYPES:
            out = from_bits(out, self.problem.dtype)
        return out.reshape(self.problem.shape)


class CudaDevice:
    """The current CUDA device through CuPy."""

    name = "cuda"
    launcher = CudaLauncher
    #: Where the rows' timing comes from: `event_times`, stamped on each row (Result.timing_source).
    timing_source = "measured: CUDA events, L2 flushed before each call"

    @staticmethod
    def available() -> tuple[bool, str]:
        try:
            import cupy

            count = cupy.cuda.runtime.getDeviceCount()
        except ImportError:
            return False, "CuPy is not installed (pip install -e '.[gpu]' for CUDA 12, '.[gpu-cuda13]' for CUDA 13)"
        except Exception as exc:  # noqa: BLE001 - CuPy raises driver/runtime errors of several kinds
            return False, f"no usable CUDA device ({type(exc).__name__}: {exc})"
        if count == 0:
            return False, "no CUDA device"
        return True, CudaDevice.describe()

    @staticmethod
    @functools.lru_cache(maxsize=None)
    def describe() -> str:
        """The GPU's name, e.g. 'NVIDIA H200 (132 SMs)'."""
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        return f"{name} ({props['multiProcessorCount']} SMs)"

    @staticmethod
    def capability() -> int:
        """The compute capability as one number: 90 for sm_90, 100 for sm_100."""
        import cupy

        return int(cupy.cuda.Device().compute_capability)

    @staticmethod
    def sm_count() -> int:
        import cupy

        return int(cupy.cuda.Device().attributes["MultiProcessorCount"])

    @staticmethod
    def free_bytes() -> int:
        import cupy

        return int(cupy.cuda.runtime.memGetInfo()[0])

    @staticmethod
    def smem_optin() -> int:
        """The opt-in shared memory per block in bytes."""
        import cupy

        return int(cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                                        cupy.cuda.Device().id))

    @staticmethod
    def out_of_memory() -> type[BaseException]:
        import cupy

        return cupy.cuda.memory.OutOfMemoryError

    @staticmethod
    def golden(inputs: Inputs) -> np.ndarray | None:
        """The problem's float64 golden by host.reference.attention on this GPU (each slab a query block of every
        head); None when the device has not the memory for it, and the host computes it instead. A seq 4096,
        B·H 32, d 128 golden takes milliseconds here and about a second of a 32-core host."""
        import cupy

        p = inputs.problem
        elements = p.batch * p.heads * p.seq * p.dim
        # Q, K, V in float32 and float64, O in float64, one slab of scores and its exponentials' product with V
        need = 44 * elements + 16 * min(DEVICE_SLAB_ELEMENTS, p.batch * p.heads * p.seq * p.seq)
        if need > CudaDevice.free_bytes():
            return None
        try:
            q, k, v = (cupy.asarray(a) for a in (inputs.q, inputs.k, inputs.v))
            return cupy.asnumpy(attention(q, k, v, p.causal, np.float64, xp=cupy))
        except cupy.cuda.memory.OutOfMemoryError:
            return None
        finally:  # the slabs' blocks go back to the device for the kernels
            cupy.get_default_memory_pool().free_all_blocks()

    @staticmethod
    def synchronize() -> None:
        import cupy

        cupy.cuda.Device().synchronize()

    event_times = staticmethod(event_times)

    @staticmethod
    def energy(call: Callable[[], object]):
        """Joules per call through NVML (kernels/energy.py), with how or why not."""
        import cupy

        from kernels.energy import measure

        return measure(call, CudaDevice.synchronize, cupy.cuda.Device().id)

    @staticmethod
    @functools.lru_cache(maxsize=None)
    def ceilings(dtype: str = "float32") -> tuple[float, float]:
        """(GFLOP/s of a cuBLAS matmul in the rows' precision, GB/s of a device-to-device copy counting read +
        write), medians. float32: an fp32 matmul; float16 and bfloat16: an fp16 matmul on the tensor cores (CuPy has
        no bfloat16; bf16 runs at the fp16 rate on these units, which `peak_source` says)."""
        import cupy

        n = CEILING_MATMUL_N
        kind = cupy.float32 if dtype == "float32" else cupy.float16
        a = cupy.random.default_rng(1).standard_normal((n, n), dtype=cupy.float32).astype(kind)
        matmul_ms = event_times(lambda: a @ a, warmup=2, iters=5, flush=False)
        return float(2 * n**3 / (np.median(matmul_ms) / 1e3) / 1e9), CudaDevice.copy_gbps()

    @staticmethod
    @functools.lru_cache(maxsize=None)
    def copy_gbps() -> float:
        """GB/s of a 1 GiB device-to-device copy, counting bytes read and written; median of 10."""
        import cupy

        src = cupy.ones(CEILING_COPY_FLOATS, dtype=cupy.float32)
        dst = cupy.empty_like(src)
        copy_ms = event_times(lambda: dst.__setitem__(Ellipsis, src), warmup=2, iters=10, flush=False)
        return float(2 * src.nbytes / (np.median(copy_ms) / 1e3) / 1e9)
