"""Rows per second of ResultsFile.rows() (the streamed, validated read of results.csv that --resume and the report
make), for square rows and for decode rows (q_len, kv_heads set: the shape check of schema 7 runs on them).
Run from a checkout's root: python reports/issue-32/host/read_rate.py ROWS REPEATS"""

import csv
import sys
import tempfile
import time
from pathlib import Path

from host.results import FIELD_NAMES, Result
from host.results_file import ResultsFile


def write(path: Path, rows: int, decode: bool) -> None:
    shape = dict(heads=32, kv_heads=8, q_len=1) if decode else dict(heads=32)
    base = Result(run_id="r", timestamp="2026-12-03T00:00:00+00:00", git_rev="g", host="h", device="cpu0",
                  target="cpu", kernel="numpy", dtype="float32", batch=1, seq=4096, dim=128, causal=True, seed=0,
                  p50_ms=1.5, mean_ms=1.6, min_ms=1.4, p99_ms=2.0, iters=10, warmup=2, gflops=3.0, gbps=4.0,
                  timing_source="measured: wall clock, perf_counter_ns", max_abs=1e-7, rel_l2=2e-7, **shape).to_row()
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(FIELD_NAMES)
        for i in range(rows):
            base["seq"] = str(4096 + i)
            out.writerow(base[name] for name in FIELD_NAMES)


def main() -> None:
    rows, repeats = int(sys.argv[1]), int(sys.argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        for decode in (False, True):
            path = Path(tmp) / "results.csv"
            write(path, rows, decode)
            best = min(_timed(path) for _ in range(repeats))
            print(f"{'decode' if decode else 'square'} rows: {rows} in {best:.2f} s (best of {repeats}): "
                  f"{rows / best / 1e3:.1f} k rows/s, {best / rows * 1e6:.2f} us/row")


def _timed(path: Path) -> float:
    start = time.perf_counter()
    count = sum(1 for _ in ResultsFile(path).rows())
    assert count > 0
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
