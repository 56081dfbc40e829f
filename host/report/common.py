"""What the report's Markdown (host/report/markdown.py) and its plots (host/report/plots.py) both say about a row:
how a figure is written, a row's tile, and how a roof (a machine's ceilings) is named, measured or from a datasheet.

Layer L3 with the rest of the report: it imports only host.results.
"""

from __future__ import annotations

import math

from host.results import Result

RESULTS_CSV = "results.csv"
RUNS_JSONL = "runs.jsonl"
RESULTS_MD = "results.md"

#: peak_source values that mean "measured in the run"; schema-1 files leave it empty, and only measured roofs existed.
MEASURED_SOURCES = ("", "measured")


def fmt_num(x: float | int | None) -> str:
    """A figure with 3–4 significant digits; '' for None. Counts below 10⁴ stay exact, larger ones take k/M/G/T."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if isinstance(x, int):
        return str(x) if abs(x) < 10_000 else _si(x)
    ax = abs(x)
    if ax == 0:
        return "0"
    if ax >= 1_000_000 or ax < 1e-3:
        return _short_exp(f"{x:.3e}")
    if ax >= 1000:
        return f"{x:.0f}"
    return f"{x:.4g}"


def _si(count: int) -> str:
    """A large count with 4 significant digits and a decimal prefix: 537600 → '537.6k'."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(count) >= scale:
            return f"{count / scale:.4g}{prefix}"
    return str(count)


def _short_exp(text: str) -> str:
    """'1.235e+06' → '1.235e6'."""
    mantissa, exponent = text.split("e")
    return f"{mantissa}e{int(exponent)}"


def fmt_sci(x: float | None) -> str:
    """An error figure in %.2e; '' for None."""
    return "" if x is None else f"{x:.2e}"


def tile(r: Result) -> str:
    """'Br×Bc', one side left empty when only the other applies; '' when the row has no tile."""
    if r.br is None and r.bc is None:
        return ""
    return f"{'' if r.br is None else r.br}×{'' if r.bc is None else r.bc}"


def is_measured_roof(peak_source: str) -> bool:
    """Whether ceilings were measured in the run (else they come from a datasheet or another stated source)."""
    return peak_source in MEASURED_SOURCES


def roof_text(peak_gflops: float, peak_gbps: float, peak_source: str) -> str:
    """A roof in words: 'measured peak 140.6 GFLOP/s, 16.31 GB/s' or 'datasheet roof 0.336 GFLOP/s, 0.672 GB/s
    (Cortex-M4 SMLALD 2 MAC/cycle, SRAM 4 B/cycle)'."""
    figures = f"{fmt_num(float(peak_gflops))} GFLOP/s, {fmt_num(float(peak_gbps))} GB/s"
    if is_measured_roof(peak_source):
        return f"measured peak {figures}"
    kind, _, detail = peak_source.partition(":")
    if detail.strip():
        return f"{kind.strip()} roof {figures} ({detail.strip()})"
    return f"{peak_source} roof {figures}"
