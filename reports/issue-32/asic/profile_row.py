"""Where an asic row's time goes on a long causal head (reports/issue-32/asic/profile.md): one head of N keys, d 128,
causal, the problem's seeded N(0,1) inputs quantised per tensor, each step timed once, one after another:

- the contract's model (host/q15.py) over all rows at once (Quantized.expected, what codesign/evaluate.py called
  before ff5b62b) and in calls of 128 rows (codesign/evaluate.py expected_output);
- the datapath's bit model (codesign/bits.py) in one pass over all rows with BLAS at its default threads (run_head
  before ff5b62b), in passes of 128 rows (ff5b62b), and in passes of 128 rows on one BLAS thread (run_head since
  839c9bd);

then a cProfile of each of the two as the row now runs them, by internal time.

Run from the repository root: .venv/bin/python reports/issue-32/asic/profile_row.py 8192
"""

import cProfile
import pstats
import sys
import time

from codesign import bits
from codesign.datapath import Datapath
from codesign.evaluate import expected_output
from host import q15
from host.problem import AttentionProblem


def timed(label: str, call) -> None:
    began = time.perf_counter()
    call()
    print(f"{label:<62} {time.perf_counter() - began:7.2f} s", flush=True)


def passes(q, k, v, params, dp, row0, rows: int) -> None:
    """The bit model's passes of `rows` rows without run_head's thread limit (the code of ff5b62b)."""
    for start in range(0, q.shape[0], rows):
        bits._rows(q[start:start + rows], k, v, params, dp, row0 + start)


def profile(label: str, call) -> None:
    run = cProfile.Profile()
    run.enable()
    call()
    run.disable()
    print(f"\n{label}, by internal time:")
    pstats.Stats(run, stream=sys.stdout).sort_stats("tottime").print_stats(4)


def main(seq: int) -> None:
    problem = AttentionProblem(heads=1, seq=seq, dim=128, causal=True, dtype="q15")
    quantized = q15.prepare(problem, *problem.inputs())
    q, k, v = quantized.head(0, 0)
    dp, params, row0 = Datapath(), quantized.params, quantized.row0
    with open("/proc/loadavg") as handle:
        print(f"one head, N {seq}, d 128, causal, {dp.name}; load average {' '.join(handle.read().split()[:3])}")
    timed("model, all rows in one call (Quantized.expected)", quantized.expected)
    timed("model, 128 rows a call (evaluate.expected_output)", lambda: expected_output(quantized))
    timed("bit model, one pass, BLAS threads as numpy starts them", lambda: passes(q, k, v, params, dp, row0, seq))
    timed("bit model, 128 rows a pass, BLAS threads as numpy starts them", lambda: passes(q, k, v, params, dp, row0,
                                                                                          128))
    timed("bit model, 128 rows a pass, one BLAS thread (run_head)", lambda: bits.run_head(q, k, v, params, dp, row0))
    with open("/proc/loadavg") as handle:
        print(f"load average after: {' '.join(handle.read().split()[:3])}")
    profile("expected_output", lambda: expected_output(quantized))
    profile("run_head", lambda: bits.run_head(q, k, v, params, dp, row0))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4096)
