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
    """O = softmax(Q Kᵀ / √dim [+ causal mask]) V for Q, K, V of shape (batch, heads, seq, dim).

    causal keeps key j for query i when j <= i (the diagonal is kept). dtype is the precision the target computes
    in; the inputs are always generated as float32 and each target converts them.
    """

    batch: int = 1
    heads: int = 1
    seq: int = 128
    dim: int = 64
    causal: bool = False
    dtype: str = "float32"
    seed: int = 0

    def __post_init__(self) -> None:
        for name, (low, high) in LIMITS.items():
            object.__setattr__(self, name, check_int(name, getattr(self, name), low, high))
        if not isinstance(self.causal, (bool, np.bool_)) and self.causal not in (0, 1):
            raise SpecError(f"causal={self.causal!r} is not a boolean; allowed: 0, 1, True, False")
        object.__setattr__(self, "causal", bool(self.causal))
        if self.dtype not in DTYPE_BYTES:
            raise SpecError(f"dtype={self.dtype!r} is unknown; allowed: {', '.join(DTYPE_BYTES)}")

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(batch, heads, seq, dim): the shape of Q, K, V and O."""
        return (self.batch, self.heads, self.seq, self.dim)

    @property
    def scale(self) -> float:
        """The softmax scale 1/√dim."""
        return 1.0 / float(np.sqrt(self.dim))

    def inputs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Seeded Q, K, V, each float32 of shape (batch, heads, seq, dim), standard normal."""
        rng = np.random.default_rng(self.seed)
        q, k, v = (rng.standard_normal(self.shape, dtype=np.float32) for _ in range(3))  # (B, H, N, d) each
        return q, k, v

    def flops(self) -> float:
        """FlashAttention's convention: 4·B·H·N²·d (two matmuls of 2·N²·d each), halved when causal."""
        full = 4.0 * self.batch * self.heads * self.seq * self.seq * self.dim
        return full / 2.0 if self.causal else full

    def min_bytes(self) -> int:
        """The least memory traffic any kernel needs: read Q, K, V once and write O once, in the target's dtype."""
        return 4 * self.batch * self.heads * self.seq * self.dim * DTYPE_BYTES[self.dtype]

    def with_(self, **changes: object) -> "AttentionProblem":
        """A copy with some fields changed (validated again)."""
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        fields.update(changes)
        return AttentionProblem(**fields)
