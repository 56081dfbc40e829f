"""Wall time of the same heads on the CPython twin and on the VM twin (`python -m mcu.sim --vm`), in one run.

    .venv/bin/python scripts/twin_heads_ab.py [--rounds 3]

Each round starts each twin afresh, deploys, and runs each head (seq 128, d 64, causal and not, as the main job's
MCU rows) through mcu.head.run_head, planned from the twin's HELLO; the twins alternate within a round, so drift
enters both. Prints a Markdown table: per twin and head the median wall time of the head (deploy excluded), its
chunks' query rows, bit-exactness against host/q15.py, and the VM's ratio to the CPython twin.
"""

from __future__ import annotations

import argparse
import contextlib
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from host.problem import AttentionProblem  # noqa: E402
from host.q15 import prepare  # noqa: E402
from mcu.deploy import deploy  # noqa: E402
from mcu.head import Session, run_head  # noqa: E402
from mcu.link import BoardLink  # noqa: E402

HEADS = [(128, 64, False), (128, 64, True)]
TWINS = {"CPython twin": (), "VM twin": ("--vm",)}


@contextlib.contextmanager
def twin(options: tuple[str, ...]):
    """A twin on a fresh root: yields its pty; stopped at the end."""
    root = Path(tempfile.mkdtemp(prefix="kbench-ab-"))
    process = subprocess.Popen([sys.executable, "-m", "mcu.sim", "--root", str(root), "--exit-on-stdin-eof",
                                *options], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               cwd=ROOT)
    try:
        ready, _, _ = select.select([process.stdout], [], [], 60)
        port = process.stdout.readline().decode().strip() if ready else ""
        if not port.startswith("/dev/"):
            raise SystemExit(f"kbench: the twin {options} did not start: {process.stderr.read()[-300:]!r}")
        yield port
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    args = parser.parse_args()
    walls: dict[tuple[str, tuple], list[float]] = {}
    facts: dict[tuple[str, tuple], tuple] = {}
    for r in range(args.rounds):
        for name, options in (TWINS.items() if r % 2 == 0 else reversed(TWINS.items())):
            with twin(options) as port:
                deploy(port, 115200, say=lambda line: None)
                for seq, dim, causal in HEADS:
                    problem = AttentionProblem(seq=seq, dim=dim, causal=causal)
                    quantized = prepare(problem, *problem.inputs(), 32)
                    start = time.perf_counter()
                    with BoardLink(port) as link:
                        head = run_head(Session(link, port, name), quantized.params, *quantized.head(0, 0), 1)
                    wall = time.perf_counter() - start
                    key = (name, (seq, dim, causal))
                    walls.setdefault(key, []).append(wall)
                    facts[key] = (head.rows, bool(np.array_equal(head.out, quantized.expected()[0, 0])),
                                  int(head.cycles[0]))
                    print(f"kbench: round {r + 1}: {name} {seq}x{dim} causal={causal}: {wall:.2f} s", file=sys.stderr,
                          flush=True)
    print("| head | twin | wall (median) | query rows per chunk | bit-exact | cycles | VM / CPython |")
    print("|---|---|---:|---:|---|---:|---:|")
    for seq, dim, causal in HEADS:
        shape = (seq, dim, causal)
        base = statistics.median(walls[("CPython twin", shape)])
        for name in TWINS:
            median = statistics.median(walls[(name, shape)])
            rows, exact, cycles = facts[(name, shape)]
            ratio = f"{median / base:.2f}x" if name == "VM twin" else ""
            print(f"| {seq}x{dim}{' causal' if causal else ''} | {name} | {median:.2f} s | {rows} | {exact} | "
                  f"{cycles} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
