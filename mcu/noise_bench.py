"""One head's link under a noisy line: throughput and wall time at several byte error rates, on the twin.

    python -m mcu.noise_bench [--seq 64] [--dim 16] [--rates 0,0.001,0.003,0.006,0.01] [--seed 1]

For each rate p (the sum of the twin's drop and flip probabilities per byte, split evenly: drop = flip = p/2) it
starts a twin with those faults (`--faults drop=...,flip=...,seed=S`), deploys, opens the link and runs one seeded head
(not causal, one repeat) through mcu.head.run_head, as a row of `host.compare --targets mcu --sim` does. It prints a
Markdown table: the head's wall time from the link's open (HELLO included) to its last READ, the tensor bytes moved
(K, V^T and Q by LOAD, O by READ) per second of that time, the chunk the link ended at and the smallest it used,
the retries and corrupted frames, and whether the output equals host/q15.py bit for bit (a mismatch ends the run
with a TargetError).

Exit status: 0 measured and checked; 1 a check, the link or the twin failed (one `kbench:` line); 2 bad arguments.
"""

from __future__ import annotations

import sys
import time
from typing import Sequence

from host.cli_common import Parser, Stages, guard, integer
from host.errors import SpecError, TargetError
from host.problem import AttentionProblem
from host.q15 import BC, DIM_MAX, Q15Out, prepare

HEAD_BC = BC  # the contract's key block, as every target runs a problem


def _rates(text: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise SpecError(f"--rates {text!r} is not a list of numbers") from None
    bad = [r for r in rates if not 0.0 <= r <= 1.0]
    if bad:
        raise SpecError(f"--rates {bad[0]} is out of range; allowed: 0..1 per byte (drop + flip)")
    return rates


def measure(seq: int, dim: int, rate: float, seed: int) -> dict:
    """One head over a twin whose line drops and flips each byte with probability rate/2."""
    from mcu.deploy import deploy
    from mcu.head import Session, run_head
    from mcu.link import BoardLink
    from mcu.twin_process import start_twin

    problem = AttentionProblem(seq=seq, dim=dim)
    q, k, v = problem.inputs()
    quantized = prepare(problem, q, k, v, HEAD_BC)
    faults = f"drop={rate / 2:g},flip={rate / 2:g},seed={seed}" if rate else ""
    with start_twin(faults) as twin:
        deploy(twin.port, 115200, say=lambda line: None)
        link = BoardLink(twin.port)
        start = time.perf_counter()
        try:
            link.open()
            head = run_head(Session(link, twin.port, "bench", twin=twin), quantized.params, *quantized.head(0, 0),
                            repeats=1)
            wall = time.perf_counter() - start
        finally:
            link.close()
    expected = quantized.expected()
    if not head.out.same_bits(Q15Out(expected.o[0, 0], expected.shift[0, 0])):
        raise TargetError(f"rate {rate}: the head differs from host/q15.py", status="wrong")
    payload = 4 * 2 * seq * dim  # K, V^T, Q loaded; O read
    return {"rate": rate, "faults": faults or "none", "wall": wall, "bps": payload / wall, "payload": payload,
            "chunk": link.chunks.size, "smallest": link.chunks.smallest, "retries": link.stats.retries,
            "rejected": link.stats.rejected, "restarts": link.stats.restarts, "sessions": len(head.sessions)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog="python -m mcu.noise_bench", doc=__doc__)
    parser.add_argument("--seq", type=integer("seq", 1, 4096), default=64, help="sequence length (default 64)")
    parser.add_argument("--dim", type=integer("dim", 1, DIM_MAX), default=16, help="head dimension (default 16)")
    parser.add_argument("--rates", default="0,0.001,0.003,0.006,0.01",
                        help="byte error rates, drop + flip (default 0,0.001,0.003,0.006,0.01)")
    parser.add_argument("--seed", type=integer("seed", 0, 2**31), default=1, help="the faults' seed (default 1)")

    def body() -> int:
        args = parser.parse_args(argv)
        rates = _rates(args.rates)
        stage = Stages("noise_bench")
        rows = []
        for rate in rates:
            stage(f"rate {rate:g}")
            rows.append(measure(args.seq, args.dim, rate, args.seed))
        print(f"head seq {args.seq}, dim {args.dim}, one repeat; payload {rows[0]['payload']} tensor bytes "
              "(K, V^T, Q by LOAD; O by READ)\n")
        print("| byte error rate (drop + flip) | --faults | wall (open to last READ) | payload throughput | "
              "chunk at end / smallest | retries | corrupted frames | session restarts | bit-exact |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['rate']:g} | {r['faults']} | {r['wall']:.2f} s | {r['bps']:.0f} B/s | {r['chunk']} / "
                  f"{r['smallest']} B | {r['retries']} | {r['rejected']} | {r['restarts']} | yes |")
        return 0

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
