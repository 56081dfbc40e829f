"""Speed of the Q15 arithmetic on this machine: the numpy model and the host-built C kernel on one head, next to
the float32 reference on the same head in the same run (the anchor: ratios, not absolute times, carry over).

    python -m mcu.q15_bench [--seq 256] [--dim 64] [--bc 1,16,64] [--repeats 5]

Prints a Markdown table (docs/performance.md keeps one with the machine it ran on).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from host.errors import SpecError
from host.problem import AttentionProblem
from host.q15 import Q15Params, attention_q15, quantize, score_scale
from host.reference import attention
from mcu import hostlib


def median_ms(fn, repeats: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return float(np.median(samples))


def bench(seq: int, dim: int, bcs: list[int], repeats: int) -> str:
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
        kernel = median_ms(lambda: hostlib.attention_rows(params, qh, kh, vh), repeats)
        lines.append(f"| {bc} | {model:.2f} | {model / anchor:.1f} | {kernel:.2f} | {kernel / anchor:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ints = lambda text: [int(x) for x in text.split(",")]  # noqa: E731
    parser = argparse.ArgumentParser(prog="python -m mcu.q15_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--bc", type=ints, default=[1, 16, 64])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    try:
        print(f"seq {args.seq}, dim {args.dim}, one head, not causal")
        print(bench(args.seq, args.dim, args.bc, args.repeats))
    except SpecError as exc:
        print(f"kbench: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
