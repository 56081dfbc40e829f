"""The Q15 model's measured error against the float64 golden: the table of docs/q15.md.

    python -m host.q15_error [--seq 16,64,256,1024] [--dim 16,32,64,128] [--bc 16] [--causal 0] [--heads 4]

prints a Markdown table of relative-L2 / max-abs error per (seq, dim) for N(0,1) inputs (seed 1).
"""

from __future__ import annotations

import argparse
import sys

from host.errors import SpecError
from host.problem import AttentionProblem
from host.q15 import run_problem
from host.reference import errors, golden


def error_table(seqs: list[int], dims: list[int], bc: int, causal: bool, heads: int) -> str:
    lines = ["| seq | " + " | ".join(f"d={d}" for d in dims) + " |", "|---|" + "---|" * len(dims)]
    for seq in seqs:
        cells = []
        for dim in dims:
            problem = AttentionProblem(heads=heads, seq=seq, dim=dim, causal=causal, seed=1)
            _, out = run_problem(problem, bc=bc)
            metrics = errors(out, golden(problem))
            cells.append(f"{metrics.rel_l2:.1e} / {metrics.max_abs:.1e}")
        lines.append(f"| {seq} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ints = lambda text: [int(x) for x in text.split(",")]  # noqa: E731
    parser = argparse.ArgumentParser(prog="python -m host.q15_error", description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=ints, default=[16, 64, 256, 1024])
    parser.add_argument("--dim", type=ints, default=[16, 32, 64, 128])
    parser.add_argument("--bc", type=int, default=16)
    parser.add_argument("--causal", type=int, choices=(0, 1), default=0)
    parser.add_argument("--heads", type=int, default=4)
    args = parser.parse_args(argv)
    try:
        print(error_table(args.seq, args.dim, args.bc, bool(args.causal), args.heads))
    except SpecError as exc:
        print(f"kbench: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
