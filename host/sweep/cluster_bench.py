"""`python -m host.sweep.cluster_bench`: how much a second worker buys a cluster sweep, measured in one run.

Starts a scheduler and one worker on this machine (python -m host.cluster), times a sweep on it, starts a second
worker, times the same sweep again (a fresh OUT, so every row is measured again), and prints the wall times and
their ratio. `--worker` gives each worker's own options, as `python -m host.cluster worker` takes them (the targets'
device options: a twin each, `--sim`, or a GPU each, `--gpu-device cuda --gpu I`); the sweep's own options follow
`--`. Besides wall times it prints the row throughput: rows per second from the first row arriving to the last (the
sweep's start, connecting and the report come before and after it). Each worker's numpy gets half the host's cores
(OMP_NUM_THREADS and friends) in both sweeps: its share when both run. Both sweeps' results stay under OUT (one/ and
two/) beside bench.txt, the table printed last.

    python -m host.sweep.cluster_bench --worker=--sim --worker=--sim --out OUT -- --targets mcu --seq 256 --dim 32
    python -m host.sweep.cluster_bench --worker="--gpu-device cuda --gpu 0" --worker="--gpu-device cuda --gpu 1" \
        --out OUT -- --targets gpu --kernels flash --seq 4096

(`--worker=OPTIONS` with `=`: the options start with a dash.)

Exit status: 0 both sweeps ran; 1 a node or a sweep failed; 2 bad arguments; 130 interrupted.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shlex
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from host.cli_common import Parser, folder, guard, output_folder
from host.errors import SpecError, UnavailableError

START_S = 120  # a worker starts a twin and deploys to it, or initialises CUDA, before it serves


class Node:
    """A `python -m host.cluster` child (scheduler or worker), its output in a log file; `wait_for` a line it prints
    once it serves. The test suite starts its cluster with these too."""

    def __init__(self, log: Path, *args: str, env: dict | None = None):
        self.log = log
        with log.open("w") as out:
            self.process = subprocess.Popen([sys.executable, "-m", "host.cluster", *args], stdout=out,
                                            stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})

    def wait_for(self, pattern: str) -> re.Match:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            found = re.search(pattern, self.log.read_text())
            if found:
                return found
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        raise UnavailableError(f"{self.log.name}: did not start: {self.log.read_text()[-500:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def _sweep(address: str, out: Path, sweep_args: list[str]) -> tuple[float, float | None, list[dict]]:
    """One cluster sweep, started as a user starts it: its wall seconds, its row rate (rows per second between the
    first row and the last arriving in results.csv, so the sweep's start, the first compile and the report are not
    in it; None with fewer than two rows) and its rows."""
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.csv"
    for stale in (results, out / "runs.jsonl"):  # the bench's own folder: a fresh sweep every time
        stale.unlink(missing_ok=True)
    arrivals: list[float] = []  # when the file held 1, 2, ... rows
    started = time.perf_counter()
    with (out / "sweep.log").open("w") as log:
        sweep = subprocess.Popen([sys.executable, "-m", "host.compare", "--cluster", address, "--out", str(out),
                                  *sweep_args], stdout=log, stderr=subprocess.STDOUT)
        while sweep.poll() is None:
            count = _rows_in(results)
            arrivals.extend([time.perf_counter()] * (count - len(arrivals)))
            time.sleep(0.02)
    wall = time.perf_counter() - started
    if sweep.returncode not in (0, 1):
        raise UnavailableError(f"the sweep failed (exit {sweep.returncode}): see {out / 'sweep.log'}")
    with results.open(newline="") as file:
        rows = list(csv.DictReader(file))
    rate = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0]) if len(arrivals) > 1 and arrivals[-1] > arrivals[0] \
        else None
    return wall, rate, rows


def _rows_in(path: Path) -> int:
    """Complete rows in a results.csv being appended to (header and a torn last line not counted)."""
    try:
        text = path.read_bytes()
    except OSError:
        return 0
    return max(0, text.count(b"\n") - 1)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m host.sweep.cluster_bench", doc=__doc__)
    parser.add_argument("--worker", dest="workers", action="append", metavar="OPTIONS", default=[],
                        help="one worker's options for python -m host.cluster worker (its devices), given twice: the "
                             "first worker's, then the second's, e.g. --worker --sim --worker --sim (required)")
    parser.add_argument("--out", type=folder, default=Path("reports/latest/cluster-bench"),
                        help="output folder: the logs and each sweep's results (default reports/latest/cluster-bench, "
                             "git-ignored)")
    parser.add_argument("sweep", nargs=argparse.REMAINDER, help="host.compare options, after --")

    def body() -> int:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
        sweep_args = [arg for arg in args.sweep if arg != "--"]
        if len(args.workers) != 2:
            raise SpecError(f"--worker given {len(args.workers)} times; allowed: twice (the first worker's options, "
                            "then the second's, e.g. --worker=--sim --worker=--sim)")
        try:
            worker_args = [shlex.split(options) for options in args.workers]
        except ValueError as exc:
            raise SpecError(f"--worker {args.workers!r}: {exc}") from None
        out = output_folder(args.out)
        # Each worker gets half the host's cores for its numpy work (the rows' float64 golden): the share it has
        # when both run, given to it in both sweeps, so the second worker adds a device and not idle cores.
        share = str(max(1, (os.cpu_count() or 2) // 2))
        threads = {name: share for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
        nodes = []
        try:
            nodes.append(Node(out / "scheduler.log", "scheduler", "--host", "127.0.0.1", "--port", "0"))
            address = nodes[0].wait_for(r"scheduler at (tcp://[0-9.]+:[0-9]+)")[1]
            table = []
            for count, extra in enumerate(worker_args, start=1):
                node = Node(out / f"worker{count}.log", "worker", "--scheduler", address, *extra, env=threads)
                nodes.append(node)
                node.wait_for(r"worker \S+ at tcp://")
                wall, rate, rows = _sweep(address, out / ("one" if count == 1 else "two"), sweep_args)
                table.append((count, wall, rate, rows))
                print(f"kbench: {count} worker(s): {len(rows)} rows in {wall:.1f} s", file=sys.stderr, flush=True)
        finally:
            for node in reversed(nodes):
                node.stop()
        lines = ["workers  rows  ok   wall s  rows/s (first to last row)  rows per worker", *[
            f"{count:>7} {len(rows):>5} {sum(r['status'] == 'ok' for r in rows):>3} {wall:>8.1f}  "
            f"{'-' if rate is None else format(rate, '26.3f')}  {dict(Counter(r['worker'] for r in rows))}"
            for count, wall, rate, rows in table]]
        (one, two) = (table[0][1], table[1][1])
        lines.append(f"two workers' wall / one worker's: {two / one:.3f} (sweep throughput {one / two:.2f}x)")
        if table[0][2] and table[1][2]:
            lines.append(f"row throughput, two workers / one: {table[1][2] / table[0][2]:.2f}x")
        lines.append("command: python -m host.sweep.cluster_bench " + " ".join(sys.argv[1:] if argv is None else argv))
        (out / "bench.txt").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        return 0

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
