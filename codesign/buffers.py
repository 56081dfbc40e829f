"""The datapath's four buffers for one head (codesign/cycles.py): the bytes one query tile, one key or value block and
one tile's output accumulators take, whether each buffer holds them at all (`buffer_shortfall`), and how it holds
them: K and V resident for the whole head, or K/V, Q and O double- or single-buffered."""

from __future__ import annotations

from dataclasses import dataclass

from codesign.datapath import OUTPUT_ACC_BYTES, ROW_STATE_BYTES, Datapath
from host.errors import SpecError
from host.q15 import BC

WORD_BYTES = 2  # a Q15 word


def tile_bytes(br: int, dim: int, bc: int) -> tuple[int, int, int]:
    """Bytes of one query tile of br rows, one key (or value) block, and one tile's output accumulators with m, l."""
    return (br * dim * WORD_BYTES, bc * dim * WORD_BYTES, br * (dim * OUTPUT_ACC_BYTES + ROW_STATE_BYTES))


def buffer_shortfall(dp: Datapath, dim: int, bc: int = BC, tile_rows: int | None = None) -> str:
    """Why `dp` cannot run a head of this dimension in blocks of `bc` keys and query tiles of `tile_rows` (default
    R) ('' when it can): the first buffer that holds less than one tile or block."""
    br = dp.rows if tile_rows is None else tile_rows
    q_tile, kv_block, o_tile = tile_bytes(br, dim, bc)
    for name, size, need, what in (("q_buffer_kb", dp.q_buffer_kb, q_tile, f"one query tile ({br}x{dim} words)"),
                                   ("k_buffer_kb", dp.k_buffer_kb, kv_block, f"one key block ({bc}x{dim} words)"),
                                   ("v_buffer_kb", dp.v_buffer_kb, kv_block,
                                    f"one value block ({bc}x{dim} words)"),
                                   ("o_buffer_kb", dp.o_buffer_kb, o_tile,
                                    f"one tile's accumulators ({br} rows)")):
        if size * 1024 < need:
            return f"{name}={size:g} holds less than {what} = {need} B at dim {dim}; allowed: >= {need / 1024:g}"
    return ""


@dataclass(frozen=True)
class Buffers:
    """How each buffer holds its operand: K and V resident for the whole head, K/V, Q and O double-buffered."""

    resident: bool
    kv_double: bool
    q_double: bool
    o_double: bool

    @property
    def names(self) -> dict[str, str]:
        return {"q": "double" if self.q_double else "single",
                "kv": "resident" if self.resident else ("double" if self.kv_double else "single"),
                "o": "double" if self.o_double else "single"}


def buffering(dp: Datapath, seq: int, dim: int, bc: int, br: int) -> Buffers:
    """The buffering each buffer's size allows; SpecError when one cannot hold a single tile or block."""
    shortfall = buffer_shortfall(dp, dim, bc, br)
    if shortfall:
        raise SpecError(shortfall)
    q_tile, kv_block, o_tile = tile_bytes(br, dim, bc)
    kv_kb = min(dp.k_buffer_kb, dp.v_buffer_kb)
    resident = kv_kb * 1024 >= seq * dim * WORD_BYTES
    return Buffers(resident=resident, kv_double=resident or kv_kb * 1024 >= 2 * kv_block,
                    q_double=dp.q_buffer_kb * 1024 >= 2 * q_tile, o_double=dp.o_buffer_kb * 1024 >= 2 * o_tile)
