"""The Q15 model's measured error against the float64 golden: the table of docs/q15.md.

    python -m host.q15_error [--seq 16,64,256,1024] [--dim 16,32,64,128] [--bc 16] [--causal {0,1,both}] [--heads 4]

prints a Markdown table of relative-L2 / max-abs error per (seq, dim) for N(0,1) inputs (seed 1); with
`--causal both`, one table per mask, each under its name.
On stderr, one line per (seq, dim) as it is measured, flushed at once, so a run into a log is never silent:
`kbench: q15_error 3/5 seq 256 d 64 (4.1 s)` (the time since the run began; `causal` added with --causal 1 or both).
Exit status: 0 printed; 2 bad arguments only (one `kbench: error:` line naming the value); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from host.cli_common import Parser, Stages, guard, int_list, integer
from host.problem import LIMITS, AttentionProblem
from host.q15 import BC_MAX, DIM_MAX, SEQ_MAX, run_problem
from host.reference import errors, golden


def error_table(seqs: Sequence[int], dims: Sequence[int], bc: int, causal: bool, heads: int,
                progress: Callable[[AttentionProblem], object] | None = None) -> str:
    """The Markdown table; `progress(problem)` after each (seq, dim) is measured."""
    lines = ["| seq | " + " | ".join(f"d={d}" for d in dims) + " |", "|---|" + "---|" * len(dims)]
    for seq in seqs:
        cells = []
        for dim in dims:
            problem = AttentionProblem(heads=heads, seq=seq, dim=dim, causal=causal, seed=1)
            _, out = run_problem(problem, bc=bc)
            metrics = errors(out, golden(problem))
            cells.append(f"{metrics.rel_l2:.1e} / {metrics.max_abs:.1e}")
            if progress is not None:
                progress(problem)
        lines.append(f"| {seq} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m host.q15_error", doc=__doc__)
    parser.add_argument("--seq", type=int_list("seq", 1, SEQ_MAX), default=(16, 64, 256, 1024), metavar="LIST",
                        help="sequence lengths N, comma-separated (default 16,64,256,1024)")
    parser.add_argument("--dim", type=int_list("dim", 1, DIM_MAX), default=(16, 32, 64, 128), metavar="LIST",
                        help="head dimensions d, comma-separated (default 16,32,64,128)")
    parser.add_argument("--bc", type=integer("bc", 1, BC_MAX), default=16, help="keys per block Bc (default 16)")
    parser.add_argument("--causal", choices=("0", "1", "both"), default="0",
                        help="causal masking; both prints a table for each (default 0)")
    parser.add_argument("--heads", type=integer("heads", *LIMITS["heads"]), default=4, help="heads H (default 4)")
    return parser


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        args = build_parser().parse_args(argv)
        masks = (False, True) if args.causal == "both" else (args.causal == "1",)
        stage, total, done = Stages("q15_error"), len(masks) * len(args.seq) * len(args.dim), []

        def progress(problem: AttentionProblem) -> None:
            done.append(problem)
            stage(f"{len(done)}/{total} seq {problem.seq} d {problem.dim}{' causal' if problem.causal else ''}")

        tables = {causal: error_table(args.seq, args.dim, args.bc, causal, args.heads, progress) for causal in masks}
        if len(tables) == 1:
            print(tables[masks[0]])
        else:
            print("\n\n".join(f"causal {int(causal)}:\n{table}" for causal, table in tables.items()))
        return 0

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
