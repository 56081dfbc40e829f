"""The split-KV launch's schedule in Python: how its `parts` blocks share the (tile, key block) units, the same
integer arithmetic as kernels/kv_rows.cuh (share_start, share_owner, segment_slot, next_segment), for the planner
(kernels/plan.py: how many tiles split, the partial states' bytes), the launch records (kernels/variants.py: whether
the combine runs) and the numpy fake (kernels/fake.py: which keys each segment holds). Nothing here imports CuPy.

Unit u is key block u mod KB of tile u // KB (tiles = launch heads · ⌈nq / Br⌉, KB = ⌈n / Bc⌉). Block c takes units
[⌊c·U/parts⌋, ⌊(c+1)·U/parts⌋); its share is cut at tile boundaries into segments. A segment with all KB key blocks of
its tile writes O directly; any other writes a partial state into slot 2c (its share begins in that tile) or 2c + 1.
"""

from __future__ import annotations

from typing import NamedTuple

from host.checks import check_int


class Segment(NamedTuple):
    """Block `part`'s keys of tile `tile`: key blocks [first, stop); slot −1 where that is all of the tile's."""

    part: int
    tile: int
    first: int
    stop: int
    slot: int


def share_start(part: int, units: int, parts: int) -> int:
    """The first unit of block `part`'s share (the end of the shares where part == parts)."""
    return part * units // parts


def check_parts(parts: int, tiles: int, key_blocks: int) -> int:
    """parts, checked: 1 ..tiles · key_blocks (every block's share holds a unit)."""
    check_int("tiles", tiles, 1, 1 << 31)
    check_int("key_blocks", key_blocks, 1, 1 << 31)
    return check_int("parts", parts, 1, tiles * key_blocks)


def segments(tiles: int, key_blocks: int, parts: int) -> list[Segment]:
    """Every segment of the launch, block by block, in the order each block computes them."""
    parts = check_parts(parts, tiles, key_blocks)
    units = tiles * key_blocks
    out = []
    for part in range(parts):
        unit, end = share_start(part, units, parts), share_start(part + 1, units, parts)
        begin = unit
        while unit < end:
            tile, first = divmod(unit, key_blocks)
            stop = min(key_blocks, first + end - unit)
            whole = first == 0 and stop == key_blocks
            out.append(Segment(part, tile, first, stop,
                               -1 if whole else 2 * part if begin >= tile * key_blocks else 2 * part + 1))
            unit += stop - first
    return out


def partial_segments(tiles: int, key_blocks: int, parts: int) -> int:
    """How many segments write a partial state (each is written once and read once by the combine)."""
    return sum(segment.slot >= 0 for segment in segments(tiles, key_blocks, parts))
