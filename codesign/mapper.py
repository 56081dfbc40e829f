"""The mapper: for one datapath and one attention problem, the fastest legal mapping (codesign/mapping.py `Mapping`),
found by exhaustive search over a small legal set (docs/codesign.md "Schedules and the mapper"), as Timeloop's and
LLMCompass's mappers do for their architectures.

The set: under the serial schedule the folds back to back with the query tile R (the RTL's); under overlap the folds
back to back or overlapped, each at every query-tile height Br from `tile_heights` (the powers of two up to the query
rows, R, C, R/2 and C/2, and the rows themselves), how many arrays take whole groups (or heads) and how many split each
head's query rows (every count up to 8, then powers of two, the datapath's P and the work's unit count, at most P arrays
in all), and whether a group's query heads share their K/V head on one array. Which index of each GEMM lies along the
rows and columns is chosen inside the head model (codesign/gemm.py `oriented`, the faster of the two, per step kind).
Each candidate is one `mapped_cycles` call; heads of equal shape and DRAM share are computed once (a cache), so a search
costs a few head models per distinct tile height and array count.
"""

from __future__ import annotations

import dataclasses

from codesign.cycles import step_cycles
from codesign.datapath import Datapath
from codesign.mapping import Mapping, ProblemCycles, mapped_cycles
from host.errors import SpecError
from host.q15 import BC

#: The largest query tile the overlap schedule's mapper tries (rows; the buffers usually refuse sooner).
TILE_MAX = 1024


#: Array counts the search tries one by one (above it, powers of two and the datapath's and the work's own counts).
EVERY_COUNT = 8


def _counts(limit: int, *extra: int) -> list[int]:
    """1 .. EVERY_COUNT, then 16, 32, … up to `limit`, with the `extra` values at or below it."""
    values = set(range(1, min(limit, EVERY_COUNT) + 1)) | {1 << i for i in range(limit.bit_length())
                                                            if 1 << i <= limit}
    return sorted(values | {e for e in extra if 1 <= e <= limit})


def tile_heights(dp: Datapath, rows: int) -> list[int]:
    """The query-tile heights the mapper tries under the overlap schedule for heads (or chunks) of `rows` query rows:
    the powers of two, R, C, R/2 and C/2 below `rows`, and `rows` itself (up to TILE_MAX)."""
    top = min(rows, TILE_MAX)
    candidates = {1 << i for i in range(TILE_MAX.bit_length())} | {dp.rows, dp.cols, dp.rows // 2, dp.cols // 2}
    return sorted({t for t in candidates if t < top} | {top})


def candidates(dp: Datapath, queries: int, heads: int, kv_heads: int, batch: int) -> list[Mapping]:
    """Every mapping the search tries for the problem's shape on `dp` (some may still be refused by the buffers)."""
    out = []
    for share in ((True, False) if heads // kv_heads > 1 else (True,)):
        units = batch * (kv_heads if share else heads)
        for across in _counts(min(dp.arrays, units), dp.arrays, units):
            for split in _counts(min(dp.arrays // across, queries), dp.arrays // across):
                chunk = -(-queries // split)
                if dp.schedule == "serial":  # folds back to back, the array's rows the query tile
                    out.append(Mapping(dp.rows, across, split, share))
                else:  # folds back to back or overlapped, at every tile height
                    out += [Mapping(t, across, split, share, overlap) for t in tile_heights(dp, chunk)
                            for overlap in (False, True)]
    return out


def _order(dp: Datapath, model: ProblemCycles) -> tuple:
    """The search's ranking: fewest cycles, then fewest arrays, K/V heads shared, folds back to back, the tile R, the
    smaller tile."""
    m = model.mapping
    return model.cycles, m.arrays, not m.share_kv, m.overlap, m.tile_rows != dp.rows, m.tile_rows


def best_mapping(dp: Datapath, seq: int, dim: int, causal: bool, bc: int, queries: int | None, heads: int,
                 kv_heads: int | None, batch: int) -> ProblemCycles:
    """The problem under its fastest legal mapping on `dp` (ties: the fewest arrays, then shared K/V heads, then the
    tile R); SpecError with the first candidate's reason when none is legal (a buffer below one tile)."""
    kv_heads = heads if kv_heads is None else kv_heads
    if kv_heads < 1 or heads % kv_heads:
        raise SpecError(f"kv_heads={kv_heads} does not divide heads={heads}; allowed: a divisor of {heads}")
    rows = seq if queries is None else queries
    best, first_error = None, None
    for mapping in candidates(dp, rows, heads, kv_heads, batch):
        try:
            model = mapped_cycles(dp, seq, dim, causal, bc, queries, heads, kv_heads, batch, mapping)
        except SpecError as exc:
            first_error = first_error or exc
            continue
        if best is None or _order(dp, model) < _order(dp, best):
            best = model
    if best is None:
        raise first_error
    return best


def mapping_count(dp: Datapath, queries: int, heads: int, kv_heads: int, batch: int) -> int:
    """How many mappings one search tries (for the time per point the docs state)."""
    return len(candidates(dp, queries, heads, kv_heads, batch))


def slower_reason(dp: Datapath, smaller: ProblemCycles, seq: int, dim: int, causal: bool, bc: int,
                  queries: int | None, heads: int, kv_heads: int | None, batch: int) -> str:
    """Why `dp` (an array at least as large as `smaller`'s in rows and columns, the rest equal) takes more cycles than
    `smaller` ('' when the cause is not its array): run on `smaller`'s own mapping, `dp` streams no longer (its folds
    are no more) but spends more cycles filling, draining and loading (r + c − 2 and the weight loads grow with the
    array's sides), and its best mapping is no faster than that."""
    small = smaller.first.datapath
    same = mapped_cycles(dp, seq, dim, causal, bc, queries, heads, kv_heads, batch, smaller.mapping)
    if same.cycles <= smaller.cycles:
        return ""
    for what, big, little in (("fill, drain and stationary loads", same.fill_drain, smaller.fill_drain),
                              ("fill and drain paid once a head", same.array_tail, smaller.array_tail)):
        if big > little:
            return (f"slower than the {small.rows}x{small.cols} array: on its mapping ({smaller.describe()}) this "
                    f"one spends {big - little:,} more cycles in {what} ({big:,} against {little:,}), which its "
                    "fewer folds do not win back")
    return ""


#: The most exponent lanes `balanced_lanes` offers (the Datapath's own cap).
LANES_MAX = 4096


def balanced_lanes(dp: Datapath, dim: int, bc: int = BC, tile_rows: int | None = None) -> int:
    """The fewest exponent lanes, a power of two, with which the softmax unit keeps up with the array: a tile's later
    full block (tile_rows rows, default R, against bc keys, its rescale included) takes no more softmax cycles than
    array cycles under the datapath's schedule (LANES_MAX when even that many do not)."""
    rows = dp.rows if tile_rows is None else tile_rows
    overlap = dp.schedule == "overlap"
    lanes = 1
    while lanes < LANES_MAX:
        array, softmax = step_cycles(dataclasses.replace(dp, exp_lanes=lanes), rows, bc, dim, False, overlap)
        if softmax <= array:
            break
        lanes *= 2
    return lanes
