"""The golden and the CPU reference: exact-softmax attention in numpy, processed in query blocks.

`attention(q, k, v, causal, dtype)` computes O = softmax(Q Kᵀ/√d [+ mask]) V with the row max subtracted. It walks
the queries in blocks so that no N×N matrix exists at once (seq 16384 needs only a block × N slab), and for causal
problems a block only touches the keys it can see, so causal work is half the full work, as the FLOP formula says.
float64 is the golden every target is diffed against; float32 is the CPU target's kernel.

`errors` gives max-abs and relative L2; host/verdict.py turns them into a row's verdict.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from threadpoolctl import ThreadpoolController

from host.errors import SpecError
from host.problem import AttentionProblem

#: Elements of one score slab (block × keys): a few MB, large enough for efficient matmuls, near the L2 of a core.
SLAB_ELEMENTS = 1 << 19

#: Elements of one device slab (all heads × block × keys): 2 GiB of float64 scores per step on a GPU.
DEVICE_SLAB_ELEMENTS = 1 << 28

#: Above this many queries per head K is transposed into a contiguous copy once; a decode step (a few queries against
#: a long KV cache) reads it in place, where the copy would be most of the work.
TRANSPOSE_MIN_QUERIES = 16

#: Below this many scores (B·H·N²) one thread is quicker than starting a pool.
PARALLEL_MIN_SCORES = 1 << 20


def attention(q, k, v, causal: bool, dtype: type = np.float64, block: int | None = None,
              threads: int | None = None, xp=np):
    """Exact attention of every (batch, head).

    q: (B, H, M, d) queries; k, v: (B, Hkv, N, d) keys and values, M ≤ N, Hkv dividing H (grouped-query attention:
    query head h reads K/V head h // (H / Hkv)); any float type; computed and returned in `dtype`, shape (B, H, M, d).
    causal: aligned to the bottom right, as a KV cache is: query i sees keys 0 .. N − M + i (for M = N, key j for
    query i when j <= i). block: query rows per slab (default: from SLAB_ELEMENTS).
    threads: worker threads over (head, query block) slabs (default: the CPU count). BLAS is held to one thread
    throughout, so the elementwise softmax runs on every core too, not only the matmuls, and small problems do
    not pay for waking BLAS's own pool.
    xp: the array module that holds q, k, v (numpy, or CuPy when a GPU target computes the golden on its device:
    the same steps, each slab spanning every head, one at a time, in DEVICE_SLAB_ELEMENTS).
    """
    if q.ndim != 4 or k.ndim != 4 or k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3] \
            or q.shape[2] > k.shape[2] or k.shape[1] < 1 or q.shape[1] % k.shape[1]:
        raise SpecError(f"q must be (batch, heads, q_len, dim) and k, v (batch, kv_heads, seq, dim) with q_len <= seq "
                        f"and kv_heads dividing heads; got {q.shape}, {k.shape}, {v.shape}")
    B, H, M, d = q.shape
    Hkv, N = k.shape[1], k.shape[2]
    group, offset = H // Hkv, N - M  # query heads per K/V head; keys before the first query's own position
    dtype = np.dtype(dtype)
    every_head = xp is not np  # a device: one slab holds a query block of all heads (large batched matmuls)
    if block is None:
        budget = DEVICE_SLAB_ELEMENTS // (B * H) if every_head else SLAB_ELEMENTS
        block = max(1, min(M, budget // max(N, 1)))
    qs = (q.astype(dtype, copy=False) * dtype.type(1.0 / np.sqrt(d))).reshape(B * H, M, d)  # (BH, M, d)
    kt = k.astype(dtype, copy=False).reshape(B * Hkv, N, d).transpose(0, 2, 1)  # (BHkv, d, N), a view
    if M > TRANSPOSE_MIN_QUERIES:  # worth a contiguous copy of K (N·d per head) only against M·N·d of work
        kt = xp.ascontiguousarray(kt)
    vs = v.astype(dtype, copy=False).reshape(B * Hkv, N, d)  # (BHkv, N, d)
    if every_head and group > 1:  # one batched matmul over every query head: each K/V head repeated for its group
        kt, vs = xp.repeat(kt, group, axis=0), xp.repeat(vs, group, axis=0)
    out = xp.empty((B * H, M, d), dtype=dtype)
    future = xp.triu(xp.ones((block, block), dtype=bool), k=1) if causal else None  # (block, block)

    def slab(item: tuple[int | slice, int]) -> None:
        bh, i0 = item  # one query head's index, or slice(None) for all heads
        kv = bh if every_head else (bh // H) * Hkv + (bh % H) // group  # its K/V head
        i1 = min(M, i0 + block)
        keys = offset + i1 if causal else N  # a causal block sees keys 0 .. offset + i1 - 1 only
        s = xp.matmul(qs[bh, i0:i1], kt[kv, :, :keys])  # ([BH,] i1-i0, keys)
        if causal:  # only the last tile has keys beyond its queries: key offset + i0 + c is hidden from query i0 + r
            xp.copyto(s[..., offset + i0:offset + i1], -np.inf, where=future[: i1 - i0, : i1 - i0])
        m = s.max(axis=-1, keepdims=True)
        xp.subtract(s, m, out=s)
        xp.exp(s, out=s)
        l = s.sum(axis=-1, keepdims=True)  # ([BH,] i1-i0, 1)
        xp.divide(xp.matmul(s, vs[kv, :keys]), l, out=out[bh, i0:i1])

    if every_head:
        for i0 in range(0, M, block):
            slab((slice(None), i0))
        return out.reshape(B, H, M, d)
    items = [(bh, i0) for bh in range(B * H) for i0 in range(0, M, block)]
    threads = (os.cpu_count() or 1) if threads is None else threads
    with _blas_controller().limit(limits=1, user_api="blas"):
        if threads <= 1 or len(items) == 1 or B * H * M * N < PARALLEL_MIN_SCORES:
            for item in items:
                slab(item)
        else:
            with ThreadPoolExecutor(threads) as pool:
                for _ in pool.map(slab, items):
                    pass
    return out.reshape(B, H, M, d)


@functools.lru_cache(maxsize=None)
def _blas_controller() -> ThreadpoolController:
    """One inspection of the loaded BLAS libraries per process (each `threadpool_limits` would redo it)."""
    return ThreadpoolController()


def golden(problem: AttentionProblem) -> np.ndarray:
    """The float64 output every target is diffed against, from the problem's seeded inputs. (B, H, N, d)."""
    q, k, v = problem.inputs()
    return attention(q, k, v, problem.causal, np.float64)


@dataclass(frozen=True)
class ErrorMetrics:
    """Errors of an output against the golden; `worst` is the index of the largest absolute error."""

    max_abs: float
    rel_l2: float
    worst: tuple[int, ...]


def errors(out: np.ndarray, gold: np.ndarray) -> ErrorMetrics:
    """max |out - gold| and ||out - gold||₂ / ||gold||₂ (computed in float64)."""
    if out.shape != gold.shape:
        raise SpecError(f"output shape {out.shape} differs from the golden's {gold.shape}")
    diff = np.abs(out.astype(np.float64) - gold)
    if not np.all(np.isfinite(diff)):
        return ErrorMetrics(max_abs=float("inf"), rel_l2=float("inf"),
                            worst=tuple(int(i) for i in np.argwhere(~np.isfinite(diff))[0]))
    norm = float(np.linalg.norm(gold))
    rel = float(np.linalg.norm(diff)) / norm if norm > 0 else float(np.linalg.norm(diff))
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
    return ErrorMetrics(max_abs=float(diff.max()), rel_l2=rel, worst=worst)
