"""A head's cycles on the datapath model counted the slow way, for tests/codesign: every (query tile, key block)
step walked in turn with codesign.gemm's per-GEMM figures and the softmax unit's per-step formula, to hold
codesign.cycles' closed forms to (square heads and the last `queries` rows of a decode head alike)."""

from __future__ import annotations

import math

from codesign.datapath import EXP_LATENCY, RESCALE_LATENCY, SCORE_LATENCY, Datapath
from codesign.gemm import gemm


def walk_steps(dp: Datapath, seq: int, dim: int, causal: bool, bc: int, queries: int | None = None) -> dict:
    """The array's and the softmax unit's busy cycles, MACs and SRAM reads of Q and V, walking every (tile, block)
    step of the head's last `queries` rows (all seq rows by default; row0 = seq − queries)."""
    queries = seq if queries is None else queries
    row0 = seq - queries
    array = softmax = macs = reads_q = reads_v = 0
    for start in range(0, queries, dp.rows):
        rows = min(dp.rows, queries - start)
        last_key = row0 + start + rows if causal else seq  # one past the tile's last row's own key
        for block, j0 in enumerate(range(0, last_key, bc)):
            keys = min(bc, seq - j0)
            qk = gemm(rows, keys, dim, dp.rows, dp.cols, dp.dataflow)
            pv = gemm(rows, dim, keys, dp.rows, dp.cols, dp.dataflow)
            rescales = 0 if block == 0 else rows * (dim + 1)
            lanes = dp.exp_lanes
            array += qk.cycles + pv.cycles
            softmax += (math.ceil(rows * keys / lanes) + math.ceil((rows * keys + rows) / lanes)
                        + math.ceil(rescales / lanes) + SCORE_LATENCY + math.ceil(math.log2(keys)) + EXP_LATENCY
                        + (RESCALE_LATENCY if rescales else 0))
            macs += qk.macs + pv.macs
            reads_q += qk.ifmap_reads
            reads_v += pv.filter_reads
    return {"array": array, "softmax": softmax, "macs": macs, "sram_read_q": reads_q, "sram_read_v": reads_v}
