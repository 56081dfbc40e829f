"""`python -m codesign bench`: how fast the model is, against anchors in the same run (docs/performance.md).

1. Bit-accurate simulation of one head (default seq 1024, d 64, a 32×32 array) beside host/q15.py's model of the same
   head at the same Bc: the ratio datapath / contract model, medians of repeated runs (goal ≤ 2).
2. Cycle-only evaluation (codesign/cycles.py, no data): configurations per second over a grid of array shapes,
   dataflows and exponent lanes at that head's shape, causal and not (goal ≥ 10,000 per second), beside the rate of
   bare `gemm()` calls as the anchor (each configuration makes 4–12 of them).
"""

from __future__ import annotations

import itertools
import statistics
import time

import numpy as np

from codesign.bits import run_head
from codesign.cycles import head_cycles
from codesign.datapath import Datapath, array_shape
from codesign.gemm import gemm
from host import q15
from host.cli_common import Parser, integer
from host.errors import KbenchError
from host.problem import AttentionProblem


def _median_seconds(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bits_speed(seq: int, dim: int, rows: int, cols: int, repeats: int) -> tuple[float, float]:
    """(seconds of the datapath model, seconds of host/q15.py) for one head, medians, after checking they agree."""
    problem = AttentionProblem(batch=1, heads=1, seq=seq, dim=dim, causal=False, dtype="q15", seed=0)
    quantized = q15.prepare(problem, *problem.inputs(), cols)
    head, params = quantized.head(0, 0), quantized.params
    datapath = Datapath(rows=rows, cols=cols)
    if not np.array_equal(run_head(*head, params, datapath).out, q15.attention_q15(*head, params)):
        raise KbenchError("the datapath's output differs from host/q15.py: nothing to time")
    model = _median_seconds(lambda: run_head(*head, params, datapath), repeats)
    contract = _median_seconds(lambda: q15.attention_q15(*head, params), repeats)
    return model, contract


def cycle_speed(seq: int, dim: int) -> tuple[int, float, float]:
    """(configurations, configurations per second, gemm() calls per second) over a grid of datapaths."""
    sides = (8, 16, 32, 64, 128)
    grid = [Datapath(rows=r, cols=c, dataflow=flow, exp_lanes=lanes, k_buffer_kb=256, v_buffer_kb=256,
                     q_buffer_kb=128, o_buffer_kb=512)
            for r, c, flow, lanes in itertools.product(sides, sides, ("os", "ws", "is"), (8, 32))]
    start = time.perf_counter()
    for datapath in grid:
        for causal in (False, True):
            head_cycles(datapath, seq, dim, causal)
    rate = 2 * len(grid) / (time.perf_counter() - start)
    calls = 100_000
    start = time.perf_counter()
    for i in range(calls):
        gemm(32, 32 + (i & 7), dim, 32, 32, "os")
    return 2 * len(grid), rate, calls / (time.perf_counter() - start)


def main(argv: list[str]) -> int:
    parser = Parser(prog="python -m codesign bench", description=__doc__)
    parser.add_argument("--seq", type=integer("seq", 1, q15.SEQ_MAX), default=1024)
    parser.add_argument("--dim", type=integer("dim", 1, q15.DIM_MAX), default=64)
    parser.add_argument("--array", type=array_shape, default=(32, 32), help="array RxC (default 32x32)")
    parser.add_argument("--repeats", type=integer("repeats", 1, 1000), default=5)
    args = parser.parse_args(argv)
    model, contract = bits_speed(args.seq, args.dim, *args.array, args.repeats)
    print(f"bit-accurate head, seq {args.seq} d {args.dim} on {args.array[0]}x{args.array[1]} (Bc {args.array[1]}), "
          f"median of {args.repeats}:")
    print(f"  datapath model {model * 1e3:9.1f} ms   host/q15.py {contract * 1e3:9.1f} ms   "
          f"ratio {model / contract:.2f} (goal <= 2)")
    configurations, rate, gemm_rate = cycle_speed(args.seq, args.dim)
    print(f"cycle-only evaluation, seq {args.seq} d {args.dim}, {configurations} configurations:")
    print(f"  {rate:,.0f} configurations/s (goal >= 10,000); anchor: {gemm_rate:,.0f} gemm() calls/s")
    return 0
