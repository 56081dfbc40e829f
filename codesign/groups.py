"""A whole problem's cycles and traffic on one datapath (codesign/cycles.py models one head): batch × kv_heads
groups of G = heads / kv_heads query heads against one K/V head each (docs/codesign.md "Decode and grouped heads"),
under the datapath's best mapping: the one fixed mapping under the serial schedule on one array (today's model, which
the RTL runs: query tile R, heads one after another), else the fastest legal one codesign/mapper.py finds
(docs/codesign.md "Schedules and the mapper"). One mapping's figures: codesign/mapping.py."""

from __future__ import annotations

from codesign.datapath import Datapath
from codesign.mapper import best_mapping
from codesign.mapping import Mapping, ProblemCycles, mapped_cycles
from host.q15 import BC

__all__ = ["Mapping", "ProblemCycles", "problem_cycles"]


def problem_cycles(dp: Datapath, seq: int, dim: int, causal: bool, bc: int = BC, queries: int | None = None,
                   heads: int = 1, kv_heads: int | None = None, batch: int = 1) -> ProblemCycles:
    """The cycle and traffic model of batch × heads heads of `queries` rows against seq keys, kv_heads K/V heads
    (default heads; it must divide heads), under the datapath's best mapping: on one array under the serial schedule
    the one it has (query tile R, one head after another, each group's query heads together), else the fastest
    legal one codesign/mapper.py finds."""
    if dp.schedule == "serial" and dp.arrays == 1:
        return mapped_cycles(dp, seq, dim, causal, bc, queries, heads, kv_heads, batch, Mapping(dp.rows, overlap=False))
    return best_mapping(dp, seq, dim, causal, bc, queries, heads, kv_heads, batch)
