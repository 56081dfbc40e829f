"""One problem under one mapping on one datapath (codesign/cycles.py models one head): batch × kv_heads groups,
each of G = heads / kv_heads query heads run one after another against one K/V head, the group's later heads finding
K and V on chip when the K/V buffers hold them (docs/codesign.md "Decode and grouped heads"); the groups spread over
`across` of the datapath's arrays and each head's query rows over `split` of them, and under the overlap schedule
each head pipelined into the next on its array (docs/codesign.md "Schedules and the mapper"). codesign/mapper.py
searches these mappings; codesign/groups.py `problem_cycles` gives a datapath's best."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from codesign.cycles import TRAFFIC_KEYS, HeadCycles, head_cycles, useful_macs
from codesign.datapath import Datapath
from host.errors import SpecError


@dataclass(frozen=True)
class Mapping:
    """How a problem sits on a datapath: the query tile's height (Br), how many arrays take whole groups (or heads)
    and how many share each head's query rows (each a contiguous chunk of ⌈q_len / split⌉ rows, loading its own K and
    V), whether a group's query heads share their K/V head on one array (else every head is its own group), and
    whether the folds overlap (else back to back, rows the query tile, as the serial schedule runs them)."""

    tile_rows: int
    across: int = 1
    split: int = 1
    share_kv: bool = True
    overlap: bool = False  # folds pipelined and GEMMs oriented (codesign/gemm.py); only under the overlap schedule

    @property
    def arrays(self) -> int:
        return self.across * self.split


@dataclass(frozen=True)
class ProblemCycles:
    """A whole problem on one datapath under one mapping. Each array runs ⌈groups / across⌉ groups, one after another,
    each group's first query head loading K and V and the later ones finding them on chip when the K/V buffers hold
    them (`later` has the traffic either way); with split > 1 each head is split chunks on as many arrays, each
    modelled as the head's last chunk (the one that sees the most keys when causal). Traffic totals are every head's
    (split chunks each, charged as the last chunk: an upper bound when causal); cycles are the busiest array's."""

    first: HeadCycles  # a group's first query head (also every head when G = 1), one chunk of it
    later: HeadCycles | None  # each later query head of a group; None when G = 1
    groups: int  # batch × kv_heads (batch × heads when the mapping does not share K/V heads)
    group: int  # G, query heads per K/V head (1 when not shared)
    mapping: Mapping
    cycles: int  # the busiest array's
    useful_macs: int  # the problem's unmasked pairs, both GEMMs
    pipelined_saving: int  # cycles the busiest array saves by starting each head during the last one's tail

    @property
    def heads(self) -> int:
        return self.groups * self.group

    def _total(self, value) -> int:
        later = 0 if self.later is None else (self.group - 1) * value(self.later)
        return self.groups * self.mapping.split * (value(self.first) + later)

    def _busiest(self, value) -> int:
        later = 0 if self.later is None else (self.group - 1) * value(self.later)
        return -(-self.groups // self.mapping.across) * (value(self.first) + later)

    @property
    def fill_drain(self) -> int:
        """The busiest array's cycles of fill, drain and stationary loads (HeadCycles.fill_drain over its heads)."""
        return self._busiest(lambda head: head.fill_drain)

    @property
    def array_tail(self) -> int:
        """The busiest array's fill and drain paid once a head (HeadCycles.array_tail over its heads)."""
        return self._busiest(lambda head: head.array_tail)

    @property
    def stall_cycles(self) -> int:
        """DRAM stalls summed over every head's chunks (arrays stall side by side, so this can exceed `cycles`
        when several arrays run)."""
        return self._total(lambda head: head.stall_cycles)

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
        """Useful MACs over what every array of the datapath could do in the problem's cycles."""
        dp = self.first.datapath
        return self.useful_macs / (self.cycles * dp.rows * dp.cols * dp.arrays)

    def describe(self) -> str:
        """The mapping in words, for a row's message and the explorer's output."""
        m = self.mapping
        folds = "folds overlapped" if m.overlap else "folds back to back"
        rows = f"{m.tile_rows} row" + ("" if m.tile_rows == 1 else "s")
        parts = [f"query tiles of {rows}", folds, self.first.orientation]
        if m.arrays > 1:
            units = "K/V groups" if self.group > 1 else "heads"
            split = f", each head's query rows split over {m.split}" if m.split > 1 else ""
            parts.append(f"{m.arrays} of {self.first.datapath.arrays} arrays: {units} over {m.across}{split}")
        elif self.first.datapath.arrays > 1:
            parts.append(f"1 of {self.first.datapath.arrays} arrays")
        if self.pipelined_saving:
            parts.append(f"heads pipelined ({self.pipelined_saving:,} cycles saved)")
        return "; ".join(parts)


#: head_cycles remembered: a mapper's candidates share most of their heads (equal tile, chunk and DRAM share).
_head = functools.lru_cache(maxsize=4096)(head_cycles)


def _saving(before: HeadCycles, after: HeadCycles, fill_on_array: bool) -> int:
    """Cycles saved when head `after` starts during head `before`'s tail on one array (overlap schedule): `after`'s
    prologue (DRAM) and fill run while `before`'s array drains and its dividers finish; its body starts once
    `before`'s output is written: the gap is max(start of the fill + fill, max(array tail + divider tail, prologue) +
    epilogue) instead of their sum. The fill starts after the prologue and, where it is a product on the array
    (`fill_on_array`: a head of folds back to back, whose fill is its first QKᵀ and whose array tail its last P·V),
    after `before`'s array tail too: one array runs one GEMM at a time (a review found the two overlapped, points at
    up to 107 % of the array's MAC peak)."""
    tail = before.array_tail + before.divider_tail
    start = max(after.prologue, before.array_tail) if fill_on_array else after.prologue
    gap = max(start + after.fill, max(tail, after.prologue) + before.epilogue)
    return tail + before.epilogue + after.prologue + after.fill - gap


def mapped_cycles(dp: Datapath, seq: int, dim: int, causal: bool, bc: int, queries: int | None, heads: int,
                  kv_heads: int | None, batch: int, mapping: Mapping) -> ProblemCycles:
    """The problem under one mapping; SpecError when the mapping is not legal on `dp` (more arrays than it has,
    more of them than the work has units, a tile the buffers cannot hold)."""
    kv_heads = heads if kv_heads is None else kv_heads
    if kv_heads < 1 or heads % kv_heads:
        raise SpecError(f"kv_heads={kv_heads} does not divide heads={heads}; allowed: a divisor of {heads}")
    queries = seq if queries is None else queries
    group = heads // kv_heads if mapping.share_kv else 1
    groups = batch * heads // group
    if mapping.overlap and dp.schedule != "overlap":
        raise SpecError(f"mapping {mapping} overlaps folds on a {dp.schedule}-schedule datapath; allowed: "
                        "overlap=False unless schedule='overlap'")
    if mapping.arrays > dp.arrays or mapping.across > groups or mapping.split > queries:
        raise SpecError(f"mapping {mapping} needs {mapping.arrays} arrays over {groups} groups of {queries} rows; "
                        f"allowed: at most {dp.arrays} arrays, across <= groups, split <= q_len")
    lane = dp
    if mapping.arrays > 1:  # the arrays share the DRAM interface, a fair share each
        lane = dataclasses.replace(dp, dram_bytes_per_cycle=dp.dram_bytes_per_cycle / mapping.arrays)
    chunk = -(-queries // mapping.split)
    first = _head(lane, seq, dim, causal, bc, chunk, tile_rows=mapping.tile_rows, overlap=mapping.overlap)
    later = None
    if group > 1:
        later = _head(lane, seq, dim, causal, bc, chunk, shared_kv=first.buffering["kv"] == "resident",
                            tile_rows=mapping.tile_rows, overlap=mapping.overlap)
    per_array = -(-groups // mapping.across)  # groups on the busiest array
    cycles = per_array * (first.cycles + (group - 1) * (later.cycles if later else 0))
    saving = 0
    if dp.schedule == "overlap":
        on_array = not mapping.overlap  # folds back to back: a head's fill is its first QKᵀ (codesign/cycles.py)
        if later is None:
            saving = (per_array - 1) * _saving(first, first, on_array)
        else:  # first → later, later → later within a group; the group's last head → the next group's first
            saving = (per_array * (_saving(first, later, on_array) + (group - 2) * _saving(later, later, on_array))
                      + (per_array - 1) * _saving(later, first, on_array))
    return ProblemCycles(first, later, groups, group, mapping, cycles - saving,
                         batch * heads * useful_macs(seq, queries, dim, causal), saving)
