"""Run attention heads through the head engine's RTL (codesign/rtl/head.py) in Amaranth's simulator: load Q, K, V into
its memories, start it, wait for done, read O and the stage counters.

`simulate_head` runs one head; `simulate_heads` runs several heads of one Datapath in one simulation (one elaboration
and one simulator build, sized for the largest head), which is how the tests keep their time down. The outputs are
host/q15.py's at bc = the array's columns when the accumulators hold the sums (acc_bits ≥ bits.exact_width), and
codesign/bits.run_head's at any width; the stage counters are codesign/cycles.py's busy cycles.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from codesign.datapath import Datapath
from codesign.rtl.head import STAGES, HeadEngine
from host.errors import SpecError
from host.q15 import Q15Params

#: Simulated cycles allowed per head beyond the model's busy cycles and hand-offs, before it is declared hung.
HANG_MARGIN = 1000


@dataclass(frozen=True)
class RtlHead:
    """One head through the RTL: int16 output (N, d), busy cycles per stage, total cycles, and the host seconds the
    simulation of this head took (loading, running and reading back)."""

    out: np.ndarray
    stage_cycles: dict[str, int]
    cycles: int
    sim_seconds: float

    @property
    def cycles_per_second(self) -> float:
        """Simulated clock cycles per host second."""
        return self.cycles / self.sim_seconds if self.sim_seconds > 0 else 0.0


Head = tuple[np.ndarray, np.ndarray, np.ndarray, Q15Params]


def _check(head: Head, datapath: Datapath) -> None:
    q, k, v, params = head
    if params.bc != datapath.cols:
        raise SpecError(f"bc={params.bc} differs from the array's width {datapath.cols}; the datapath's key block "
                        "is its columns")
    for name, array in (("q", q), ("k", k), ("v", v)):
        if array.dtype != np.int16 or array.shape != (params.seq, params.dim):
            raise SpecError(f"{name} is {array.dtype} {array.shape}; allowed: int16 ({params.seq}, {params.dim})")


def _hang_limit(datapath: Datapath, params: Q15Params) -> int:
    """An upper bound on a head's cycles: every step at its largest, with slack."""
    R, C, E = datapath.rows, datapath.cols, datapath.exp_lanes
    seq, dim = params.seq, params.dim
    tiles, blocks = -(-seq // R), -(-seq // C)
    folds = -(-dim // C)
    step = (dim + R + C) + folds * (C + R + C) + 3 * (R * (C + dim + 2) // E + 1) + 64 + folds
    divide = (-(-R * dim // datapath.dividers)) * (datapath.div_latency + 1)
    return tiles * (blocks * step + divide) + HANG_MARGIN


def simulate_heads(heads: list[Head], datapath: Datapath) -> list[RtlHead]:
    """Each head (q, k, v: (seq, dim) int16, params with bc = datapath.cols) through one simulated head engine."""
    if not heads:
        return []
    for head in heads:
        _check(head, datapath)
    from amaranth.sim import Simulator  # heavy, and only here

    seq_max = max(head[3].seq for head in heads)
    dim_max = max(head[3].dim for head in heads)
    engine = HeadEngine(datapath, seq_max, dim_max)
    results: list[RtlHead] = []

    async def bench(ctx) -> None:
        for q, k, v, params in heads:
            began = time.perf_counter()
            seq, dim = params.seq, params.dim
            for data, tensor in ((engine.q_data, q), (engine.k_data, k), (engine.v_data, v)):
                for row in range(seq):
                    for col in range(dim):
                        ctx.set(data[row * dim_max + col], int(tensor[row, col]))
            ctx.set(engine.seq, seq)
            ctx.set(engine.dim, dim)
            ctx.set(engine.causal, int(params.causal))
            ctx.set(engine.mult, params.score_mult)
            ctx.set(engine.shift, params.score_shift)
            ctx.set(engine.start, 1)
            await ctx.tick()
            ctx.set(engine.start, 0)
            limit = _hang_limit(datapath, params)
            for _ in range(limit):
                await ctx.tick()
                if ctx.get(engine.done):
                    break
            else:
                raise SpecError(f"the head engine ({datapath.name}, seq {seq}, dim {dim}) did not finish in {limit} "
                                "cycles; allowed: done within the cycle model's bound")
            if ctx.get(engine.fault):
                raise SpecError(f"the softmax unit's pipelines ran out of step ({datapath.name}, seq {seq}, dim "
                                f"{dim}); allowed: every unit's valid_out as its lane issued")
            out = np.array([[ctx.get(engine.o_data[row * dim_max + col]) for col in range(dim)]
                            for row in range(seq)], dtype=np.int16).reshape(seq, dim)
            stages = {name: ctx.get(getattr(engine, f"{name}_cycles")) for name in STAGES}
            results.append(RtlHead(out, stages, ctx.get(engine.cycles), time.perf_counter() - began))

    sim = Simulator(engine)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return results


def simulate_head(q: np.ndarray, k: np.ndarray, v: np.ndarray, params: Q15Params, datapath: Datapath) -> RtlHead:
    """One head (q, k, v: (seq, dim) int16; params.bc = datapath.cols) through the head engine's RTL."""
    return simulate_heads([(q, k, v, params)], datapath)[0]
