"""16-bit float storage on the host, for the tensor-core kernels: float32 arrays to fp16 or bf16 bit patterns (uint16,
what the device buffers hold) and back, with round-to-nearest-even, and the NaN pattern that poisons an output.

numpy has float16 but no bfloat16, so bf16 is done on the bits: a float32's top 16 bits, rounded to nearest even
on the 16 dropped ones; a NaN stays a (quiet) NaN, values past bf16's range become inf as on the device.
"""

from __future__ import annotations

import numpy as np

HALF_DTYPES = ("float16", "bfloat16")
#: A quiet NaN of each 16-bit type, as its bits.
NAN_BITS = {"float16": 0x7E00, "bfloat16": 0x7FC0}


def to_bits(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 → uint16 bit patterns of `dtype` (float16 or bfloat16), rounded to nearest even."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "float16":
        with np.errstate(over="ignore"):  # beyond 65504 is inf in fp16, as on the device
            return x.astype(np.float16).view(np.uint16)
    if dtype == "bfloat16":
        bits = x.view(np.uint32).astype(np.uint64)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        nan = np.isnan(x)  # rounding a NaN's fraction could carry into the exponent or sign: keep it a quiet NaN
        rounded[nan] = ((bits[nan] >> 16) | 0x0040).astype(np.uint16)
        return rounded
    raise ValueError(f"dtype={dtype!r} is not a 16-bit float; allowed: {', '.join(HALF_DTYPES)}")


def from_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    """uint16 bit patterns of `dtype` → float32 (exact)."""
    bits = np.ascontiguousarray(bits, dtype=np.uint16)
    if dtype == "float16":
        return bits.view(np.float16).astype(np.float32)
    if dtype == "bfloat16":
        return (bits.astype(np.uint32) << 16).view(np.float32)
    raise ValueError(f"dtype={dtype!r} is not a 16-bit float; allowed: {', '.join(HALF_DTYPES)}")


def rounded(x: np.ndarray, dtype: str) -> np.ndarray:
    """x rounded to `dtype` and back to float32: what a 16-bit buffer holds of it."""
    return from_bits(to_bits(x, dtype), dtype)
