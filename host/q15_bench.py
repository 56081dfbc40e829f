"""Speed of the Q15 arithmetic on this machine: the numpy model and the host-built C kernel on one head, next to
the float32 reference on the same head in the same run (the anchor: ratios, not absolute times, carry over).

    python -m host.q15_bench [--seq 256] [--dim 64] [--bc 1,16,64] [--repeats 5]

Prints a Markdown table (docs/performance.md keeps one with the machine it ran on).
"""

from __future__ import annotations

import sys
import time
from typing import Sequence

import numpy as np

from host.cli_common import Parser, guard, int_list, integer
from host.problem import AttentionProblem
from host.q15 import BC_MAX, DIM_MAX, SEQ_MAX, Q15Params, attention_q15, quantize, score_scale
from host.reference import attention
from host import q15_c


def median_ms(fn, repeats: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return float(np.median(samples))


def bench(seq: int, dim: int, bcs: Sequence[int], repeats: int) -> str:
    problem = AttentionProblem(seq=seq, dim=dim)
    q, k, v = problem.inputs()
    (qq, sq), (kq, sk), (vq, _) = quantize(q), quantize(k), quantize(v)
    qh, kh, vh = qq[0, 0], kq[0, 0], vq[0, 0]  # (N, d) one head
    anchor = median_ms(lambda: attention(q, k, v, False, np.float32, threads=1), repeats)
    lines = [f"float32 reference, one thread (anchor): {anchor:.2f} ms", "",
             "| Bc | numpy model ms | × anchor | C kernel (host, -O2) ms | × anchor |", "|---:|---:|---:|---:|---:|"]
    for bc in bcs:
        params = Q15Params(seq, dim, False, bc, *score_scale(sq, sk, dim))
        model = median_ms(lambda: attention_q15(qh, kh, vh, params), repeats)
        kernel = median_ms(lambda: q15_c.attention_rows(params, qh, kh, vh), repeats)
        lines.append(f"| {bc} | {model:.2f} | {model / anchor:.1f} | {kernel:.2f} | {kernel / anchor:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m host.q15_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=integer("seq", 1, SEQ_MAX), default=256)
    parser.add_argument("--dim", type=integer("dim", 1, DIM_MAX), default=64)
    parser.add_argument("--bc", type=int_list("bc", 1, BC_MAX), default=(1, 16, 64))
    parser.add_argument("--repeats", type=integer("repeats", 1), default=5)

    def body() -> int:
        args = parser.parse_args(argv)
        print(f"seq {args.seq}, dim {args.dim}, one head, not causal")
        print(bench(args.seq, args.dim, args.bc, args.repeats))
        return 0

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
