"""Run attention heads through the head engine's RTL (codesign/rtl/head.py) in Amaranth's simulator: load Q, K, V into
its memories, start it, wait for done, read O and the stage counters.

`simulate_head` runs one head; `simulate_heads` runs several heads of one Datapath in one simulation (one elaboration
and one simulator build, sized for the largest head), which is how the tests keep their time down. The outputs
(host.q15.Q15Out: values and row shifts) are host/q15.py's when the accumulators hold the sums (acc_bits ≥
bits.exact_width), and codesign/bits.run_head's at any width; the stage counters are codesign/cycles.py's busy cycles,
and a head's total is `model_cycles`: codesign/cycles.py's cycles for the head (its serial schedule's windows,
codesign/serial_windows.py) less the DRAM prologue and epilogue, which the engine has not (its memories are loaded
before `start` and read after `done`); `schedule_cycles` walks the same windows one by one, a check on both.
The RTL's key block is its array's width: heads whose params.bc is not datapath.cols are refused (the bit model
takes any Bc on any array; docs/codesign.md "Key block and array width").
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from codesign.cycles import HeadCycles, head_cycles, step_cycles
from codesign.datapath import Datapath
from codesign.gemm import gemm
from codesign.rtl.head import HeadEngine
from codesign.rtl.stage_counters import STAGES
from host.errors import SpecError, TargetError
from host.q15 import Q15Out, Q15Params

#: Simulated cycles allowed per head beyond the model's busy cycles and hand-offs, before it is declared hung.
HANG_MARGIN = 1000
#: DRAM bytes per cycle at which model_cycles holds the model: the Datapath's largest.
DRAM_NEVER_STALLS = 65536
#: Simulated cycles between two calls of simulate_heads' `progress`.
PROGRESS_CYCLES = 1000
#: Cycles a head takes in simulation beyond its `cycles` (the sum of the stages' busy cycles): the one in which the
#: bench sees the engine's done. simulate_heads' progress counts them: a head's total is cycles + DONE_TICKS.
DONE_TICKS = 1
#: Host CPU µs per simulated cycle, by what Amaranth's simulator evaluates (it evaluates only what changes, so a unit
#: costs while it is busy): every cycle, each of the R·d output accumulators ("accumulator"); each cycle the array is
#: busy, each of its R·C cells ("cell"); each cycle the softmax unit is busy, each of its E lanes ("lane") and each
#: lane's read of the R·C scores ("lane_score", E·R·C); each cycle the divider bank is busy, each divider's read of
#: the R·d accumulators ("divider_read", D·R·d). Fitted by least squares (relative) to 22 heads of 2×2 to 16×16
#: arrays, E 1..32, D 1..64, d 3..64 on the development VM (reports/issue-33/rtl/sim_speed.txt; docs/performance.md).
CYCLE_US = {"accumulator": 2.95, "cell": 21.6, "lane": 370.0, "lane_score": 3.25, "divider_read": 1.06}
#: Host CPU seconds to elaborate the engine and build the simulator: base, per lane, per divider, per array cell.
BUILD_S = {"base": 0.09, "lane": 0.10, "divider": 0.048, "cell": 0.016}
#: estimate_seconds' band either way: on those heads, a head's seconds with it left out of the fit were within ±29 %,
#: and the totals with the build within −25 to +22 % of the fit to all of them.
ESTIMATE_ERROR = 0.3


def estimate_seconds(datapath: Datapath, seq: int, dim: int, causal: bool, heads: int = 1) -> float:
    """Roughly how long Amaranth's simulator takes to build the head engine and run `heads` heads of (seq, dim, causal)
    on it (an idle 2-core VM's seconds; a loaded machine takes longer): what `run --rtl` prints before it starts.
    From the model's cycles for each head and its stages' busy cycles (`model_cycles`)."""
    R, C, E, D = datapath.rows, datapath.cols, datapath.exp_lanes, datapath.dividers
    total, head = model_cycles(datapath, seq, dim, causal)
    busy = {name: stage.busy_cycles for name, stage in head.stages.items()}
    us = (total * CYCLE_US["accumulator"] * R * dim + busy["array"] * CYCLE_US["cell"] * R * C
          + busy["softmax"] * E * (CYCLE_US["lane"] + CYCLE_US["lane_score"] * R * C)
          + busy["divider"] * CYCLE_US["divider_read"] * D * R * dim)
    build = BUILD_S["base"] + BUILD_S["lane"] * E + BUILD_S["divider"] * D + BUILD_S["cell"] * R * C
    return build + heads * us * 1e-6


def schedule(datapath: Datapath, seq: int, dim: int, causal: bool) -> tuple[int, int]:
    """(the head engine's cycles for one head, start to the last wave's done, what its `cycles` counter counts; the
    cycles it held for the divider bank),
    walked window by window (codesign/serial_windows.py has the schedule and its closed form, which
    codesign/cycles.py's serial schedule uses): the first QKᵀ; per step s a window of max(pv_{s−1} + qk_{s+1},
    max(me_s, pv_{s−1}) + rs_s); the last P·V; the divider bank taking each tile at the end of the window of its
    last P·V, once it has finished the tile before (the controller holds until then), and the last tile's
    divisions."""
    R, C = datapath.rows, datapath.cols
    steps = []  # (tile's row0, rows, keys, first block)
    for row0 in range(0, seq, R):
        rows = min(R, seq - row0)
        key_end = min(seq, row0 + rows) if causal else seq
        steps += [(row0, rows, min(C, seq - key0), key0 == 0) for key0 in range(0, key_end, C)]
    kinds = {}  # (rows, keys) -> (qk, pv, me, rs): a head has few kinds of step
    for _, rows, keys, _ in steps:
        if (rows, keys) not in kinds:
            me = step_cycles(datapath, rows, keys, dim, True, False)[1]
            kinds[rows, keys] = (gemm(rows, keys, dim, R, C, datapath.dataflow).cycles,
                                 gemm(rows, dim, keys, R, C, datapath.dataflow).cycles, me,
                                 step_cycles(datapath, rows, keys, dim, False, False)[1] - me)
    qk, pv, me, rs = ([kinds[rows, keys][n] for _, rows, keys, _ in steps] for n in range(4))
    rs = [0 if first else rescale for (*_, first), rescale in zip(steps, rs)]
    divide = {rows: head_cycles(datapath, R, dim, False, C, queries=rows).stages["divider"].busy_cycles
              for rows in {rows for _, rows, _, _ in steps}}
    time, bank_free, held = qk[0], 0, 0
    for s in range(len(steps) + 1):  # window s; the last has only the last step's P·V
        pv_before = pv[s - 1] if s > 0 else 0
        qk_after = qk[s + 1] if s + 1 < len(steps) else 0
        softmax = max(me[s], pv_before if rs[s] else 0) + rs[s] if s < len(steps) else 0
        time += max(pv_before + qk_after, softmax)
        if s > 0 and (s == len(steps) or steps[s][0] != steps[s - 1][0]):  # the window ran a tile's last P·V
            held += max(0, bank_free - time)
            time = max(time, bank_free)
            bank_free = time + divide[steps[s - 1][1]]
    return bank_free, held


def schedule_cycles(datapath: Datapath, seq: int, dim: int, causal: bool) -> int:
    """The head engine's cycles for one head, walked window by window (`schedule`)."""
    return schedule(datapath, seq, dim, causal)[0]


def model_cycles(datapath: Datapath, seq: int, dim: int, causal: bool) -> tuple[int, HeadCycles]:
    """(codesign/cycles.py's cycles for the head less its DRAM prologue and epilogue; the model's head) at a DRAM
    interface that never stalls the head in between (the engine has Q, K and V on chip at `start` and leaves O there:
    it has no DRAM). This is what the engine's counter must equal."""
    fast = dataclasses.replace(datapath, dram_bytes_per_cycle=DRAM_NEVER_STALLS)
    head = head_cycles(fast, seq, dim, causal, datapath.cols)
    if head.stall_cycles != head.prologue + head.epilogue:
        raise SpecError(f"the model stalls a head of seq {seq}, dim {dim} on {datapath.name} between its prologue "
                        "and epilogue even at the fastest DRAM (a buffer too small to double-buffer); the RTL's "
                        "memories hold the whole head")
    return head.cycles - head.prologue - head.epilogue, head


@dataclass(frozen=True)
class RtlHead:
    """One head through the RTL: its output (values (N, d) int16, row shifts (N,) uint8), busy cycles per stage,
    total cycles, and the host seconds the simulation of this head took (loading, running and reading back)."""

    out: Q15Out
    stage_cycles: dict[str, int]
    cycles: int
    sim_seconds: float

    @property
    def cycles_per_second(self) -> float:
        """Simulated clock cycles per host second."""
        return self.cycles / self.sim_seconds if self.sim_seconds > 0 else 0.0


Head = tuple[np.ndarray, np.ndarray, np.ndarray, Q15Params]


def _check(head: Head, datapath: Datapath) -> None:
    if not isinstance(datapath, Datapath):
        raise SpecError(f"datapath is {type(datapath).__name__}; allowed: a codesign.datapath.Datapath")
    if not isinstance(head, tuple) or len(head) != 4:
        raise SpecError(f"a head is {type(head).__name__}; allowed: a tuple (q, k, v, params)")
    q, k, v, params = head
    if not isinstance(params, Q15Params):
        raise SpecError(f"params is {type(params).__name__}; allowed: a host.q15.Q15Params")
    if params.bc != datapath.cols:
        raise SpecError(f"bc={params.bc} differs from the array's width {datapath.cols}; allowed: bc={datapath.cols} "
                        "(the RTL folds no key block over its columns; codesign/bits.py takes any)")
    for name, array in (("q", q), ("k", k), ("v", v)):
        if not isinstance(array, np.ndarray):
            raise SpecError(f"{name} is {type(array).__name__}; allowed: an int16 numpy array ({params.seq}, "
                            f"{params.dim})")
        if array.dtype != np.int16 or array.shape != (params.seq, params.dim):
            raise SpecError(f"{name} is {array.dtype} {array.shape}; allowed: int16 ({params.seq}, {params.dim})")


def check_heads(heads: list[Head], datapath: Datapath) -> None:
    """SpecError naming the first bad head or datapath of `heads` (before anything is built)."""
    for head in heads:
        _check(head, datapath)


def hang_limit(datapath: Datapath, params: Q15Params) -> int:
    """An upper bound on a head's cycles: every step at its largest, with slack."""
    R, C, E = datapath.rows, datapath.cols, datapath.exp_lanes
    seq, dim = params.seq, params.dim
    tiles, blocks = -(-seq // R), -(-seq // C)
    folds = -(-dim // C)
    step = (dim + R + C) + folds * (C + R + C) + 3 * (R * (C + dim + 2) // E + 1) + 64 + folds
    divide = dim + 1 + (-(-R * dim // datapath.dividers)) * (datapath.div_latency + 1)  # the peak pass, the waves
    return tiles * (blocks * step + divide) + HANG_MARGIN


def simulate_heads(heads: list[Head], datapath: Datapath,
                   progress: Callable[[int], object] | None = None) -> list[RtlHead]:
    """Each head (q, k, v: (seq, dim) int16, params with bc = datapath.cols) through one simulated head engine;
    `progress(cycles)` is called with the cycles simulated since its last call, every PROGRESS_CYCLES and at each
    head's end (a head's calls add up to its cycles + DONE_TICKS). SpecError for bad heads (before anything is
    built); TargetError when the RTL hangs or faults."""
    if not heads:
        return []
    check_heads(heads, datapath)
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
            limit = hang_limit(datapath, params)
            for ticks in range(1, limit + 1):
                await ctx.tick()
                if progress is not None and ticks % PROGRESS_CYCLES == 0:
                    progress(PROGRESS_CYCLES)
                if ctx.get(engine.done):
                    break
            else:
                raise TargetError(f"the head engine ({datapath.name}, seq {seq}, dim {dim}) did not finish in {limit} "
                                  "cycles, the cycle model's bound", status="hang")
            if progress is not None:
                progress(ticks % PROGRESS_CYCLES)
            if ctx.get(engine.fault):
                raise TargetError(f"the softmax unit's pipelines ran out of step ({datapath.name}, seq {seq}, dim "
                                  f"{dim}): a unit's valid_out did not come as its lane issued", status="fault")
            values = np.array([[ctx.get(engine.o_data[row * dim_max + col]) for col in range(dim)]
                               for row in range(seq)], dtype=np.int16).reshape(seq, dim)
            shifts = np.array([ctx.get(engine.shift_data[row]) for row in range(seq)], dtype=np.uint8)
            out = Q15Out(values, shifts)
            stages = {name: ctx.get(getattr(engine, f"{name}_cycles")) for name in STAGES}
            results.append(RtlHead(out, stages, ctx.get(engine.cycles), time.perf_counter() - began))

    sim = Simulator(engine)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return results


def simulate_head(q: np.ndarray, k: np.ndarray, v: np.ndarray, params: Q15Params, datapath: Datapath) -> RtlHead:
    """One head (q, k, v: (seq, dim) int16; params.bc = datapath.cols) through the head engine's RTL (SpecError for
    bad arguments, TargetError when the RTL hangs or faults)."""
    return simulate_heads([(q, k, v, params)], datapath)[0]
