"""Every row's accuracy verdict, and the one place that defines the tolerances behind it.

A row is `ok` only when its output passes the check of its precision; otherwise it is `wrong` and keeps its figures.

Float targets (float32 today; float16 and bfloat16 storage with float32 accumulation when those kernels land) are
held to the float64 golden by a tolerance derived from rounding-error analysis (docs/architecture.md, "Verdicts"):
an output element is a softmax-weighted sum of N values whose weights come from d-long dot products. In the
probabilistic model of rounding (errors of independent operations add like a random walk, Higham §3.5) a dot product
of d terms carries a relative error of order u·√d and a sum of N terms one of order u·√N, so both the relative L2
error and the largest error relative to max|golden| are of order

    u_store + u_acc · (1 + √d + √N)

where u_acc = 2⁻²⁴ is the unit roundoff of the float32 accumulators every kernel uses and u_store the unit roundoff
of the precision Q, K, V and P are stored in (2⁻²⁴ for float32; its own term covers rounding the inputs). The
tolerance is `SAFETY` times that (the numbers are host/tolerance.py's, which host/results.py holds `ok` rows to).
Measured (tests/host/test_verdict.py re-measures it): the float32 reference and the tiled online softmax stay below
0.4× the bracket in rel-L2 and 0.8× in max-abs at N 17..4096, d 1..256, causal or not, and the H200's naive, fused
and flash rows below 0.3× and 0.6× (reports/gpu-h200/compare); SAFETY = 8 leaves them a margin of 10 or more, while
a wrong scale, mask or rescale misses it by orders of magnitude.

Q15 targets must equal host/q15.py bit for bit (the contract), and their error against the golden must stay within
the contract's worst-case bound (docs/q15.md §8, `q15.error_bound`): bit-exactness is the sharp test, the bound
guards against a model and an implementation that are wrong together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from host.problem import AttentionProblem
from host.q15 import Q15Out
from host.reference import ErrorMetrics, errors
from host.tolerance import SAFETY, bracket, rel_l2_limit  # the numbers, shared with host/results.py's row checks

#: How many of the worst elements a `wrong` message quotes.
MISMATCHES_SHOWN = 3

OK, WRONG = "ok", "wrong"


@dataclass(frozen=True)
class Verdict:
    """An output's figures against the golden, the limits applied, and the status its row gets."""

    metrics: ErrorMetrics
    rel_l2_limit: float
    max_abs_limit: float
    bit_exact: bool | None
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status == OK

    def as_fields(self) -> dict[str, object]:
        """The Result fields a verdict fills: the error figures, bit_exact, status and message."""
        return {"max_abs": self.metrics.max_abs, "rel_l2": self.metrics.rel_l2, "bit_exact": self.bit_exact,
                "status": self.status, "message": self.message}


def float_bracket(problem: AttentionProblem) -> float:
    """u_store + u_acc · (1 + √d + √N): the size of a correct float kernel's error, relative to the output."""
    return bracket(problem.dtype, problem.dim, problem.seq)


def check_float(out: np.ndarray, problem: AttentionProblem, gold: np.ndarray) -> Verdict:
    """Judge a float output (B, H, N, d) against the float64 golden: rel-L2 and max-abs (relative to max|golden|)
    within SAFETY × float_bracket, and nothing NaN or infinite."""
    metrics = errors(out, gold)
    rel_limit = rel_l2_limit(problem.dtype, problem.dim, problem.seq)
    abs_limit = rel_limit * max(float(np.max(np.abs(gold))) if gold.size else 0.0, np.finfo(np.float32).tiny)
    failures = []
    if not metrics.rel_l2 <= rel_limit:  # NaN compares false: wrong too
        failures.append(f"rel_l2 {metrics.rel_l2:.3g} > {rel_limit:.3g}")
    if not metrics.max_abs <= abs_limit:
        failures.append(f"max_abs {metrics.max_abs:.3g} > {abs_limit:.3g}")
    return _verdict(metrics, rel_limit, abs_limit, None, failures, out, gold,
                    f"{problem.dtype} tolerance {SAFETY:g}·(u_store + u_acc·(1+√d+√N))")


def check_q15(out: Q15Out, expected: Q15Out, dequantized: np.ndarray, gold: np.ndarray, bound: float) -> Verdict:
    """Judge a Q15 output: `out` (int16 values and row shifts) must equal the model's `expected` bit for bit, and
    `dequantized` (float) must stay within the contract's worst-case max-abs `bound` of the golden."""
    metrics = errors(dequantized, gold)
    exact = out.same_bits(expected)
    failures = []
    if not exact:
        failures.append("not bit-exact with host/q15.py (" + _differences(out, expected) + ")")
    if not metrics.max_abs <= bound:
        failures.append(f"max_abs {metrics.max_abs:.3g} > the contract's bound {bound:.3g}")
    return _verdict(metrics, math.inf, bound, exact, failures, dequantized, gold, "Q15 contract")


def _differences(out: Q15Out, expected: Q15Out) -> str:
    """Which values and row shifts differ, e.g. '2 of 64 values differ: O(0, 1, 5, 2): got 3, model 4; ...'."""
    parts = []
    for name, got, want, label in (("values", out.o, expected.o, "O"), ("row shifts", out.shift, expected.shift, "g")):
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape:
            parts.append(f"{name}: shapes {got.shape} vs {want.shape}")
            continue
        differ = np.argwhere(got != want)
        if len(differ):
            where = "; ".join(f"{label}{tuple(int(i) for i in idx)}: got {int(got[tuple(idx)])}, model "
                              f"{int(want[tuple(idx)])}" for idx in differ[:MISMATCHES_SHOWN])
            parts.append(f"{len(differ)} of {got.size} {name} differ: {where}")
    return "; ".join(parts)


def _verdict(metrics: ErrorMetrics, rel_limit: float, abs_limit: float, exact: bool | None, failures: list[str],
             out: np.ndarray, gold: np.ndarray, rule: str) -> Verdict:
    if not failures:
        return Verdict(metrics, rel_limit, abs_limit, exact, OK, "")
    return Verdict(metrics, rel_limit, abs_limit, exact, WRONG,
                   f"wrong ({rule}): " + "; ".join(failures) + _worst(out, gold))


def _worst(out: np.ndarray, gold: np.ndarray) -> str:
    """The largest errors with their indices, e.g. '; worst O(0, 1, 5, 2): got 0.31, want 0.29'."""
    if out.shape != gold.shape or not out.size:
        return ""
    diff = np.abs(out.astype(np.float64) - gold)
    diff[~np.isfinite(diff)] = np.inf
    order = np.argsort(diff, axis=None)[::-1][:MISMATCHES_SHOWN]
    shown = [np.unravel_index(int(i), out.shape) for i in order]
    return "; worst " + ", ".join(f"O{tuple(int(i) for i in idx)}: got {float(out[idx]):.6g}, "
                                  f"want {float(gold[idx]):.6g}" for idx in shown)
