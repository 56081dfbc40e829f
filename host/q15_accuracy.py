"""The Q15 contract's accuracy against fp16 attention, on the same inputs: the measures behind docs/q15.md §8.

For one head of a given input kind, seq, dim and mask, `compare` quantises the whole tensors as every Q15 target
does (per-tensor exponents, the contract's Bc), runs the contract (host/q15.py) and the fp16 emulation
(host/fp16_reference.py) on the same query rows, and measures both against the float64 golden of those rows.
Long heads are judged on a sample of query rows (groups spread from the first to the last row, each with all the keys
it sees): the model costs seq·d per row, and the 32768 × 128 heads of the issue would take minutes whole.

Input kinds (`INPUT_KINDS`): `normal` Q, K, V ~ N(0,1); `x0.1` and `x10` the same scaled by 0.1 and 10 (x10 makes
the softmax far sharper); `peaked`, an attention sink: key 0 dominates every row (each query's first component is 4
and key 0 is (5√d, 0, …, 0), a score of 20 against the others' N(0, (15 + d)/d)), so that nearly all of each row's
weight, 0.9998 at seq 32768, d 16, sits on one key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from host.errors import SpecError
from host.fp16_reference import attention_fp16
from host.q15 import BC, Q15Params, attention_q15, quantize, score_scale

INPUT_KINDS = ("normal", "x0.1", "x10", "peaked")
#: Query rows a long head is judged on: GROUPS groups of GROUP_ROWS consecutive rows, spread over the sequence.
GROUPS, GROUP_ROWS = 16, 16


def make_inputs(kind: str, seq: int, dim: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One head's float32 Q, K, V (seq, dim) of the given kind."""
    if kind not in INPUT_KINDS:
        raise SpecError(f"inputs={kind!r} is unknown; allowed: {', '.join(INPUT_KINDS)}")
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((seq, dim), dtype=np.float32) for _ in range(3))
    if kind == "x0.1":
        q, k, v = q * np.float32(0.1), k * np.float32(0.1), v * np.float32(0.1)
    elif kind == "x10":
        q, k, v = q * np.float32(10), k * np.float32(10), v * np.float32(10)
    elif kind == "peaked":
        q[:, 0] = 4.0
        k[0] = 0.0
        k[0, 0] = 5.0 * math.sqrt(dim)
    return q, k, v


def row_groups(seq: int) -> list[tuple[int, int]]:
    """(row0, rows) of the query rows a head is judged on: every row up to GROUPS·GROUP_ROWS, else GROUPS groups
    from the first row to the last."""
    if seq <= GROUPS * GROUP_ROWS:
        return [(0, seq)]
    starts = np.linspace(0, seq - GROUP_ROWS, GROUPS).round().astype(int)
    return [(int(s), GROUP_ROWS) for s in starts]


def golden_rows(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool, row0: int) -> np.ndarray:
    """float64 attention of query rows row0 .. row0+len(q)-1."""
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    s = q64 @ k64.T / math.sqrt(q.shape[1])
    if causal:
        s = np.where(np.arange(k.shape[0])[None, :] <= np.arange(row0, row0 + q.shape[0])[:, None], s, -np.inf)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    return (w @ v64) / w.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class Comparison:
    """Relative L2 and max-abs error against the float64 golden of the Q15 contract and of fp16, on the same rows."""

    kind: str
    seq: int
    dim: int
    causal: bool
    rows: int
    q15_rel_l2: float
    fp16_rel_l2: float
    q15_max_abs: float
    fp16_max_abs: float

    @property
    def ratio(self) -> float:
        """Q15's rel-L2 over fp16's: at most 1 where the contract is as accurate as fp16."""
        return self.q15_rel_l2 / self.fp16_rel_l2


def compare(kind: str, seq: int, dim: int, causal: bool, bc: int = BC, seed: int = 1) -> Comparison:
    """The contract and fp16 against the golden on one head of `kind` (module docstring)."""
    q, k, v = make_inputs(kind, seq, dim, seed)
    (qq, sq), (kq, sk), (vq, sv) = quantize(q), quantize(k), quantize(v)
    params = Q15Params(seq, dim, causal, bc, *score_scale(sq, sk, dim))
    gold, ours, half = [], [], []
    for row0, rows in row_groups(seq):
        part = slice(row0, row0 + rows)
        gold.append(golden_rows(q[part], k, v, causal, row0))
        ours.append(attention_q15(qq[part], kq, vq, params, row0).dequantize(sv))
        half.append(attention_fp16(q[part], k, v, causal, row0))
    gold_all = np.concatenate(gold)
    norm = float(np.linalg.norm(gold_all))

    def rel(out: list[np.ndarray]) -> tuple[float, float]:
        diff = np.concatenate(out) - gold_all
        return float(np.linalg.norm(diff)) / norm, float(np.abs(diff).max())

    (q_rel, q_max), (h_rel, h_max) = rel(ours), rel(half)
    return Comparison(kind, seq, dim, causal, len(gold_all), q_rel, h_rel, q_max, h_max)
