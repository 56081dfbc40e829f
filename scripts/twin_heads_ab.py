"""Wall time of the same work on the twin of an earlier commit (the CPython twin, by default) and on this tree's,
in one run.

    .venv/bin/python scripts/twin_heads_ab.py [--rounds 3] [--before REV] [--main-job]

REV (default BEFORE, the last commit whose `python -m mcu.sim` was the CPython re-implementation of MicroPython) is
checked out in a temporary git worktree and its twin runs from there; "after" is this checkout's twin (the real
MicroPython VM). Each round starts each twin afresh, deploys, and runs each head (seq 128, d 64, causal and not, as
the main job's MCU rows) through mcu.head.run_head, planned from the twin's HELLO; the twins alternate within a
round, so drift enters both. With --main-job each round also times the main job's MCU rows (`python -m host.compare
--targets mcu --sim`) in each tree. Prints a Markdown table: per twin and head the median wall time (deploy excluded),
its chunks' query rows, bit-exactness against host/q15.py, and the ratio after / before.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from host.problem import AttentionProblem  # noqa: E402
from host.q15 import Q15Out, prepare  # noqa: E402
from mcu.deploy import deploy  # noqa: E402
from mcu.head import Session, run_head  # noqa: E402
from mcu.link import BoardLink  # noqa: E402

HEADS = [(128, 64, False), (128, 64, True)]
#: The last commit with the CPython twin (issue 30 replaced it by the VM).
BEFORE = "43178cf"


@contextlib.contextmanager
def worktree(rev: str):
    """`rev` checked out in a temporary worktree (removed at the end)."""
    where = Path(tempfile.mkdtemp(prefix="kbench-before-"))
    done = subprocess.run(["git", "worktree", "add", "--detach", str(where), rev], cwd=ROOT, capture_output=True,
                          text=True)
    if done.returncode:
        raise SystemExit(f"kbench: error: --before {rev!r}: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(where)], cwd=ROOT, capture_output=True)
        shutil.rmtree(where, ignore_errors=True)


@contextlib.contextmanager
def twin(tree: Path):
    """The twin of `tree` on a fresh root: yields its pty; stopped at the end."""
    root = Path(tempfile.mkdtemp(prefix="kbench-ab-"))
    process = subprocess.Popen([sys.executable, "-m", "mcu.sim", "--root", str(root), "--exit-on-stdin-eof"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tree)
    try:
        ready, _, _ = select.select([process.stdout], [], [], 120)
        port = process.stdout.readline().decode().strip() if ready else ""
        if not port.startswith("/dev/"):
            raise SystemExit(f"kbench: the twin of {tree} did not start: {process.stderr.read()[-300:]!r}")
        yield port
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(root, ignore_errors=True)


def heads(name: str, tree: Path, walls: dict, facts: dict, round_: int) -> None:
    with twin(tree) as port:
        deploy(port, 115200, say=lambda line: None)
        for seq, dim, causal in HEADS:
            problem = AttentionProblem(seq=seq, dim=dim, causal=causal)
            quantized = prepare(problem, *problem.inputs())  # at the contract's Bc
            start = time.perf_counter()
            with BoardLink(port) as link:
                head = run_head(Session(link, port, name), quantized.params, *quantized.head(0, 0), 1)
            wall = time.perf_counter() - start
            key = (name, f"head {seq}x{dim}{' causal' if causal else ''}")
            walls.setdefault(key, []).append(wall)
            expected = quantized.expected()
            exact = head.out.same_bits(Q15Out(expected.o[0, 0], expected.shift[0, 0]))
            facts[key] = (head.rows, exact, int(head.cycles[0]))
            print(f"kbench: round {round_}: {name} {key[1]}: {wall:.2f} s", file=sys.stderr, flush=True)


def main_job(name: str, tree: Path, walls: dict, facts: dict, round_: int) -> None:
    with tempfile.TemporaryDirectory(prefix="kbench-ab-out-") as out:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "host.compare", "--targets", "mcu", "--sim", "--out", out],
                              cwd=tree, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode:
            raise SystemExit(f"kbench: the main job failed in {tree}: {done.stderr[-400:]}")
        with open(Path(out) / "results.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    key = (name, "main job's MCU rows")
    walls.setdefault(key, []).append(wall)
    facts[key] = (f"{len(rows)} rows", all(r["status"] == "ok" and r["bit_exact"] == "1" for r in rows), "")
    print(f"kbench: round {round_}: {name} main job: {wall:.1f} s", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--before", default=BEFORE, help=f"the commit to compare against (default {BEFORE})")
    parser.add_argument("--main-job", action="store_true", help="also time the main job's MCU rows in each tree")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: allowed 1 or more")
    walls: dict[tuple[str, str], list[float]] = {}
    facts: dict[tuple[str, str], tuple] = {}
    with worktree(args.before) as old:
        trees = {f"before ({args.before})": old, "after (this tree)": ROOT}
        for r in range(args.rounds):
            for name, tree in (trees.items() if r % 2 == 0 else reversed(trees.items())):
                heads(name, tree, walls, facts, r + 1)
                if args.main_job:
                    main_job(name, tree, walls, facts, r + 1)
    before, after = trees
    print("| work | twin | wall (median) | query rows per chunk | all ok / bit-exact | cycles | after / before |")
    print("|---|---|---:|---:|---|---:|---:|")
    for work in dict.fromkeys(key[1] for key in walls):
        base = statistics.median(walls[(before, work)])
        for name in trees:
            median = statistics.median(walls[(name, work)])
            rows, exact, cycles = facts[(name, work)]
            ratio = f"{median / base:.2f}x" if name == after else ""
            print(f"| {work} | {name} | {median:.2f} s | {rows} | {exact} | {cycles} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
