// Which keys a query row sees, and which keys a block reads, for every flash kernel (kernels/flash*.cu):
//
// Rows. A launch's "head" holds NQ query rows: a query head's q_len queries, or, packed (the split-KV decode path,
// kernels/target.py), the G query heads of one K/V head one after another (G·q_len rows: Q's memory order, so the
// packing is only a view). Row r is query r mod QLEN of its head, at position r mod QLEN + N − QLEN of the N keys:
// the causal mask aligned to the bottom right, as a KV cache is (FlashAttention ≥ 2.1; with QLEN = N, key j for
// query i when j <= i). K and V of launch head h are K/V head h / GROUP (GROUP = heads / kv_heads unpacked, 1
// packed).
//
// Keys. A prefill launch (parts 0) gives each block one query tile and every key. A split-KV launch of `parts`
// blocks shares U = tiles · KB units among them, tiles = launch heads · ⌈nq / BR⌉ and KB = ⌈n / BC⌉ key blocks, unit
// u being key block u mod KB of tile u / KB: block c takes units [⌊c·U/parts⌋, ⌊(c+1)·U/parts⌋) in order, so every
// block streams the same number of key blocks (±1) whatever the batch, the heads and the length (a stream-K
// schedule; equal ranges per head left a memory-bound launch's SMs unevenly loaded). A share is cut into segments
// at tile boundaries. A segment holding all of a tile's keys writes O; any other writes its rows' partial state (O
// normalised by its own sum, and the sum's log2 plus the max) into slot 2c where the share begins in the segment's
// tile, else 2c + 1 (a share holds at most two partial segments: its first and its last), and kernels/
// split_combine.cu merges the slots of each split tile.
#pragma once

#include "tile_order.cuh"

struct KvRows {
    int nq;     // query rows of a launch head
    int qlen;   // queries per query head: row r is query r % qlen
    int n;      // keys (the KV cache's length)
    int group;  // launch heads per K/V head
};

// The last key row `row` sees (causal), or n − 1.
__device__ __forceinline__ int last_key(const KvRows &rows, int row, int causal) {
    return causal ? row % rows.qlen + rows.n - rows.qlen : rows.n - 1;
}

// The least and the greatest last key over rows first .. first + count − 1 (count >= 1): the block-level bounds of
// the causal mask (a key block past the greatest is skipped; one at or before the least needs no mask).
__device__ __forceinline__ int2 last_key_bounds(const KvRows &rows, int first, int count, int causal) {
    if (!causal) return make_int2(rows.n - 1, rows.n - 1);
    const int offset = rows.n - rows.qlen, i = first % rows.qlen;
    if (i + count - 1 < rows.qlen) return make_int2(i + offset, i + count - 1 + offset);  // no wrap to query 0
    return make_int2(offset, rows.n - 1);
}

// The first unit of part `part`'s share of `units` (the end of the last share where part == parts).
__device__ __forceinline__ long long share_start(int part, long long units, int parts) {
    return (long long)part * units / parts;
}

// The part whose share holds unit `unit` (0 <= unit < units).
__device__ __forceinline__ int share_owner(long long unit, long long units, int parts) {
    int part = (int)(unit * parts / units);  // share_start(part) <= unit; one step up at most
    while (part + 1 < parts && share_start(part + 1, units, parts) <= unit) ++part;
    return part;
}

// The partial-state slot of part `part`'s segment of tile `tile` (KB key blocks a tile).
__device__ __forceinline__ int segment_slot(int part, int tile, int kb, long long units, int parts) {
    return share_start(part, units, parts) >= (long long)tile * kb ? 2 * part : 2 * part + 1;
}

struct Segment {
    int bh, q0;      // the tile's launch head and first row
    int key_begin;   // its keys: [key_begin, key_end)
    int key_end;
    int slot;        // -1: all of the tile's keys, O written directly; else the partial state's slot
};

// This block's share of a launch's units, [unit, end) (both 0 for a prefill launch, parts 0: one tile), and the
// launch's units.
struct Share {
    long long unit, end, units;
};

template <int BR, int BC>
__device__ __forceinline__ Share block_share(int heads, int nq, int n, int parts) {
    if (parts == 0) return {0, 0, 0};
    const long long units = (long long)heads * ((nq + BR - 1) / BR) * ((n + BC - 1) / BC);
    return {share_start(blockIdx.x, units, parts), share_start(blockIdx.x + 1, units, parts), units};
}

// The segment a block computes next. Prefill (parts 0): its tile (kernels/tile_order.cuh) and every key, once.
// Split-KV: the segment of this block's share that starts at share.unit, which moves past it; the block loops while
// share.unit < share.end.
template <int BR, int BC>
__device__ __forceinline__ Segment next_segment(Share &share, int nq, int n, int parts, int causal) {
    const int key_blocks = (n + BC - 1) / BC;
    if (parts == 0) {
        const TileSlot slot = tile_slot<BR>(nq, causal);
        return {slot.bh, slot.q0, 0, n, -1};
    }
    const int tiles_per_head = (nq + BR - 1) / BR;
    const int tile = (int)(share.unit / key_blocks), first = (int)(share.unit % key_blocks);
    const int last = (int)min((long long)key_blocks, first + (share.end - share.unit));
    share.unit += last - first;
    const int slot = first == 0 && last == key_blocks ? -1
                                                      : segment_slot(blockIdx.x, tile, key_blocks, share.units, parts);
    return {tile / tiles_per_head, (tile % tiles_per_head) * BR, first * BC, min(n, last * BC), slot};
}

// A segment's partial state for one row: O / l as float32 into o_part[slot][row in tile][:], and log2 of the sum in
// base-2 score units (m·scale_log2 + log2 l) into lse[slot][row in tile]; −inf and zeros for a row that saw no key
// of the segment.
__device__ __forceinline__ float split_lse(float m, float l, float scale_log2) {
    return l > 0.0f ? m * scale_log2 + __log2f(l) : -__int_as_float(0x7f800000);
}
