"""fp16 attention as FlashAttention-2 computes it, emulated in numpy: the accuracy a GPU's fp16 rows carry.

Q, K and V are rounded to fp16; each key block's scores are fp16 products summed in fp32 (every product of two fp16
values is exact in fp32, and numpy's float32 matmul accumulates in fp32, as the tensor cores do); the online softmax
(running max, rescale, row sum) runs in fp32; the probabilities are rounded to fp16 for the P·V product, which
accumulates in fp32; the output is divided in fp32 and rounded to fp16. docs/q15.md §8 compares the Q15 contract
against it on the same inputs (host/q15_accuracy.py).
"""

from __future__ import annotations

import numpy as np

from host.errors import SpecError

#: Keys per block of the online softmax (FlashAttention-2's forward kernel takes 64 or 128 at d ≤ 128).
BLOCK = 64


def attention_fp16(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool, row0: int = 0,
                   block: int = BLOCK) -> np.ndarray:
    """Query rows row0 .. row0+len(q)-1 of one head (q: (rows, d); k, v: (seq, d), any float type), as float64
    values of the fp16 output. causal keeps key j for query i when j <= i."""
    rows, dim = q.shape
    seq = k.shape[0]
    if k.shape != (seq, dim) or v.shape != (seq, dim) or not 0 <= row0 <= seq - rows or rows < 1:
        raise SpecError(f"q {q.shape} at row {row0}, k {k.shape}, v {v.shape}: need q (rows, d) inside k, v (seq, d)")
    f32 = np.float32
    qh, kh, vh = (np.asarray(x, dtype=np.float16).astype(f32) for x in (q, k, v))
    scale = f32(1.0 / np.sqrt(dim))
    end = row0 + rows if causal else seq
    query = np.arange(row0, row0 + rows)[:, None]
    m = np.full((rows, 1), -np.inf, dtype=f32)
    l = np.zeros((rows, 1), dtype=f32)
    acc = np.zeros((rows, dim), dtype=f32)
    for j0 in range(0, end, block):
        j1 = min(j0 + block, end)
        s = (qh @ kh[j0:j1].T) * scale  # (rows, keys) fp32
        if causal:
            s = np.where(np.arange(j0, j1)[None, :] <= query, s, f32(-np.inf))
        m_new = np.maximum(m, s.max(axis=1, keepdims=True))
        live = np.isfinite(m_new)  # a row that has seen no key yet keeps l = acc = 0
        alpha = np.where(live & np.isfinite(m), np.exp(m - np.where(live, m_new, 0)), f32(0)).astype(f32)
        p = np.where(live, np.exp(s - np.where(live, m_new, 0)), f32(0)).astype(f32)
        l = l * alpha + p.sum(axis=1, keepdims=True, dtype=f32)
        acc = acc * alpha + p.astype(np.float16).astype(f32) @ vh[j0:j1]
        m = m_new
    return (acc / l).astype(np.float16).astype(np.float64)
