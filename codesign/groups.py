"""A whole problem's cycles and traffic on one datapath (codesign/cycles.py models one head): batch × kv_heads
groups, each of G = heads / kv_heads query heads run one after another against one K/V head, the group's later heads
finding K and V on chip when the K/V buffers hold them (docs/codesign.md "Decode and grouped heads")."""

from __future__ import annotations

from dataclasses import dataclass

from codesign.cycles import TRAFFIC_KEYS, HeadCycles, head_cycles
from codesign.datapath import Datapath
from host.errors import SpecError
from host.q15 import BC


@dataclass(frozen=True)
class ProblemCycles:
    """A whole problem on one datapath: batch × kv_heads groups, each of G = heads / kv_heads query heads run one
    after another against one K/V head. The group's first query head loads K and V; the later ones find them on
    chip when the K/V buffers hold all of them (resident), else they read them again (`later` has the traffic
    either way). Totals are the first head's plus G − 1 later heads', times the groups."""

    first: HeadCycles  # a group's first query head (also every head when G = 1)
    later: HeadCycles | None  # each later query head of a group; None when G = 1
    groups: int  # batch × kv_heads
    group: int  # G, query heads per K/V head

    @property
    def heads(self) -> int:
        return self.groups * self.group

    def _total(self, value) -> int:
        later = 0 if self.later is None else (self.group - 1) * value(self.later)
        return self.groups * (value(self.first) + later)

    @property
    def cycles(self) -> int:
        return self._total(lambda head: head.cycles)

    @property
    def stall_cycles(self) -> int:
        return self._total(lambda head: head.stall_cycles)

    @property
    def useful_macs(self) -> int:
        return self._total(lambda head: head.useful_macs)

    @property
    def traffic(self) -> dict[str, int]:
        """Every counter of TRAFFIC_KEYS summed over the problem's heads."""
        return {name: self._total(lambda head, name=name: head.traffic[name]) for name in TRAFFIC_KEYS}

    @property
    def dram_bytes(self) -> int:
        t = self.traffic
        return t["dram_read_q_bytes"] + t["dram_read_k_bytes"] + t["dram_read_v_bytes"] + t["dram_write_o_bytes"]

    @property
    def kv_shared(self) -> bool:
        """Whether a group's later query heads reuse its K/V head from the buffers (K and V read once per group)."""
        return self.later is not None and self.later.shared_kv

    @property
    def utilisation(self) -> float:
        """Useful MACs over what the array could do in the problem's cycles."""
        return self.useful_macs / (self.cycles * self.first.datapath.rows * self.first.datapath.cols)


def problem_cycles(dp: Datapath, seq: int, dim: int, causal: bool, bc: int = BC, queries: int | None = None,
                   heads: int = 1, kv_heads: int | None = None, batch: int = 1) -> ProblemCycles:
    """The cycle and traffic model of batch × heads heads of `queries` rows against seq keys, kv_heads K/V heads
    (default heads; it must divide heads), one head after another with each group's query heads together."""
    kv_heads = heads if kv_heads is None else kv_heads
    if kv_heads < 1 or heads % kv_heads:
        raise SpecError(f"kv_heads={kv_heads} does not divide heads={heads}; allowed: a divisor of {heads}")
    first = head_cycles(dp, seq, dim, causal, bc, queries)
    group = heads // kv_heads
    later = None
    if group > 1:
        later = head_cycles(dp, seq, dim, causal, bc, queries, shared_kv=first.buffering["kv"] == "resident")
    return ProblemCycles(first, later, batch * kv_heads, group)
