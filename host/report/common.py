"""What the report's Markdown (host/report/markdown.py) and its plots (host/report/plots.py) both say about a row:
how a figure is written, a row's tile, and how a roof (a machine's ceilings) is named, measured or from a datasheet.

Layer L3 with the rest of the report: it imports only host.results.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Sequence

from host.results import Result

RESULTS_CSV = "results.csv"
RUNS_JSONL = "runs.jsonl"
RESULTS_MD = "results.md"
#: Above this many rows results.md summarises each target/kernel/dtype instead of listing every row (the full rows
#: stay in results.csv), and the plots draw one point per configuration and sequence length (host/report/plots.py).
SUMMARY_ROWS = 2000

#: Magnitudes fmt_num writes in fixed point; outside it, in short scientific form.
FIXED_RANGE = (1e-3, 1e6)
#: Counts from here up are written in short scientific form ('9.223e18'), past where the T prefix reads well.
SCIENTIFIC_COUNT = 10**15
#: Between the notes of a row's message (host/target_api.py joins a verdict's message and a target's note so).
NOTE_SEPARATOR = "; "
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
    if not FIXED_RANGE[0] <= ax < FIXED_RANGE[1]:
        return _short_exp(f"{x:.3e}")
    if ax >= 1000:
        return f"{x:.0f}"
    return f"{x:.4g}"


def _si(count: int) -> str:
    """A large count with 4 significant digits and a decimal prefix: 537600 → '537.6k'; from SCIENTIFIC_COUNT up, in
    short scientific form: 2⁶³-1 → '9.223e18' (exactly, with integer arithmetic, however many digits)."""
    rounded = abs(count) if abs(count) >= SCIENTIFIC_COUNT else abs(float(f"{count:.4g}"))  # 999_999_999 → 1e9
    if rounded >= SCIENTIFIC_COUNT:
        exponent = len(str(abs(count))) - 1 if abs(count).bit_length() < 4000 else int(math.log10(abs(count)))
        mantissa = round(count / 10**exponent, 3)  # int / int: correctly rounded, never an OverflowError here
        if abs(mantissa) >= 10:
            mantissa, exponent = round(mantissa / 10, 3), exponent + 1
        return f"{mantissa:.3f}e{exponent}"
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if rounded >= scale:  # the prefix of the rounded figure: never '1000M'
            return f"{count / scale:.4g}{prefix}"
    return str(count)


def _short_exp(text: str) -> str:
    """'1.235e+06' → '1.235e6'."""
    mantissa, exponent = text.split("e")
    return f"{mantissa}e{int(exponent)}"


def fmt_exp(x: float | int | None) -> str:
    """A figure in fmt_num's short scientific form whatever its size ('2.380e-3'); '' for None, '0' for zero."""
    if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))) or x == 0:
        return fmt_num(x)
    return _short_exp(f"{x:.3e}")


def column_format(figures: Iterable[float | int | None]) -> Callable[[float | int | None], str]:
    """One way to write every figure of a table column, so that 0.001423 never stands beside 7.228e-4: fmt_num
    when each non-zero float of the column lies in [1e-3, 1e6) (where fmt_num writes it in fixed point), else fmt_exp
    for every float. Counts (ints) keep fmt_num's exact-or-k/M/G form either way."""
    floats = [abs(x) for x in figures if isinstance(x, float) and math.isfinite(x) and x != 0]
    if all(FIXED_RANGE[0] <= x < FIXED_RANGE[1] for x in floats):
        return fmt_num
    return lambda x: fmt_num(x) if isinstance(x, int) else fmt_exp(x)


def fmt_sci(x: float | None) -> str:
    """An error figure with 3 significant digits in the short scientific form every table uses ('1.46e-4'); '' for
    None, '0' for zero."""
    if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))) or x == 0:
        return fmt_num(x)
    return _short_exp(f"{x:.2e}")


def message_notes(message: str) -> list[str]:
    """A row's message split into its notes at '; ' outside brackets: 'wrong (…): not bit-exact (…; …); max_abs …'
    is two notes."""
    notes, depth, start = [], 0, 0
    for i, char in enumerate(message):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth = max(depth - 1, 0)
        elif depth == 0 and message.startswith(NOTE_SEPARATOR, i):
            notes.append(message[start:i])
            start = i + len(NOTE_SEPARATOR)
    notes.append(message[start:])
    return [note.strip() for note in notes if note.strip()]


def shared_notes(rows: Sequence[Result]) -> list[str]:
    """The notes every one of two or more rows carries in its message (the CPU's 'energy: none (no RAPL: …)', the
    MCU's datasheet energy), in the first row's order: said once for the rows, not in each."""
    if len(rows) < 2:
        return []
    first, *others = [message_notes(r.message) for r in rows]
    return [note for note in dict.fromkeys(first) if all(note in notes for notes in others)]


def own_message(r: Result, shared: Sequence[str] = ()) -> str:
    """A row's message for a table that shows its status beside it: without the `shared` notes (said once for the
    table) and without a leading repeat of the status word: 'skipped: why' → 'why', 'wrong (Q15 contract): …' →
    'Q15 contract: …'. results.csv keeps the whole message."""
    text = NOTE_SEPARATOR.join(note for note in message_notes(r.message) if note not in shared)
    if text.startswith(f"{r.status}: "):
        return text[len(r.status) + 2:]
    if text.startswith(f"{r.status} ("):
        depth = 0
        for i in range(len(r.status) + 1, len(text)):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            if depth == 0:
                rule, rest = text[len(r.status) + 2:i], text[i + 1:]
                return f"{rule}{rest}" if rest.startswith(":") else text
    return text


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
