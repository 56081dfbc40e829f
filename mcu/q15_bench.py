"""Speed of the Q15 arithmetic on this machine: the numpy model and the host-built C kernel on one head, next to
the float32 reference on the same head in the same run (the anchor: ratios, not absolute times, carry over).

    python -m mcu.q15_bench [--seq 256] [--dim 64] [--bc 1,16,64] [--repeats 5]

Prints a Markdown table (docs/performance.md keeps one with the machine it ran on). Before timing a key block, it
checks that the C kernel's output equals the model's bit for bit, and both are within the contract's error bound of
the float64 golden (host/verdict.check_q15); a mismatch ends the run with a one-line TargetError naming the element.
On stderr, a line as each step begins (`kbench: q15_bench Bc 16 (2/3): timing the C kernel (4.1 s)`, the time since
the run began), flushed at once, so a run into a log is never silent.
Exit status: 0 timed and checked; 1 the C kernel differs from the model or misses the bound (or cannot be built);
2 bad arguments only (one `kbench: error:` line naming the value); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from typing import Callable, Sequence

import numpy as np

from mcu import q15_c
from host.cli_common import Parser, Stages, guard, int_list, integer
from host.errors import TargetError
from host.problem import AttentionProblem
from host.q15 import BC_MAX, DIM_MAX, SEQ_MAX, Q15Out, attention_q15, error_bound, prepare
from host.reference import attention, golden
from host.verdict import check_q15


def median_ms(fn, repeats: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return float(np.median(samples))


def check_kernel(problem: AttentionProblem, bc: int) -> None:
    """The C kernel against the model (bit for bit) and the golden (the contract's bound) on the problem's one head;
    TargetError with the verdict's message when it fails."""
    q, k, v = problem.inputs()
    quantized = prepare(problem, q, k, v, bc)
    expected = quantized.expected()  # values (1, 1, N, d), shifts (1, 1, N)
    head = q15_c.attention_rows(quantized.params, *quantized.head(0, 0))
    out = Q15Out(head.o[None, None], head.shift[None, None])
    verdict = check_q15(out, expected, quantized.dequantize(out), golden(problem), error_bound(q, k, v, quantized))
    if not verdict.passed:
        raise TargetError(f"host C kernel, seq {problem.seq}, dim {problem.dim}, Bc {bc}: {verdict.message}",
                          status=verdict.status)


def bench(seq: int, dim: int, bcs: Sequence[int], repeats: int,
          stage: Callable[[str], object] = lambda text: None) -> str:
    """The table; `stage(text)` as each step begins (the anchor, and per Bc: the check, the model, the kernel)."""
    problem = AttentionProblem(seq=seq, dim=dim)  # one head, not causal
    q, k, v = problem.inputs()
    stage(f"seq {seq} dim {dim}: timing the float32 reference (the anchor)")
    anchor = median_ms(lambda: attention(q, k, v, False, np.float32, threads=1), repeats)
    lines = [f"float32 reference, one thread (anchor): {anchor:.2f} ms", "",
             "| Bc | numpy model ms | × anchor | C kernel (host, -O2) ms | × anchor |", "|---:|---:|---:|---:|---:|"]
    for number, bc in enumerate(bcs, 1):
        where = f"Bc {bc} ({number}/{len(bcs)})"
        stage(f"{where}: checking the C kernel against the model and the golden")
        check_kernel(problem, bc)
        quantized = prepare(problem, q, k, v, bc)
        params = quantized.params
        qh, kh, vh = quantized.head(0, 0)  # (N, d) int16
        stage(f"{where}: timing the numpy model")
        model = median_ms(partial(attention_q15, qh, kh, vh, params), repeats)
        stage(f"{where}: timing the C kernel")
        kernel = median_ms(partial(q15_c.attention_rows, params, qh, kh, vh), repeats)
        lines.append(f"| {bc} | {model:.2f} | {model / anchor:.1f} | {kernel:.2f} | {kernel / anchor:.1f} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m mcu.q15_bench", doc=__doc__)
    parser.add_argument("--seq", type=integer("seq", 1, SEQ_MAX), default=256,
                        help="sequence length N of the one head (default 256)")
    parser.add_argument("--dim", type=integer("dim", 1, DIM_MAX), default=64,
                        help="head dimension d (default 64)")
    parser.add_argument("--bc", type=int_list("bc", 1, BC_MAX), default=(1, 16, 64), metavar="LIST",
                        help="key blocks Bc to time, comma-separated (default 1,16,64)")
    parser.add_argument("--repeats", type=integer("repeats", 1), default=5,
                        help="timed calls per figure after one untimed call; the median is shown (default 5)")
    return parser


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        args = build_parser().parse_args(argv)
        table = bench(args.seq, args.dim, args.bc, args.repeats, Stages("q15_bench"))
        print(f"seq {args.seq}, dim {args.dim}, one head, not causal; C kernel bit-exact with the model at every Bc")
        print(table)
        return 0

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
