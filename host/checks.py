"""General argument checks shared by every layer: a value is returned when it is in range, else SpecError quotes it
with the allowed range. Validation at construction (host/problem.py, codesign's datapath, the RTL units) uses these,
so one wording covers every "out of range" a user sees."""

from __future__ import annotations

import math

import numpy as np

from host.errors import SpecError


def check_int(name: str, value: object, low: int, high: int) -> int:
    """Return `value` if it is an int in [low, high]; raise SpecError quoting it otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise SpecError(f"{name}={value!r} is not an integer; allowed: {low}..{high}")
    if not low <= value <= high:
        raise SpecError(f"{name}={value} is out of range; allowed: {low}..{high}")
    return int(value)


def check_real(name: str, value: object, low: float, high: float) -> float:
    """Return `value` as a float if it is a finite real in [low, high]; raise SpecError quoting it otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(value) or not low <= value <= high:
        raise SpecError(f"{name}={value!r} is out of range; allowed: {low:g}..{high:g}")
    return float(value)
