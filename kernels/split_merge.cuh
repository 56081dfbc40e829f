// Merging a split tile's partial softmax states into O (kernels/kv_rows.cuh: the split-KV schedule and its slots),
// used by the separate combine launch (kernels/split_combine.cu) and by a split kernel that merges in place
// (kernels/flash_tc.cu and kernels/decode_wgmma.cu with MERGE: the last block to finish a piece of a tile merges
// that tile, so no second launch).
//
// For each row of a split tile, with L = max_s lse_s over its segments s and w_s = 2^(lse_s − L):
//   O = Σ_s w_s · O_s / Σ_s w_s,
// in float32, written in the output kind (MERGE_FP16, MERGE_BF16, MERGE_FP32). A segment that saw no key of the row has
// lse −inf, so w = 0. One warp a row: the lanes read the segments' lse together (one round trip for up to 32
// segments), then each lane's D / 32 columns of every segment, several loads in flight. The partial states are read
// with ld.global.cg (L2, not the SM's L1): in the in-place merge they were written by other blocks.
#pragma once

#include "kv_rows.cuh"

// Output kinds of a merge (no CUDA header needed, so the Hopper sources built by NVRTC without an include path take
// it too): MERGE_FP16 and MERGE_BF16 store 16-bit bit patterns, MERGE_FP32 floats.
constexpr int MERGE_FP16 = 0, MERGE_BF16 = 1, MERGE_FP32 = 2;

// x, rounded to nearest even in kind OUT, into element i of o.
template <int OUT>
__device__ __forceinline__ void store_merged(void *o, size_t i, float x) {
    if (OUT == MERGE_FP32) {
        static_cast<float *>(o)[i] = x;
    } else {
        unsigned short bits;
        if (OUT == MERGE_FP16)
            asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(bits) : "f"(x));
        else
            asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(bits) : "f"(x));
        static_cast<unsigned short *>(o)[i] = bits;
    }
}

// A block-wide barrier among the THREADS threads that merge: 0, the block's own (__syncthreads); else that named
// barrier (a block whose other warps have left, as the Hopper split kernel's producer does).
template <int BARRIER, int THREADS>
__device__ __forceinline__ void merge_barrier() {
    if (BARRIER == 0)
        __syncthreads();
    else
        asm volatile("bar.sync %0, %1;\n" ::"n"(BARRIER), "n"(THREADS) : "memory");
}

// The first and the last part whose shares hold keys of tile `tile` (KB key blocks a tile, `units` in all).
__device__ __forceinline__ int2 tile_owners(int tile, int kb, long long units, int parts) {
    return make_int2(share_owner((long long)tile * kb, units, parts),
                     share_owner((long long)tile * kb + kb - 1, units, parts));
}

// Row `row` (launch head row / nq, query row % nq) of a launch of `heads` launch heads of nq rows against n keys,
// merged from its tile's partial states into o; nothing where one block held all of the tile's keys (O written).
// Called by all 32 lanes of a warp.
template <int OUT, int D, int BR, int BC>
__device__ __forceinline__ void merge_row(const float *o_part, const float *lse, void *o, int row, int nq, int n,
                                          int heads, int parts, int lane) {
    static_assert(D % 32 == 0, "a lane takes D / 32 columns");
    constexpr int COLS = D / 32;
    const float NEG_INF = -__int_as_float(0x7f800000);
    const int tiles_per_head = (nq + BR - 1) / BR, key_blocks = (n + BC - 1) / BC;
    const long long units = (long long)heads * tiles_per_head * key_blocks;
    const int head = row / nq, query = row % nq, in_tile = query % BR;
    const int tile = head * tiles_per_head + query / BR;
    const int2 owners = tile_owners(tile, key_blocks, units, parts);
    if (owners.x == owners.y) return;  // one block held all of this tile's keys and wrote O
    const int count = owners.y - owners.x + 1;
    // the largest lse, each lane taking every 32nd segment
    float top = NEG_INF;
    for (int s = lane; s < count; s += 32) {
        const int slot = segment_slot(owners.x + s, tile, key_blocks, units, parts);
        top = fmaxf(top, __ldcg(lse + (size_t)slot * BR + in_tile));
    }
#pragma unroll
    for (int step = 16; step > 0; step >>= 1) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, step));
    float acc[COLS], total = 0.0f;
