"""One attention problem on one datapath: its bits (every head through codesign/bits.py), judged against the
contract's model at the contract's Bc (host.q15.BC, whatever the array's shape) and against the float64 golden, and
its cycles and traffic (codesign/cycles.py; heads run one after another on the one datapath). Used by the asic target
and by `python -m codesign run`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from codesign.bits import run_head
from codesign.cycles import HeadCycles, head_cycles
from codesign.datapath import Datapath
from host import q15
from host.problem import AttentionProblem
from host.target_api import Inputs
from host.verdict import Verdict, check_q15


@dataclass(frozen=True)
class Evaluation:
    """The datapath's output (values (B, H, N, d) int16, row shifts (B, H, N) uint8), its verdict, one head's cycle
    model and the whole problem's cycles, and what the arithmetic went through (rescales, accumulator overflows)."""

    datapath: Datapath
    problem: AttentionProblem
    out: q15.Q15Out
    verdict: Verdict
    head: HeadCycles
    rescales: int
    overflows: int
    quantized: q15.Quantized  # the int16 inputs and parameters every head ran with

    @property
    def heads(self) -> int:
        return self.problem.batch * self.problem.heads

    @property
    def cycles(self) -> int:
        return self.head.cycles * self.heads

    @property
    def latency_s(self) -> float:
        return self.cycles / self.datapath.clock_hz

    @property
    def dram_bytes(self) -> int:
        t = self.head.traffic
        per_head = t["dram_read_q_bytes"] + t["dram_read_k_bytes"] + t["dram_read_v_bytes"] + t["dram_write_o_bytes"]
        return per_head * self.heads


def evaluate(problem: AttentionProblem, inputs: Inputs, datapath: Datapath,
             progress: Callable[[], object] | None = None, bc: int = q15.BC) -> Evaluation:
    """Quantise the inputs per tensor (the contract's step 1), run every head on the datapath in key blocks of `bc`
    (the contract's unless a tool studies another), judge the output; `progress` is called after each head."""
    head = head_cycles(datapath, problem.seq, problem.dim, problem.causal, bc)  # refuses buffers too small, first
    quantized = q15.prepare(problem, inputs.q, inputs.k, inputs.v, bc)
    out = q15.Q15Out(np.empty(problem.shape, dtype=np.int16),  # (B, H, N, d) values
                     np.empty(problem.shape[:-1], dtype=np.uint8))  # (B, H, N) row shifts
    rescales = overflows = 0
    for b in range(problem.batch):
        for h in range(problem.heads):
            bits = run_head(*quantized.head(b, h), quantized.params, datapath)
            out.o[b, h], out.shift[b, h] = bits.out
            rescales += bits.rescales
            overflows += bits.overflows
            if progress is not None:
                progress()
    verdict = check_q15(out, quantized.expected(), quantized.dequantize(out), inputs.golden,
                        q15.error_bound(inputs.q, inputs.k, inputs.v, quantized))
    return Evaluation(datapath, problem, out, verdict, head, rescales, overflows, quantized)
