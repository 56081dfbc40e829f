"""A fake GPU for the GPU target: the device contract of kernels/target.py implemented with numpy on the CPU.

It runs the same launcher protocol as kernels/cuda.py (buffers poisoned with NaN, `launch()`, `output()`, a timer,
limits and an out-of-memory error), so the GPU target's planning, NaN-poison check, out-of-memory path, verdict and
row fields run in the plain test suite on a machine without a GPU (`--gpu-device fake`), as pyserial's loop:// does
for a port. Its kernels follow the CUDA kernels' algorithms in float32: `naive` materialises S and P, `fused` does
one query row's softmax at a time, `flash` walks Bc-key tiles with the online softmax for Br-query tiles, in base 2
with log2(e) folded into the scale; for float16 and bfloat16 problems `flash` is the tensor-core kernel's arithmetic
(16-bit inputs, P and O; float32 accumulation). Its `q15` kernel is host/q15.py's model itself (`q15_model`) behind
the launcher protocol of kernels/cuda.py's CudaQ15Launcher: a Q15 row's plumbing (quantisation, poison, verdict,
fields) runs here, the kernel's bits only on a GPU. Its limits are the H200's published ones (kernels/budget.py
PROFILES["h200"]) with `MEMORY_BYTES` of device memory; its times are the host's wall clock timing numpy (its rows'
timing_source says so), and it measures no ceilings (no roofline point). Nothing here is a GPU measurement: every
row says "fake" in its device.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from host.problem import AttentionProblem
from host.q15 import Q15Out, Quantized
from host.target_api import Inputs
from host.timing import time_calls
from kernels.budget import PROFILES
from kernels.halves import HALF_DTYPES, rounded
from kernels.q15_launch import q15_launch
from kernels.shares import segments
from kernels.variants import Variant, variant

LOG2E = 1.4426950408889634
#: The fake's device memory: small, so that the naive kernel's N² scores run out of it at test sizes.
MEMORY_BYTES = 1 << 30
LIMITS = PROFILES["h200"]


def _kv_per_query_head(x: np.ndarray, problem: AttentionProblem) -> np.ndarray:
    """K or V (B·Hkv, N, d) as each query head reads it: (B·H, N, d), K/V head h // G repeated for its G heads."""
    return np.repeat(x, problem.heads // problem.kv_head_count, axis=0)


def _causal_mask(problem: AttentionProblem, rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """(rows, keys) True where the causal mask hides the key: key j after query i's position i + N − M (the mask
    aligned to the bottom right, kernels/kv_rows.cuh); a packed row r is query r mod M."""
    return keys[None, :] > rows[:, None] % problem.queries + (problem.seq - problem.queries)


def _scores_log2(q: np.ndarray, k: np.ndarray, problem: AttentionProblem) -> np.ndarray:
    """S·log2(e)/√d in float32 with the causal mask as -inf: (BH, M, N)."""
    s = np.matmul(q, k.transpose(0, 2, 1)) * np.float32(problem.scale * LOG2E)  # (BH, M, N)
    if problem.causal:
        s[:, _causal_mask(problem, np.arange(problem.queries), np.arange(problem.seq))] = -np.inf
    return s


def naive(q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray, problem: AttentionProblem, br: int,
          bc: int, parts: int = 0) -> None:
    """S, then P = softmax(S) row by row, then P·V: Q, O (BH, M, d) and K, V (BHkv, N, d), float32."""
    s = _scores_log2(q, _kv_per_query_head(k, problem), problem)
    p = np.exp2(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    np.matmul(p, _kv_per_query_head(v, problem), out=out)


def fused(q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray, problem: AttentionProblem, br: int,
          bc: int, parts: int = 0) -> None:
    """One query row at a time: its visible scores, their max and sum, then the weighted sum of V."""
    k, v = _kv_per_query_head(k, problem), _kv_per_query_head(v, problem)
    for i in range(problem.queries):
        keys = i + problem.seq - problem.queries + 1 if problem.causal else problem.seq
        s = np.matmul(q[:, i:i + 1], k[:, :keys].transpose(0, 2, 1)) * np.float32(problem.scale * LOG2E)  # (BH,1,K)
        p = np.exp2(s - s.max(axis=-1, keepdims=True))
        out[:, i:i + 1] = np.matmul(p, v[:, :keys]) / p.sum(axis=-1, keepdims=True)


def _flash_keys(q, k, v, problem, rows: np.ndarray, keys: range, bc: int, storage: str | None):
    """The online softmax of query rows `rows` over the key blocks of `keys`, in order: (m, l, acc) as the kernel
    leaves them, m and l (BH, R, 1), acc (BH, R, d), float32."""
    scale = np.float32(problem.scale * LOG2E)
    m = np.full((q.shape[0], len(rows), 1), -np.inf, dtype=np.float32)
    l = np.zeros_like(m)
    acc = np.zeros((q.shape[0], len(rows), problem.dim), dtype=np.float32)
    for j0 in range(keys.start, keys.stop, bc):
        j1 = min(keys.stop, j0 + bc)
        s = np.matmul(q[:, rows], k[:, j0:j1].transpose(0, 2, 1)) * scale  # (BH, R, Bc)
        if problem.causal:
            s[:, _causal_mask(problem, rows, np.arange(j0, j1))] = -np.inf
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
        safe = np.where(np.isinf(m_new), np.float32(0), m_new)  # nothing seen yet: p = 0, not NaN
        alpha = np.exp2(m - safe)
        p = np.exp2(s - safe)
        l = l * alpha + p.sum(axis=-1, keepdims=True)
        acc = acc * alpha + np.matmul(p if storage is None else rounded(p, storage), v[:, j0:j1])
        m = m_new
    return m, l, acc


def flash(q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray, problem: AttentionProblem, br: int,
          bc: int, parts: int = 0) -> None:
    """Br-query tiles; for each, Bc-key tiles in order with the online softmax (running max m, sum l, rescale).
    For a 16-bit problem (the tensor-core kernel) P is rounded to the dtype before P·V, as the kernel packs it for
    the tensor cores, and O is rounded to it on the way out; l sums the unrounded p, in float32, as the kernel does.
    With parts (the split-KV path) a K/V head's query heads are packed into its rows and `parts` blocks share the
    (tile, key block) units (kernels/shares.py): each segment of a split tile gives its partial state, O / l in
    float32 and lse = m + log2 l, and the combine (kernels/split_combine.cu) merges them."""
    storage = problem.dtype if problem.dtype in HALF_DTYPES else None
    if parts:
        return _flash_shared(q, k, v, out, problem, br, bc, parts, storage)
    k, v = _kv_per_query_head(k, problem), _kv_per_query_head(v, problem)
    n = problem.seq
    for i0 in range(0, problem.queries, br):
        rows = np.arange(i0, min(problem.queries, i0 + br))
        last = min(n, rows[-1] + n - problem.queries + 1) if problem.causal else n
        _, l, acc = _flash_keys(q, k, v, problem, rows, range(0, last), bc, storage)
        o = acc / l
        out[:, rows] = o if storage is None else rounded(o.astype(np.float32), storage)


def _flash_shared(q, k, v, out, problem: AttentionProblem, br: int, bc: int, parts: int, storage: str | None):
    """flash on the split-KV path: packed rows (B·Hkv heads of G·M rows), the launch's segments tile by tile."""
    bkv, n = problem.batch * problem.kv_head_count, problem.seq
    nq = problem.heads // problem.kv_head_count * problem.queries
    qp, op = q.reshape(bkv, nq, problem.dim), out.reshape(bkv, nq, problem.dim)
    per_head, key_blocks = -(-nq // br), -(-n // bc)
    by_tile: dict[int, list] = {}
    for seg in segments(per_head * bkv, key_blocks, parts):
        by_tile.setdefault(seg.tile, []).append(seg)
    for tile, segs in by_tile.items():
        head, i0 = divmod(tile, per_head)
        rows = np.arange(i0 * br, min(nq, i0 * br + br))
        last = min(n, int((rows % problem.queries).max()) + n - problem.queries + 1) if problem.causal else n
        states = [_flash_keys(qp[head:head + 1], k[head:head + 1], v[head:head + 1], problem, rows,
                              range(seg.first * bc, min(last, seg.stop * bc)), bc, storage) for seg in segs]
        if len(states) == 1:
            _, l, acc = states[0]
            o = acc / l
        else:
            lse = np.stack([np.where(l > 0, m + np.log2(np.where(l > 0, l, 1)), -np.inf) for m, l, _ in states])
            weights = np.exp2(lse - lse.max(axis=0))  # (segments, 1, R, 1); a segment with no key weighs 0
            partial = np.stack([acc / np.where(l > 0, l, 1) for _, l, acc in states])
            o = (weights * partial).sum(axis=0) / weights.sum(axis=0)
        op[head:head + 1, rows] = o if storage is None else rounded(o.astype(np.float32), storage)


#: kernel name → its numpy implementation, writing O (BH, N, d) in place. Tests replace entries with broken ones.
KERNEL_MATH: dict[str, Callable[..., None]] = {"naive": naive, "fused": fused, "flash": flash}


class FakeLauncher:
    """The launcher protocol on numpy arrays: `out` is NaN until a launch writes it."""

    def __init__(self, kernel: str, problem: AttentionProblem, inputs: Inputs, br: int, bc: int,
                 path: str = "mma.sync", chosen: Variant | None = None, parts: int = 0):
        # The variant a GPU would run (kernels/variants.py) and its launches, as kernels/cuda.py builds them: the
        # same refusals (an unknown kernel, a 16-bit naive or fused, a tensor-core d not built). Its path picks no
        # arithmetic here: both 16-bit tensor-core kernels compute the same steps (fp32 scores, P rounded to 16
        # bits, fp32 O), and the 3xTF32 and FFMA float32 kernels both to about fp32 accuracy; only their tiles
        # differ, and the tile is what the fake's flash takes
        self.variant = chosen or variant(kernel, problem.dtype, path)
        self.launches = self.variant.launches(problem, br, bc, parts)
        self.kernel, self.problem, self.br, self.bc, self.parts = kernel, problem, br, bc, parts
        bh, bkv, m, n, d = (problem.batch * problem.heads, problem.batch * problem.kv_head_count, problem.queries,
                            problem.seq, problem.dim)
        self.q = np.ascontiguousarray(inputs.q.reshape(bh, m, d), dtype=np.float32)  # (BH, M, d)
        self.k, self.v = (np.ascontiguousarray(x.reshape(bkv, n, d), dtype=np.float32)  # (BHkv, N, d)
                          for x in (inputs.k, inputs.v))
        if problem.dtype in HALF_DTYPES:  # what 16-bit device buffers would hold
            self.q, self.k, self.v = (rounded(x, problem.dtype) for x in (self.q, self.k, self.v))
        self.out = np.full((bh, m, d), np.nan, dtype=np.float32)  # (BH, M, d)

    def launch(self) -> None:
        KERNEL_MATH[self.kernel](self.q, self.k, self.v, self.out, self.problem, self.br, self.bc, self.parts)

    def output(self) -> np.ndarray:
        return self.out.reshape(self.problem.shape).copy()


def q15_model(quantized: Quantized) -> Q15Out:
    """The fake's Q15 kernel: the contract's model (host/q15.py), values (B, H, q_len, d) and shifts (B, H, q_len).
    Tests replace it with a broken one."""
    return quantized.expected()


class FakeQ15Launcher:
    """The Q15 launcher protocol on numpy arrays: values and row shifts poisoned (shift 255, past any g) until a
    launch writes them."""

    def __init__(self, problem: AttentionProblem, quantized: Quantized):
        self.config = q15_launch(problem)  # the same refusals as a GPU's launch
        self.quantized = quantized
        self.out = Q15Out(np.zeros(problem.shape, dtype=np.int16), np.full(problem.shape[:-1], 255, dtype=np.uint8))

    def launch(self) -> None:
        o, shift = q15_model(self.quantized)
        self.out.o[...], self.out.shift[...] = o, shift

    def output(self) -> Q15Out:
        return Q15Out(self.out.o.copy(), self.out.shift.copy())


def wall_times(fn: Callable[[], object], warmup: int, iters: int, flush: bool = True,
               clean_flush: bool = False) -> list[float]:
    """The fake's timer: host/timing.py's wall-clock loop (there is no cache to flush)."""
    return time_calls(fn, warmup, iters)


class FakeDevice:
    """numpy standing in for a GPU with the H200's limits and MEMORY_BYTES of memory."""

    name = "fake"
    launcher = FakeLauncher
    q15_launcher = FakeQ15Launcher
    #: A real clock timing numpy on the host's CPU: a measurement, but of no GPU (and no model of one either).
    timing_source = "measured: host wall clock of the numpy fake, no GPU timed"

    @staticmethod
    def available() -> tuple[bool, str]:
        return True, FakeDevice.describe()

    @staticmethod
    def describe() -> str:
        return f"{FakeDevice.model()} (numpy on the CPU, {LIMITS.name} limits, {MEMORY_BYTES >> 20} MiB)"

    @staticmethod
    def model() -> str:
        """The model name, as CudaDevice.model gives a GPU's."""
        return "fake GPU"

    #: The compute capability the fake reports: the H200's (sm_90), so the 16-bit rows take the wgmma plan.
    CAPABILITY = 90

    @classmethod
    def capability(cls) -> int:
        return cls.CAPABILITY

    @staticmethod
    def sm_count() -> int:
        return LIMITS.sms

    @staticmethod
    def free_bytes() -> int:
        return MEMORY_BYTES

    @staticmethod
    def limits():
        """(the H200's published limits, which the fake stands in with, ''): kernels.budget.PROFILES["h200"]."""
        return LIMITS, ""

    @staticmethod
    def smem_optin() -> int:
        return LIMITS.smem_per_block_optin

    @staticmethod
    def out_of_memory() -> type[BaseException]:
        return MemoryError

    @staticmethod
    def run_note(note: str, chosen: Variant) -> str:
        """What ran for a row: numpy on the CPU in place of the kernel (a flash row: in the tile of the variant a GPU
        would run). The plan's note (`note`: tensor cores, 3xTF32, FFMA) describes a GPU, so it is not repeated."""
        arithmetic = "float32" if chosen.dtypes == ("float32",) else "16-bit inputs, P and O, float32 sums"
        if not chosen.path:  # naive and fused: no tile, no path
            return f"fake GPU: numpy on the CPU ({arithmetic}) in place of kernels/{chosen.source}; no GPU ran"
        return (f"fake GPU: numpy on the CPU ({arithmetic}) in the tile of {chosen.name} (kernels/{chosen.source}, "
                f"path {chosen.path}); no GPU ran")

    @staticmethod
    def q15_note(launch) -> str:
        """What ran for a q15 row: the model, not kernels/q15.cu."""
        return (f"fake GPU: host/q15.py's model on the CPU in place of kernels/q15.cu ({launch.function}, "
                f"{launch.threads} threads); no GPU ran")

    @staticmethod
    def synchronize() -> None:
        return None

    @staticmethod
    def golden(inputs: Inputs) -> None:
        """The fake has no device of its own to compute the golden on: the host computes it."""
        return None

    event_times = staticmethod(wall_times)

    @staticmethod
    def energy(call: Callable[[], object]) -> None:
        """A fake has no board to measure: its rows carry no energy (and say they are fake)."""
        return None

    @staticmethod
    def ceilings(dtype: str = "float32") -> tuple[None, None]:
        """A fake measures no ceilings: its rows carry none and stay off the roofline."""
        return None, None