#pragma unroll
    for (int c = 0; c < COLS; ++c) acc[c] = 0.0f;
    for (int base = 0; base < count; base += 32) {
        // lane s of this round holds segment base + s's slot and weight (0 past the last, or for no key)
        int my_slot = 0;
        float my_w = 0.0f;
        if (base + lane < count) {
            my_slot = segment_slot(owners.x + base + lane, tile, key_blocks, units, parts);
            const float l = __ldcg(lse + (size_t)my_slot * BR + in_tile);
            my_w = l == NEG_INF ? 0.0f : exp2f(l - top);
        }
        const int round = min(32, count - base);
#pragma unroll 8  // eight segments' loads in flight a lane (the merge's tail is its chain of L2 round trips)
        for (int s = 0; s < round; ++s) {
            const int slot = __shfl_sync(0xffffffffu, my_slot, s);
            const float w = __shfl_sync(0xffffffffu, my_w, s);
            total += w;
            const float *part = o_part + ((size_t)slot * BR + in_tile) * D + lane * COLS;
#pragma unroll
            for (int c = 0; c < COLS; ++c) acc[c] = fmaf(w, __ldcg(part + c), acc[c]);
        }
    }
    const float inv = 1.0f / total;
#pragma unroll
    for (int c = 0; c < COLS; ++c) store_merged<OUT>(o, (size_t)row * D + lane * COLS + c, acc[c] * inv);
}

// The in-place merge, called by every thread of a split block right after it wrote its partial state of the tile
// whose first row is q0 of launch head bh: the block takes a ticket for the tile (after a fence, so its partial state
// is visible to every SM first); the block whose ticket is the tile's last merges all of the tile's rows, one warp a
// row, and sets the tile's ticket count back to 0 for the next launch. `tickets` holds one int per tile, all 0 when
// the launch begins. The THREADS merging threads are threadIdx.x 0 .. THREADS − 1, meeting at barrier BARRIER
// (merge_barrier).
template <int OUT, int D, int BR, int BC, int THREADS, int BARRIER = 0>
__device__ __forceinline__ void merge_if_last(const float *o_part, const float *lse, void *o, int *tickets, int bh,
                                              int q0, int nq, int n, int heads, int parts) {
    __shared__ int merges;  // whether this block holds the tile's last ticket
    const int tiles_per_head = (nq + BR - 1) / BR, key_blocks = (n + BC - 1) / BC;
    const int tile = bh * tiles_per_head + q0 / BR;
    __threadfence();  // this thread's stores of the partial state, before the block's ticket
    merge_barrier<BARRIER, THREADS>();
    if (threadIdx.x == 0) {
        const int2 owners = tile_owners(tile, key_blocks, (long long)heads * tiles_per_head * key_blocks, parts);
        const int pieces = owners.y - owners.x + 1;
        merges = atomicAdd(tickets + tile, 1) == pieces - 1;
        if (merges) tickets[tile] = 0;  // every piece has arrived: no other block touches it in this launch
    }
    merge_barrier<BARRIER, THREADS>();
    if (!merges) return;
    __threadfence();  // the other pieces' states, seen through their fences and tickets, before they are read
    const int lane = threadIdx.x & 31, rows = min(BR, nq - q0);
    for (int r = threadIdx.x >> 5; r < rows; r += THREADS / 32)
        merge_row<OUT, D, BR, BC>(o_part, lse, o, bh * nq + q0 + r, nq, n, heads, parts, lane);
}
