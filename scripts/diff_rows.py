"""Compare two results.csv files row by row, apart from identity and timing: the check that a refactor changed no row.
Both files are read and checked as host.report reads them. Rows are matched by their configuration (KEY: target,
kernel, dtype, shape, masking, tile, workload, seed; a column an older file lacks reads as empty); a configuration
twice in one file is refused, not merged. Identity columns (run_id, timestamp, git_rev, host) are ignored; on
measured rows the timing columns and what is derived from them (latency, rates, energy, counters, sensors) are
ignored and numbers in the message are masked; modelled rows must match in every column, timing included.

    python scripts/diff_rows.py BEFORE/results.csv AFTER/results.csv

Exit status: 0 no difference; 1 some row differs or is missing; 2 usage, a file that cannot be read, or a
configuration twice in one file.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

from host.errors import ResultsError
from host.results_file import ResultsFile

IDENTITY = {"run_id", "timestamp", "git_rev", "host"}
TIMING = {"mean_ms", "p50_ms", "p99_ms", "min_ms", "p50_ci_low_ms", "p50_ci_high_ms", "gflops", "gbps", "energy_j",
          "llc_loads", "llc_misses", "instructions", "cpu_cycles", "ipc", "peak_gflops", "peak_gbps", "temp_c",
          "vdda_v"}
KEY = ("target", "kernel", "dtype", "batch", "heads", "kv_heads", "seq", "q_len", "dim", "causal", "br", "bc",
       "workload", "seed")
NUMBER = re.compile(r"[0-9.]+(e-?\d+)?")


class Unreadable(Exception):
    """A file that cannot be compared: its one-line reason."""


def rows(path: str) -> dict[tuple, dict]:
    """The file's rows by configuration, read and checked as host.report reads them (host/results_file.py: a BOM, a
    torn last row and older schemas are fine; a bad row is refused naming its line); Unreadable for a path that is
    not a regular file (a FIFO would block, /dev/zero never end), a file that is not kbench results, or a
    configuration twice."""
    if not Path(path).is_file():
        what = "does not exist" if not Path(path).exists() else "is not a regular file (a folder, a FIFO, a device?)"
        raise Unreadable(f"{path} {what}; allowed: a results.csv written by kbench")
    found: dict[tuple, dict] = {}
    results = ResultsFile(path)
    try:
        for ordinal, result in enumerate(results.rows()):
            row = dataclasses.asdict(result)
            key = tuple("" if row[name] is None else row[name] for name in KEY)
            if key in found:
                raise Unreadable(f"{path}: row {ordinal + 1}: the configuration {key} is there twice (a --resume'd or "
                                 "appended file?): compare files of one row a configuration")
            found[key] = row
    except ResultsError as exc:
        raise Unreadable(str(exc)) from None
    if results.torn_line is not None:
        print(f"kbench: {path}:{results.torn_line}: a torn last row (a killed writer) is left out", file=sys.stderr)
    return found


def differences(before: dict[tuple, dict], after: dict[tuple, dict]) -> list[str]:
    found = [f"{key}: only in the second file" for key in sorted(set(after) - set(before), key=str)]
    for key in sorted(before, key=str):
        old, new = before[key], after.get(key)
        if new is None:
            found.append(f"{key}: missing from the second file")
            continue
        measured = not (old.get("timing_source") or "").startswith("modelled")
        for column in sorted(set(old) | set(new)):
            if column in IDENTITY or (measured and column in TIMING):
                continue
            a, b = old.get(column), new.get(column)
            if measured and column == "message":
                a, b = NUMBER.sub("#", a), NUMBER.sub("#", b)
            if a != b:
                found.append(f"{key} {column}: {a!r} -> {b!r}")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python scripts/diff_rows.py BEFORE/results.csv AFTER/results.csv", file=sys.stderr)
        return 2
    try:
        before, after = rows(argv[0]), rows(argv[1])
    except Unreadable as exc:
        print(f"kbench: {exc}", file=sys.stderr)
        return 2
    found = differences(before, after)
    print(f"{len(before)} rows before, {len(after)} after, {len(found)} differences")
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
