"""The attention problem every target runs: shape, masking, precision, seed, and the one FLOP and byte formulas.

`AttentionProblem` is frozen and validated at construction, so a bad value fails where it is written, with the value
and the allowed range in the message. Inputs are generated from the seed alone: the same problem gives the same
Q, K, V on every machine and in every target.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from host.checks import check_int
from host.errors import SpecError

#: Allowed ranges, inclusive. seq and dim bound what any target could hold; batch·heads bounds the sweep size.
LIMITS = {
    "batch": (1, 4096),
    "heads": (1, 4096),
    "seq": (1, 1 << 20),
    "dim": (1, 256),
    "seed": (0, 2**32 - 1),
}

#: Bytes per element as stored by a target working in that precision.
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "q15": 2}


@dataclass(frozen=True)
class AttentionProblem:
    """O = softmax(Q Kᵀ / √dim [+ causal mask]) V: Q of shape (batch, heads, q_len, dim) against K, V of shape
    (batch, kv_heads, seq, dim).

    q_len is the number of queries (None, or seq: self-attention; fewer: decode or a chunk of prefill against a KV
    cache of seq keys). kv_heads is the number of K/V heads (None: heads; fewer: grouped-query attention, query head h
    reading K/V head h // (heads / kv_heads)); it must divide heads. causal is aligned to the bottom right, as a KV
    cache is: query i sees keys 0 .. seq − q_len + i (FlashAttention ≥ 2.1's convention; with q_len = seq, key j for
    query i when j <= i, the diagonal kept). dtype is the precision the target computes in; the inputs are always
    generated as float32 and each target converts them.
    """

    batch: int = 1
    heads: int = 1
    seq: int = 128
    dim: int = 64
    causal: bool = False
    dtype: str = "float32"
    seed: int = 0
    q_len: int | None = None
    kv_heads: int | None = None

    def __post_init__(self) -> None:
        for name, (low, high) in LIMITS.items():
            object.__setattr__(self, name, check_int(name, getattr(self, name), low, high))
        if not isinstance(self.causal, (bool, np.bool_)) and self.causal not in (0, 1):
            raise SpecError(f"causal={self.causal!r} is not a boolean; allowed: 0, 1, True, False")
        object.__setattr__(self, "causal", bool(self.causal))
        if self.dtype not in DTYPE_BYTES:
            raise SpecError(f"dtype={self.dtype!r} is unknown; allowed: {', '.join(DTYPE_BYTES)}")
        # q_len = seq and kv_heads = heads are stored as None: one square problem has one spelling (and one key)
        if self.q_len is not None:
            q_len = check_int("q_len", self.q_len, 1, self.seq)
            object.__setattr__(self, "q_len", None if q_len == self.seq else q_len)
        if self.kv_heads is not None:
            kv_heads = check_int("kv_heads", self.kv_heads, 1, self.heads)
            if self.heads % kv_heads:
                raise SpecError(f"kv_heads={kv_heads} does not divide heads={self.heads}; allowed: a divisor of "
                                f"{self.heads}")
            object.__setattr__(self, "kv_heads", None if kv_heads == self.heads else kv_heads)

    @property
    def queries(self) -> int:
        """Query rows per head: q_len, or seq for self-attention."""
        return self.seq if self.q_len is None else self.q_len

    @property
    def kv_head_count(self) -> int:
        """K/V heads: kv_heads, or heads without grouping."""
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def square(self) -> bool:
        """Self-attention with a K/V head per query head: the shape every target runs (q_len = seq, kv_heads =
        heads)."""
        return self.queries == self.seq and self.kv_head_count == self.heads

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(batch, heads, q_len, dim): the shape of Q and O."""
        return (self.batch, self.heads, self.queries, self.dim)

    @property
    def kv_shape(self) -> tuple[int, int, int, int]:
        """(batch, kv_heads, seq, dim): the shape of K and V."""
        return (self.batch, self.kv_head_count, self.seq, self.dim)

    @property
    def scale(self) -> float:
        """The softmax scale 1/√dim."""
        return 1.0 / float(np.sqrt(self.dim))

    def inputs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Seeded Q (batch, heads, q_len, dim) and K, V (batch, kv_heads, seq, dim), float32, standard normal (drawn
        in that order, so a square problem's inputs are what they always were).

        Because Q comes first, a decode problem (q_len < seq) at the same seed and seq has other K and V than the
        square problem (they follow a shorter Q in the stream), and its Q is the stream's first batch·heads·q_len·dim
        numbers, not the square Q's last rows. To compare decode with the prefill it continues, slice the square
        problem's own inputs (its last q_len rows of Q against its K, V); nothing relies on the two problems' inputs
        being related (docs/architecture.md, "The problem")."""
        rng = np.random.default_rng(self.seed)
        q = rng.standard_normal(self.shape, dtype=np.float32)
        k, v = (rng.standard_normal(self.kv_shape, dtype=np.float32) for _ in range(2))
        return q, k, v

    def visible_keys(self) -> float:
        """Keys each query head sees, summed over its queries, by FlashAttention's convention: q_len·seq, and with
        the causal mask q_len·seq − q_len²/2 (half of seq² for self-attention; nearly all of seq for one query)."""
        full = float(self.queries) * self.seq
        return full - self.queries * self.queries / 2.0 if self.causal else full

    def flops(self) -> float:
        """FlashAttention's convention: 4·B·H·q_len·seq·d (two matmuls of 2·q_len·seq·d each), with the causal mask
        4·B·H·d·(q_len·seq − q_len²/2) (halved for self-attention)."""
        return 4.0 * self.batch * self.heads * self.dim * self.visible_keys()

    def min_bytes(self) -> int:
        """The least memory traffic any kernel needs: read Q and K, V once and write O once, in the target's dtype
        (K and V once per K/V head, whatever the group size)."""
        q_and_o = 2 * self.batch * self.heads * self.queries * self.dim
        k_and_v = 2 * self.batch * self.kv_head_count * self.seq * self.dim
        return (q_and_o + k_and_v) * DTYPE_BYTES[self.dtype]

    def with_(self, **changes: object) -> "AttentionProblem":
        """A copy with some fields changed (validated again)."""
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        fields.update(changes)
        return AttentionProblem(**fields)
