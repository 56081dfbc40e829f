"""The Q15 model's measured error against the float64 golden: the table of docs/q15.md.

    python -m host.q15_error [--seq 16,64,256,1024] [--dim 16,32,64,128] [--bc 16] [--causal 0] [--heads 4]

prints a Markdown table of relative-L2 / max-abs error per (seq, dim) for N(0,1) inputs (seed 1).
"""

from __future__ import annotations

import sys
from typing import Sequence

from host.cli_common import Parser, guard, int_list, integer
from host.problem import LIMITS, AttentionProblem
from host.q15 import BC_MAX, DIM_MAX, SEQ_MAX, run_problem
from host.reference import errors, golden


def error_table(seqs: Sequence[int], dims: Sequence[int], bc: int, causal: bool, heads: int) -> str:
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
    parser = Parser(prog="python -m host.q15_error", description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int_list("seq", 1, SEQ_MAX), default=(16, 64, 256, 1024))
    parser.add_argument("--dim", type=int_list("dim", 1, DIM_MAX), default=(16, 32, 64, 128))
    parser.add_argument("--bc", type=integer("bc", 1, BC_MAX), default=16)
    parser.add_argument("--causal", type=integer("causal", 0, 1), default=0)
    parser.add_argument("--heads", type=integer("heads", *LIMITS["heads"]), default=4)

    def body() -> int:
        args = parser.parse_args(argv)
        print(error_table(args.seq, args.dim, args.bc, bool(args.causal), args.heads))
        return 0

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
