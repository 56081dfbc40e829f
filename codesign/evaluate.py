"""One attention problem on one datapath: its bits (every head through codesign/bits.py), judged against the
contract's model at the contract's Bc (host.q15.BC, whatever the array's shape) and against the float64 golden, and
its cycles and traffic (codesign/groups.py `problem_cycles`; heads run one after another on the one datapath, the
query heads of a K/V head together). A decode or chunked problem's q_len queries are the contract's rows
seq − q_len .. seq − 1 (host.q15.Quantized.row0); query head h reads K/V head h // G. Used by the asic target and by
`python -m codesign run`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from codesign.bits import run_head
from codesign.cycles import HeadCycles
from codesign.groups import ProblemCycles, problem_cycles
from codesign.datapath import Datapath
from host import q15
from host.problem import AttentionProblem
from host.target_api import Inputs
from host.verdict import Verdict, check_q15


@dataclass(frozen=True)
class Evaluation:
    """The datapath's output (values (B, H, q_len, d) int16, row shifts (B, H, q_len) uint8), its verdict, the
    problem's cycle model (`model`; `head` is a group's first head, the one that loads its K/V head) and what the
    arithmetic went through (rescales, accumulator overflows)."""

    datapath: Datapath
    problem: AttentionProblem
    out: q15.Q15Out
    verdict: Verdict
    model: ProblemCycles
    rescales: int
    overflows: int
    quantized: q15.Quantized  # the int16 inputs and parameters every head ran with

    @property
    def head(self) -> HeadCycles:
        return self.model.first

    @property
    def heads(self) -> int:
        return self.problem.batch * self.problem.heads

    @property
    def cycles(self) -> int:
        return self.model.cycles

    @property
    def latency_s(self) -> float:
        return self.cycles / self.datapath.clock_hz

    @property
    def dram_bytes(self) -> int:
        return self.model.dram_bytes


#: Query rows per call of the contract's model in `expected_output`.
MODEL_ROWS = 128


def expected_output(quantized: q15.Quantized, rows: int = MODEL_ROWS) -> q15.Q15Out:
    """The contract's output for every head (host.q15.Quantized.expected's values and shifts), from host/q15.py's
    attention_q15 called on `rows` query rows at a time: a row's output depends on its own query and keys only, so
    the chunks give the same bits, and a causal chunk takes only the keys up to its last row (the model walks every
    key block up to the rows' last key for all of its rows), which halves a causal prefill head's model time."""
    q, params, row0 = quantized.q, quantized.params, quantized.row0
    out = q15.Q15Out(np.empty(q.shape, dtype=np.int16), np.empty(q.shape[:-1], dtype=np.uint8))
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            qh, kh, vh = quantized.head(b, h)
            for start in range(0, qh.shape[0], rows):
                part = slice(start, start + rows)
                out.o[b, h, part], out.shift[b, h, part] = q15.attention_q15(qh[part], kh, vh, params, row0 + start)
    return out


def evaluate(problem: AttentionProblem, inputs: Inputs, datapath: Datapath,
             progress: Callable[[], object] | None = None, bc: int = q15.BC) -> Evaluation:
    """Quantise the inputs per tensor (the contract's step 1), run every head on the datapath in key blocks of `bc`
    (the contract's unless a tool studies another), judge the output; `progress` is called after each head."""
    model = problem_cycles(datapath, problem.seq, problem.dim, problem.causal, bc, problem.queries, problem.heads,
                           problem.kv_head_count, problem.batch)  # refuses buffers too small, first
    quantized = q15.prepare(problem, inputs.q, inputs.k, inputs.v, bc)
    out = q15.Q15Out(np.empty(problem.shape, dtype=np.int16),  # (B, H, q_len, d) values
                     np.empty(problem.shape[:-1], dtype=np.uint8))  # (B, H, q_len) row shifts
    rescales = overflows = 0
    for b in range(problem.batch):
        for h in range(problem.heads):
            bits = run_head(*quantized.head(b, h), quantized.params, datapath, quantized.row0)
            out.o[b, h], out.shift[b, h] = bits.out
            rescales += bits.rescales
            overflows += bits.overflows
            if progress is not None:
                progress()
    verdict = check_q15(out, expected_output(quantized), quantized.dequantize(out), inputs.golden,
                        q15.error_bound(inputs.q, inputs.k, inputs.v, quantized))
    return Evaluation(datapath, problem, out, verdict, model, rescales, overflows, quantized)


def mapping_note(model: ProblemCycles) -> str:
    """How the problem's shape sits on the datapath, for a row's message and `codesign run`: the query rows (the
    array's M) against the array when they are fewer than a tile, where a group's K/V head comes from, and the
    mapper's mapping (codesign/mapping.py `ProblemCycles.describe`) on a datapath with more than one array or the
    overlap schedule. '' for a self-attention head with a K/V head of its own and at least a tile of rows on one
    array under the serial schedule (its one mapping: query tile R, heads one after another)."""
    head, dp = model.first, model.first.datapath
    parts = []
    q = head.queries
    if q < max(dp.rows, dp.cols) and q < head.seq:
        if dp.dataflow == "os":
            where = f"on {min(q, dp.rows)} of the array's {dp.rows} rows (output-stationary: M on the rows)"
        elif dp.dataflow == "is":
            where = f"on {min(q, dp.cols)} of the array's {dp.cols} columns (input-stationary: M on the columns)"
        else:
            where = (f"streamed past the stationary weights (weight-stationary: {q} cycle(s) per fold against "
                     f"{2 * dp.rows + dp.cols - 2} of fill and drain)")
        split = model.mapping.split  # arrays sharing a head's query rows: each runs a chunk of them
        rows = f"M = q_len = {q} query row(s)" if split == 1 else (
            f"M = {q} query row(s) per array (a head's rows split over {split} arrays)")
        parts.append(f"{rows} {where}")
    if model.group > 1:
        kv_bytes = 2 * head.seq * head.dim * 2  # K and V of one K/V head, Q15 words
        if model.kv_shared:
            parts.append(f"each K/V head read from DRAM once for its {model.group} query heads (K and V, "
                         f"{kv_bytes:,} B, stay in the K/V buffers)")
        else:
            parts.append(f"each of a K/V head's {model.group} query heads reads it again (K and V, {kv_bytes:,} B, "
                         f"exceed the {min(dp.k_buffer_kb, dp.v_buffer_kb):g} KB K/V buffers)")
    if dp.schedule != "serial" or dp.arrays > 1:
        parts.append(f"the mapper chose: {model.describe()}")
    return "; ".join(parts)
