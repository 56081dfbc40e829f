"""Compare two results.csv files row by row, apart from identity and timing: the check that a refactor changed no
row. Rows are matched by (target, kernel, dtype, seq, dim, heads, causal). Identity columns (run_id, timestamp,
git_rev, host) are ignored; on measured rows the timing columns and what is derived from them (latency, rates,
energy, counters, sensors) are ignored and numbers in the message are masked; modelled rows must match in every
column, timing included.

    python scripts/diff_rows.py BEFORE/results.csv AFTER/results.csv

Exit status: 0 no difference; 1 some row differs or is missing.
"""

from __future__ import annotations

import csv
import re
import sys

IDENTITY = {"run_id", "timestamp", "git_rev", "host"}
TIMING = {"mean_ms", "p50_ms", "p99_ms", "min_ms", "p50_ci_low_ms", "p50_ci_high_ms", "gflops", "gbps", "energy_j",
          "llc_loads", "llc_misses", "instructions", "cpu_cycles", "ipc", "peak_gflops", "peak_gbps", "temp_c",
          "vdda_v"}
KEY = ("target", "kernel", "dtype", "seq", "dim", "heads", "causal")
NUMBER = re.compile(r"[0-9.]+(e-?\d+)?")


def rows(path: str) -> dict[tuple, dict]:
    with open(path, newline="", encoding="utf-8") as file:
        return {tuple(row[name] for name in KEY): row for row in csv.DictReader(file)}


def differences(before: dict[tuple, dict], after: dict[tuple, dict]) -> list[str]:
    found = [f"{key}: only in the second file" for key in sorted(set(after) - set(before))]
    for key in sorted(before):
        old, new = before[key], after.get(key)
        if new is None:
            found.append(f"{key}: missing from the second file")
            continue
        measured = not old["timing_source"].startswith("modelled")
        for column in sorted(set(old) | set(new)):
            if column in IDENTITY or (measured and column in TIMING):
                continue
            a, b = old.get(column, ""), new.get(column, "")
            if measured and column == "message":
                a, b = NUMBER.sub("#", a), NUMBER.sub("#", b)
            if a != b:
                found.append(f"{key} {column}: {a!r} -> {b!r}")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python scripts/diff_rows.py BEFORE/results.csv AFTER/results.csv", file=sys.stderr)
        return 2
    before, after = rows(argv[0]), rows(argv[1])
    found = differences(before, after)
    print(f"{len(before)} rows before, {len(after)} after, {len(found)} differences")
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
