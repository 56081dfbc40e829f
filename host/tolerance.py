"""The float tolerance every float row is judged by, as numbers alone: host/verdict.py applies it to an output, and
host/results.py holds a recorded `ok` row to it (a row whose own rel-L2 is outside it was not judged `ok` by kbench).
The derivation is host/verdict.py's docstring and docs/architecture.md, "Verdicts"."""

from __future__ import annotations

import math
from functools import lru_cache

from host.errors import SpecError

#: Unit roundoff of each storage precision (half the distance from 1 to the next float).
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
#: Every float kernel accumulates in float32.
ACCUMULATOR_ROUNDOFF = UNIT_ROUNDOFF["float32"]
#: Tolerance = SAFETY × the rounding bracket; measured correct kernels use at most 0.8 of the bracket.
SAFETY = 8.0


@lru_cache(maxsize=4096)
def bracket(dtype: str, dim: int, seq: int) -> float:
    """u_store + u_acc · (1 + √d + √N): the size of a correct float kernel's error, relative to the output, for Q, K,
    V stored in `dtype` (float32: no storage term) and N = seq keys."""
    if dtype not in UNIT_ROUNDOFF:
        raise SpecError(f"dtype={dtype!r} has no float tolerance; allowed: {', '.join(UNIT_ROUNDOFF)}")
    u_store = UNIT_ROUNDOFF[dtype] if dtype != "float32" else 0.0
    return u_store + ACCUMULATOR_ROUNDOFF * (1.0 + math.sqrt(dim) + math.sqrt(seq))


def rel_l2_limit(dtype: str, dim: int, seq: int) -> float:
    """The largest relative L2 error an `ok` float row may have: SAFETY × bracket."""
    return SAFETY * bracket(dtype, dim, seq)
