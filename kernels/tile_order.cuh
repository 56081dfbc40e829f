// Which (batch·head, query tile) a flash block computes, from its index on a one-dimensional grid of
// tiles × heads blocks. Blocks start in increasing index order, so the order is the schedule:
//   not causal: a head's tiles are neighbours, and the blocks running together share that head's K and V in L2;
//   causal: tile t sees t + 1 key blocks, so blocks run longest first across all heads (the LPT rule). A head's
//   tiles heaviest first but heads one after another (the earlier 2-D grid) left a tail of heavy tiles for the
//   last wave: 1.28× the ideal makespan at 32 tiles × 16 heads on 132 SMs, against 1.02× in LPT order.
// Included by the four flash kernels; the launcher (kernels/cuda.py) sizes the grid as tiles × heads.
#pragma once

struct TileSlot {
    int bh;  // batch·head index
    int q0;  // the tile's first query row
};

// Tile `slot` of `total` (tiles × heads) in that order; 32-bit unsigned arithmetic: the grid's x extent is below 2^31
// (kernels/budget.py MAX_GRID_X). A persistent kernel (kernels/flash_wgmma.cu) walks slots blockIdx.x, + gridDim.x, ...
template <int BR>
__device__ __forceinline__ TileSlot tile_slot_at(unsigned slot, unsigned total, int n, bool causal) {
    const unsigned tiles = ((unsigned)n + BR - 1) / BR;
    if (!causal) return {(int)(slot / tiles), (int)(slot % tiles) * BR};
    const unsigned heads = total / tiles;
    return {(int)(slot % heads), (int)(tiles - 1 - slot / heads) * BR};
}

// The tile of this block of a grid of a block a tile.
template <int BR>
__device__ __forceinline__ TileSlot tile_slot(int n, bool causal) {
    return tile_slot_at<BR>(blockIdx.x, gridDim.x, n, causal);
}
