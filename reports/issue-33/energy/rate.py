"""The explorer's cycle-free rate on its default space (seq 1024, d 64, 16 heads, not causal): points per second of
everything `explore` does besides the cycle table (energy, area, refusals, bits, columns), by the wall clock as
`Exploration.cycle_free_points_per_s` gives it and by the process's CPU time (steadier on a shared machine).

Run from a checkout's root: python reports/issue-33/energy/rate.py [RUNS]
"""

from __future__ import annotations

import os
import sys
import time

from codesign import explore
from codesign.technology import Technology
from host.problem import AttentionProblem


def main(runs: int) -> int:
    tech = Technology.load()
    space = explore.check_space({}, tech)
    problem = AttentionProblem(heads=16, seq=1024, dim=64, causal=False, dtype="q15")
    table = explore.cycle_table
    cpu = {}

    def timed(*args, **kwargs):  # the cycle table's own CPU time, to leave out
        began = time.process_time()
        out = table(*args, **kwargs)
        cpu["cycle"] = time.process_time() - began
        return out

    explore.cycle_table = timed
    for _ in range(runs):
        began = time.process_time()
        result = explore.explore(problem, space, tech)
        free_cpu = time.process_time() - began - cpu["cycle"]
        print(f"{len(result):,} points: {result.seconds:.2f} s wall ({result.cycle_seconds:.2f} s cycle table); "
              f"cycle-free {result.cycle_free_points_per_s:,.0f} points/s wall, {len(result) / free_cpu:,.0f} "
              f"points/s CPU; load average {os.getloadavg()[0]:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
