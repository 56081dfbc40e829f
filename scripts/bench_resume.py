"""Benchmark: `python -m host.compare --resume` adding one row to a results.csv that already holds N rows.

Builds OUT/results.csv with N synthetic rows (one valid cpu row repeated over seq and seed, as a long sweep would
leave them), then times, as subprocesses, (1) the anchor: the same one-row sweep into an empty folder, and (2) the
resume into the N-row folder, each with its peak resident memory (getrusage of the child). Prints one table; the
figures go to docs/performance.md with the machine. Usage:

    python scripts/bench_resume.py [--rows 1000000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import csv
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from host.results import FIELD_NAMES, Result  # noqa: E402

SWEEP = ["--targets", "cpu", "--seq", "32", "--dim", "16", "--heads", "1", "--causal", "0", "--iters", "3",
         "--warmup", "1"]


def synthetic_rows(path: Path, count: int) -> None:
    """Write `count` valid rows: a measured-looking cpu row at seq 1..4096 and a seed per 4096 rows (none of them the
    configuration the benchmark's sweep measures, seq 32 seed 0 excepted, which is left out)."""
    base = Result(run_id="20261202T000000-bench", timestamp="2026-12-02T00:00:00+00:00", git_rev="bench", host="vm",
                  device="Intel(R) Xeon(R) Processor (2 cores)", target="cpu", kernel="numpy", dtype="float32",
                  batch=1, heads=1, seq=1, dim=16, causal=False, seed=1, status="ok",
                  message="energy: none (no RAPL: /sys/class/powercap does not exist)", mean_ms=0.08, p50_ms=0.08,
                  p99_ms=0.097, min_ms=0.061, iters=10, warmup=2, timing_source="measured: wall clock, "
                  "perf_counter_ns", gflops=0.81, model_bytes=8192, gbps=0.1, peak_gflops=196.3, peak_gbps=13.6,
                  peak_source="measured", max_abs=1.27e-07, rel_l2=1.46e-07,
                  counters_reason="hardware counters not supported (no PMU exposed, e.g. a VM)")
    cells = base.to_row()
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(FIELD_NAMES)
        for index in range(count):
            cells["seq"] = str(1 + index % 4096)
            cells["seed"] = str(1 + index // 4096)
            writer.writerow(cells.values())


#: Runs its arguments as a child and prints that child's own peak resident memory (kB) last: each measured run gets
#: a fresh parent, since RUSAGE_CHILDREN reports the largest child a process ever waited for.
_PEAK = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)")


def timed(argv: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak resident MB, exit status) of one child process."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _PEAK, *argv], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
    return wall, int(done.stdout.split()[-1]) / 1024, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=None, help="work folder (default: a temporary one, removed)")
    args = parser.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="kbench-resume-"))
    try:
        big, empty = work / "big", work / "empty"
        big.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        synthetic_rows(big / "results.csv", args.rows)
        size_mb = (big / "results.csv").stat().st_size / 1e6
        print(f"built {args.rows:,} rows ({size_mb:.0f} MB) in {time.perf_counter() - start:.1f} s", flush=True)
        command = [sys.executable, "-m", "host.compare", *SWEEP]
        anchor = timed(command + ["--out", str(empty)])
        resumed = timed(command + ["--resume", "--out", str(big)])
        lines = sum(1 for _ in (big / "results.csv").open("rb")) - 1
        md_kb = (big / "results.md").stat().st_size / 1e3 if (big / "results.md").exists() else float("nan")
        print(f"{'run':<28} {'wall s':>8} {'peak MB':>8} {'exit':>5}")
        print(f"{'one row, empty folder':<28} {anchor[0]:>8.1f} {anchor[1]:>8.0f} {anchor[2]:>5}")
        print(f"{f'--resume over {args.rows:,} rows':<28} {resumed[0]:>8.1f} {resumed[1]:>8.0f} {resumed[2]:>5}")
        print(f"rows after: {lines:,} (expected {args.rows + 1:,}); results.md {md_kb:.0f} kB; "
              f"resume / anchor wall {resumed[0] / anchor[0]:.1f}x")
        return 0 if resumed[2] == 0 and lines == args.rows + 1 else 1
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
