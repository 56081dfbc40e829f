"""The GPU target's real device: kernels/*.cu compiled by CuPy (NVRTC) and launched on a CUDA GPU.

`CudaDevice` implements the device contract of kernels/target.py (buffers, launches, the CUDA-event timer, the
device's measured ceilings); `event_times` is the one timing loop every GPU tool uses (the target, the tile sweep,
the headline, Nsight runs): warm-ups, then one pair of CUDA events around each call, the L2 cache overwritten
before each timed call. CuPy is imported inside functions only, so this module imports on machines without it.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from host.problem import AttentionProblem
from host.q15 import Q15Out, Quantized
from host.reference import DEVICE_SLAB_ELEMENTS, attention
from host.target_api import Inputs
from kernels.halves import HALF_DTYPES, NAN_BITS, from_bits, to_bits
from kernels.q15_launch import SOURCE as Q15_SOURCE, Q15Launch, q15_launch
from kernels.variants import (NAIVE, SMEM_DEFAULT_LIMIT, Launch, Variant, has_partials, head_rows, packed_tiles,
                              variant)

SOURCE_DIR = Path(__file__).resolve().parent
LOG2E = 1.4426950408889634
#: Ceiling measurements: an 8192² float32 cuBLAS matmul (1.1 TFLOP) and a 1 GiB device-to-device copy.
CEILING_MATMUL_N = 8192
CEILING_COPY_FLOATS = 1 << 28


def event_times(fn: Callable[[], object], warmup: int, iters: int, flush: bool = True,
                clean_flush: bool = False) -> list[float]:
    """Milliseconds of each of `iters` calls of fn between two CUDA events, after `warmup` untimed calls; the L2
    cache is overwritten before each timed call (outside the events) unless flush is False: by writing a buffer of
    twice its size (the default: the L2 is then full of dirty lines, which the timed call's own traffic writes back to
    memory, tens of MB on a 50-60 MB L2), or with clean_flush by reading it (kernels/stream_read.cu: the L2 then holds
    clean lines that are dropped for free, so the call pays for its own bytes alone)."""
    import cupy

    for _ in range(warmup):
        fn()
    buffer = _l2_flush_buffer() if flush else None
    overwrite = (stream_read(buffer[:buffer.size // 8 * 4], buffer[buffer.size // 8 * 4:buffer.size // 8 * 8])
                 if buffer is not None and clean_flush else lambda: buffer.fill(0))
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(iters):
        if buffer is not None:
            overwrite()
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


def headers_digest(folder: Path = SOURCE_DIR) -> str:
    """A digest of every header (*.cuh) in `folder`, by name and content. CuPy keys its on-disk build cache on the
    source text and the options, not on the headers a source includes (cupy/cupy#941): an edited header would load
    the build of the old one. The digest goes into the options as a define, so any header change rebuilds."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.cuh")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def module_options(extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """NVRTC options of a kernels/*.cu build through CuPy: C++17, the headers' folder and their digest."""
    return ("-std=c++17", f"-I{SOURCE_DIR}", f"-DKBENCH_HEADERS={headers_digest()}", *extra)


@functools.lru_cache(maxsize=None)
def _module(name: str, expressions: tuple[str, ...] = (), extra: tuple[str, ...] = ()):
    import cupy

    source = (SOURCE_DIR / name).read_text()
    return cupy.RawModule(code=source, options=module_options(extra), name_expressions=list(expressions) or None)


def stream_read(a, b) -> Callable[[], None]:
    """A call that reads every byte of device buffers a and b once (kernels/stream_read.cu: the read floor of a launch
    of that size); a and b hold the same number of bytes, a multiple of 16."""
    import cupy

    if a.nbytes != b.nbytes or a.nbytes % 16:
        raise ValueError(f"stream_read needs two buffers of one size, a multiple of 16 bytes; got {a.nbytes}, "
                         f"{b.nbytes}")
    fn = _module("stream_read.cu").get_function("stream_read")
    sink = cupy.zeros(1, dtype=cupy.uint32)
    words = a.nbytes // 16
    # 8 blocks of 256 threads an SM: 2,048 threads, the most an SM holds
    blocks = min(8 * CudaDevice.sm_count(), max(1, -(-words // 256)))
    args = (a, b, np.int64(words), np.uint32(0x9E3779B9), sink)
    return lambda: fn((blocks,), (256,), args)


class DeviceInputs(NamedTuple):
    """Q (B·H, q_len, d) and K, V (B·Hkv, N, d) already on the device in the problem's storage (float32, or 16-bit
    bit patterns as uint16): inputs too large to draw on the host (kernels/inference_bench.py draws them here)."""

    q: object
    k: object
    v: object


class CudaLauncher:
    """Device buffers for one problem and `launch()` for one kernel variant (kernels/variants.py); `out` is poisoned
    with NaN before use. The target has already checked the plan (memory, shared memory, tile) against this device's
    limits."""

    def __init__(self, kernel: str, problem: AttentionProblem, inputs: Inputs, br: int, bc: int,
                 path: str = "mma.sync", chosen: Variant | None = None, parts: int = 0):
        self.kernel, self.problem = kernel, problem
        self.variant = chosen or variant(kernel, problem.dtype, path)  # `chosen`: another launch configuration
        launches = self.variant.launches(problem, br, bc, parts)
        self._buffers(problem, inputs, br, parts if has_partials(problem, br, bc, parts) else 0)
        values = self._arguments(problem, br, bc)
        self.calls = [(self._function(launch), launch.grid, launch.block,
                       tuple(ints[name] if name in ints else values[name] for name in launch.args), launch.smem)
                      for launch in launches for ints in [{k: np.int32(v) for k, v in launch.ints}]]

    def _buffers(self, problem: AttentionProblem, inputs: Inputs, br: int, parts: int) -> None:
        """Q and O (B·H, q_len, d), K and V (B·Hkv, N, d) on the device: float32, or fp16/bf16 bit patterns; O NaN
        until written; the naive kernel's S (B·H, q_len, N), or a split-KV call's partial states, beside them."""
        import cupy

        (bh, nq, d), (bkv, n, _) = (problem.batch * problem.heads, problem.queries, problem.dim), \
            (problem.batch * problem.kv_head_count, problem.seq, problem.dim)
        if isinstance(inputs, DeviceInputs):
            self.q, self.k, self.v = inputs
            self.out = cupy.full((bh, nq, d), NAN_BITS[problem.dtype] if problem.dtype in HALF_DTYPES else np.nan,
                                 dtype=cupy.uint16 if problem.dtype in HALF_DTYPES else cupy.float32)
        elif problem.dtype in HALF_DTYPES:  # 16-bit storage: Q, K, V, O hold fp16 or bf16 bit patterns
            self.q = cupy.asarray(to_bits(inputs.q.reshape(bh, nq, d), problem.dtype))
            self.k, self.v = (cupy.asarray(to_bits(x.reshape(bkv, n, d), problem.dtype)) for x in (inputs.k, inputs.v))
            self.out = cupy.full((bh, nq, d), NAN_BITS[problem.dtype], dtype=cupy.uint16)
        else:
            self.q = cupy.asarray(inputs.q.reshape(bh, nq, d))
            self.k, self.v = (cupy.asarray(x.reshape(bkv, n, d)) for x in (inputs.k, inputs.v))
            self.out = cupy.full((bh, nq, d), np.nan, dtype=cupy.float32)
        if self.variant is NAIVE:
            self.s = cupy.empty((bh, nq, n), dtype=cupy.float32)  # (BH, q_len, N): S, then P in place
        # two slots a block of (Br, d) and (Br,) float32, NaN until the split launch writes them (kernels/
        # kv_rows.cuh); a one-element stand-in where no tile is split (the kernel writes O directly then)
        slots, rows = (2 * parts, br) if parts else (1, 1)
        self.o_part = cupy.full((slots, rows, d if parts else 1), np.nan, dtype=cupy.float32)
        self.lse = cupy.full((slots, rows), np.nan, dtype=cupy.float32)
        # an in-place merge's ticket a tile (kernels/split_merge.cuh): 0 now, and again after every launch that
        # completes (a launch that faults leaves the context unusable, and a new one gets new buffers)
        self.tickets = cupy.zeros(packed_tiles(problem, br) if parts else 1, dtype=cupy.int32)

    def _arguments(self, problem: AttentionProblem, br: int, bc: int) -> dict[str, object]:
        """The buffer and float launch arguments by name (kernels/variants.py ARGS; each Launch carries its
        integers); the Hopper kernel's tensor maps are made here and kept alive beside the buffers they point
        into."""
        values = {"q": self.q, "k": self.k, "v": self.v, "out": self.out, "o_part": self.o_part, "lse": self.lse,
                  "tickets": self.tickets,
                  "scale": np.float32(problem.scale), "scale_log2": np.float32(problem.scale * LOG2E)}
        if self.variant is NAIVE:
            values["s"] = self.s
        if self.variant.sm90a:
            from kernels import hopper

            # a split-KV launch packs a K/V head's query heads: Q seen as (B·Hkv, G·q_len, d), the same memory
            packed = getattr(self.variant, "split", False)
            q = self.q.reshape(head_rows(problem, packed=True)[:2] + (problem.dim,)) if packed else self.q
            self.maps = (hopper.tensor_map(q, br), hopper.tensor_map(self.k, bc), hopper.tensor_map(self.v, bc))
            values.update(zip(("q_map", "k_map", "v_map"), self.maps))
        return values

    def _function(self, launch: Launch):
        """The launch's compiled function: the Hopper kernel from kernels/hopper.py (sm_90a, its shared memory
        allowed), the others from CuPy's RawModule for this device's arch, the opt-in shared memory raised where a
        block needs more than the 48 KB default."""
        if self.variant.sm90a and not launch.source:  # a split-KV combine is a plain CuPy build
            from kernels import hopper

            return hopper.kernel(self.variant.source, launch.function, launch.smem)
        expressions = (launch.function,) if self.variant.templated else ()
        fn = _module(launch.source or self.variant.source, expressions).get_function(launch.function)
        if launch.smem > SMEM_DEFAULT_LIMIT:
            fn.max_dynamic_shared_size_bytes = launch.smem
        return fn

    def launch(self, first_only: bool = False) -> None:
        """The call's launches, one after another; with first_only, the first alone (a split-KV call's split launch
        without its combine: a benchmark's breakdown, O is then not final)."""
        for fn, grid, block, args, smem in self.calls[:1] if first_only else self.calls:
            fn(grid, block, args, shared_mem=smem)

    def output(self) -> np.ndarray:
        """O on the host, (B, H, N, d) float32 (16-bit outputs widened exactly); waits for the launches."""
        import cupy

        out = cupy.asnumpy(self.out)
        if self.problem.dtype in HALF_DTYPES:
            out = from_bits(out, self.problem.dtype)
        return out.reshape(self.problem.shape)


class CudaQ15Launcher:
    """Device buffers for one Q15 problem (host/q15.py `Quantized`: int16 Q (B·H, q_len, d), K and V (B·Hkv, N, d))
    and `launch()` of kernels/q15.cu (kernels/q15_launch.py); the row shifts are poisoned with 255 (past any g) so
    that a row left unwritten shows."""

    def __init__(self, problem: AttentionProblem, quantized: Quantized):
        import cupy

        self.problem, self.config = problem, q15_launch(problem)
        bh, bkv, nq, n, d = (problem.batch * problem.heads, problem.batch * problem.kv_head_count, problem.queries,
                             problem.seq, problem.dim)
        self.q = cupy.asarray(quantized.q.reshape(bh, nq, d))
        self.k, self.v = (cupy.asarray(x.reshape(bkv, n, d)) for x in (quantized.k, quantized.v))
        self.o = cupy.zeros((bh, nq, d), dtype=cupy.int16)
        self.shift = cupy.full((bh, nq), 255, dtype=cupy.uint8)
        params = quantized.params
        self.args = (self.q, self.k, self.v, self.o, self.shift, *(np.int32(x) for x in (
            nq, n, problem.heads // problem.kv_head_count, d, int(params.causal), params.score_mult,
            params.score_shift)))
        self.fn = _module(Q15_SOURCE, (self.config.function,)).get_function(self.config.function)
        if self.config.smem > SMEM_DEFAULT_LIMIT:
            self.fn.max_dynamic_shared_size_bytes = self.config.smem

    def launch(self) -> None:
        self.fn((self.config.grid,), (self.config.threads,), self.args, shared_mem=self.config.smem)

    def output(self) -> Q15Out:
        """Values (B, H, q_len, d) int16 and row shifts (B, H, q_len) uint8 on the host; waits for the launch."""
        import cupy

        return Q15Out(cupy.asnumpy(self.o).reshape(self.problem.shape),
                      cupy.asnumpy(self.shift).reshape(self.problem.shape[:-1]))


class CudaDevice:
    """The current CUDA device through CuPy."""

    name = "cuda"
    launcher = CudaLauncher
    q15_launcher = CudaQ15Launcher
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
        return f"{CudaDevice.model()} ({props['multiProcessorCount']} SMs)"

    @staticmethod
    @functools.lru_cache(maxsize=None)
    def model() -> str:
        """The GPU's model name as CUDA gives it, e.g. 'NVIDIA H200'."""
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        return props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])

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
    @functools.lru_cache(maxsize=None)
    def limits():
        """(this device's kernels.budget.DeviceLimits read off it, ''): SMs, shared memory, threads per SM."""
        from kernels.budget import query_device

        return query_device(), ""

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
    def run_note(note: str, chosen: Variant) -> str:
        """What ran for a row: the plan's note (a flash row's kernel and arithmetic; empty for naive and fused)."""
        return note

    @staticmethod
    def q15_note(launch: Q15Launch) -> str:
        """What ran for a q15 row: the kernel's instance and its arithmetic."""
        return (f"kernels/q15.cu {launch.function}: 16-bit products as four int8 MMAs (m16n8k32, int32 sums, "
                f"recombined in int64), softmax and division on the CUDA cores")

    @staticmethod
    def golden(inputs: Inputs) -> np.ndarray | None:
        """The problem's float64 golden by host.reference.attention on this GPU (each slab a query block of every
        head); None when the device has not the memory for it, and the host computes it instead. A seq 4096,
        B·H 32, d 128 golden takes milliseconds here and about a second of a 32-core host."""
        import cupy

        p = inputs.problem
        q_elements, kv_elements = p.batch * p.heads * p.queries * p.dim, p.batch * p.kv_head_count * p.seq * p.dim
        # Q, K, V in float32 and float64, O in float64, one slab of scores and its exponentials' product with V
        need = 12 * (q_elements + 2 * kv_elements) + 8 * q_elements + 16 * min(
            DEVICE_SLAB_ELEMENTS, p.batch * p.heads * p.queries * p.seq)
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
