"""`python -m codesign bench`: how fast the model is, against anchors in the same run (docs/performance.md).

1. Bit-accurate simulation of one head (default seq 1024, d 64, a 32×32 array, the contract's Bc = 64) beside
   host/q15.py's model of the same head at the same Bc: the ratio datapath / contract model, medians of repeated runs
   (goal ≤ 2 at the contract's 40-bit accumulators), causal and not, and at 30 bits where the accumulators overflow
   (wrapping stays vectorised; saturating re-runs the overflowing results one product at a time, so it is slower).
2. Cycle-only evaluation (codesign/cycles.py, no data): configurations per second over a grid of array shapes,
   dataflows and exponent lanes, causal and not, at that head's shape and at seq 32768 (goal ≥ 10,000 per second),
   beside the rate of bare `gemm()` calls as the anchor (each configuration makes 4–12 of them).

It first prints the machine's load average and a fixed numpy matmul's time (codesign/console.py), so a reader of
the raw output can tell a loaded machine from a slower model.
"""

from __future__ import annotations

import itertools
import statistics
import time

from codesign.bits import run_head
from codesign.console import machine
from codesign.cycles import head_cycles
from codesign.datapath import Datapath, array_shape
from codesign.gemm import gemm
from host import q15
from host.cli_common import Parser, integer
from host.errors import KbenchError
from host.problem import AttentionProblem
from host.timing import time_calls


def _median_seconds(call, repeats: int) -> float:
    """Median wall time of `repeats` calls, in seconds (host/timing.py's timer, no warm-up)."""
    return statistics.median(time_calls(call, warmup=0, iters=repeats)) / 1e3


def bits_speed(seq: int, dim: int, rows: int, cols: int, causal: bool, acc_bits: int, overflow: str,
               repeats: int, bc: int = q15.BC) -> tuple[float, float, bool]:
    """(seconds of the datapath model, seconds of host/q15.py, bit-exact) for one head, medians."""
    problem = AttentionProblem(batch=1, heads=1, seq=seq, dim=dim, causal=causal, dtype="q15", seed=0)
    quantized = q15.prepare(problem, *problem.inputs(), bc)
    head, params = quantized.head(0, 0), quantized.params
    datapath = Datapath(rows=rows, cols=cols, acc_bits=acc_bits, overflow=overflow)
    exact = run_head(*head, params, datapath).out.same_bits(q15.attention_q15(*head, params))
    if acc_bits >= 40 and not exact:
        raise KbenchError("the datapath's output differs from host/q15.py at 40 bits: nothing to time")
    model = _median_seconds(lambda: run_head(*head, params, datapath), repeats)
    contract = _median_seconds(lambda: q15.attention_q15(*head, params), repeats)
    return model, contract, exact


def cycle_speed(seq: int, dim: int) -> tuple[int, float]:
    """(configurations, configurations per second) over a grid of datapaths, causal and not."""
    sides = (8, 16, 32, 64, 128)
    grid = [Datapath(rows=r, cols=c, dataflow=flow, exp_lanes=lanes, k_buffer_kb=256, v_buffer_kb=256,
                     q_buffer_kb=128, o_buffer_kb=512)
            for r, c, flow, lanes in itertools.product(sides, sides, ("os", "ws", "is"), (8, 32))]
    start = time.perf_counter()
    for datapath in grid:
        for causal in (False, True):
            head_cycles(datapath, seq, dim, causal)
    return 2 * len(grid), 2 * len(grid) / (time.perf_counter() - start)


def gemm_speed(dim: int, calls: int = 100_000) -> float:
    """gemm() calls per second: the anchor of the cycle-only rate (a configuration makes 4 to 12 of them)."""
    start = time.perf_counter()
    for i in range(calls):
        gemm(32, 32 + (i & 7), dim, 32, 32, "os")
    return calls / (time.perf_counter() - start)


def main(argv: list[str]) -> int:
    parser = Parser(prog="python -m codesign bench", description=__doc__)
    parser.add_argument("--seq", type=integer("seq", 1, q15.SEQ_MAX), default=1024,
                        help="sequence length of the bit-accurate head (default 1024)")
    parser.add_argument("--dim", type=integer("dim", 1, q15.DIM_MAX), default=64, help="head dimension (default 64)")
    parser.add_argument("--array", type=array_shape, default=(32, 32), help="array RxC (default 32x32)")
    parser.add_argument("--repeats", type=integer("repeats", 1, 1000), default=5,
                        help="timed runs per figure, of which the median is printed (default 5)")
    args = parser.parse_args(argv)
    rows, cols = args.array
    print(machine().line())
    print(f"bit-accurate head, seq {args.seq} d {args.dim} on {rows}x{cols} (Bc {q15.BC}), median of {args.repeats}; "
          "anchor: host/q15.py on the same head")
    print(f"  {'accumulators':<22} {'causal':>6} {'datapath ms':>12} {'host/q15.py ms':>15} {'ratio':>6}  bit-exact")
    for acc_bits, overflow, causal in ((40, "wrap", False), (40, "wrap", True), (30, "wrap", False),
                                       (30, "saturate", False)):
        model, contract, exact = bits_speed(args.seq, args.dim, rows, cols, causal, acc_bits, overflow, args.repeats)
        print(f"  {f'{acc_bits}-bit {overflow}':<22} {'yes' if causal else 'no':>6} {model * 1e3:12.1f} "
              f"{contract * 1e3:15.1f} {model / contract:6.2f}  {'yes' if exact else 'no'}")
    print("cycle-only evaluation (no data), 300 configurations each (arrays 8..128 square and not, os/ws/is, "
          "8 or 32 lanes, causal and not):")
    for seq in dict.fromkeys((args.seq, 32768)):
        configurations, rate = cycle_speed(seq, args.dim)
        print(f"  seq {seq:>6} d {args.dim}: {rate:10,.0f} configurations/s")
    print(f"  anchor: {gemm_speed(args.dim):,.0f} gemm() calls/s")
    return 0


if __name__ == "__main__":  # `python -m codesign.bench` runs `python -m codesign bench`
    from codesign.__main__ import run_as

    run_as("bench")
