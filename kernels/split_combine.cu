// The second launch of a split-KV flash call (kernels/kv_rows.cuh): the `parts` blocks of the first shared the
// (tile, key block) units among them; a tile whose keys one block held whole has its O written already, and each
// other tile's segments left their rows' partial state, O_s normalised by its own sum and lse_s = log2 of that sum in
// base-2 score units (plus the max), in the slots kv_rows.cuh's segment_slot names. For each row of a split tile,
// with L = max_s lse_s and w_s = 2^(lse_s − L):
//   O = Σ_s w_s · O_s / Σ_s w_s,
// in float32, written in the output type T (float, __half, __nv_bfloat16). A segment that saw no key of the row has
// lse −inf, so w = 0. One warp per row, four rows a 128-thread block: the lanes read the segments' lse together (one
// round trip for up to 32 segments), then each lane's D / 32 columns of every segment, several loads in flight.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kv_rows.cuh"

template <typename T>
__device__ __forceinline__ T from_float(float x);

template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }

template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename T, int D, int BR, int BC>
__global__ void __launch_bounds__(128)
split_combine(const float *__restrict__ o_part, const float *__restrict__ lse, T *__restrict__ o, int rows, int nq,
              int n, int heads, int parts) {
    static_assert(D % 32 == 0, "a lane takes D / 32 columns");
    constexpr int COLS = D / 32;
    const float NEG_INF = -__int_as_float(0x7f800000);
    const int lane = threadIdx.x & 31, row = blockIdx.x * 4 + (threadIdx.x >> 5);
    if (row >= rows) return;
    const int tiles_per_head = (nq + BR - 1) / BR, key_blocks = (n + BC - 1) / BC;
    const long long units = (long long)heads * tiles_per_head * key_blocks;
    const int head = row / nq, query = row % nq, in_tile = query % BR;
    const int tile = head * tiles_per_head + query / BR;
    const int first = share_owner((long long)tile * key_blocks, units, parts);
    const int last = share_owner((long long)tile * key_blocks + key_blocks - 1, units, parts);
    if (first == last) return;  // one block held all of this tile's keys and wrote O
    const int count = last - first + 1;
    // the largest lse, each lane taking every 32nd segment
    float top = NEG_INF;
    for (int s = lane; s < count; s += 32) {
        const int slot = segment_slot(first + s, tile, key_blocks, units, parts);
        top = fmaxf(top, lse[(size_t)slot * BR + in_tile]);
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
            my_slot = segment_slot(first + base + lane, tile, key_blocks, units, parts);
            const float l = lse[(size_t)my_slot * BR + in_tile];
            my_w = l == NEG_INF ? 0.0f : exp2f(l - top);
        }
        const int round = min(32, count - base);
#pragma unroll 4
        for (int s = 0; s < round; ++s) {
            const int slot = __shfl_sync(0xffffffffu, my_slot, s);
            const float w = __shfl_sync(0xffffffffu, my_w, s);
            total += w;
            const float *part = o_part + ((size_t)slot * BR + in_tile) * D + lane * COLS;
#pragma unroll
            for (int c = 0; c < COLS; ++c) acc[c] = fmaf(w, part[c], acc[c]);
        }
    }
    const float inv = 1.0f / total;
    T *out = o + (size_t)row * D + lane * COLS;
#pragma unroll
    for (int c = 0; c < COLS; ++c) out[c] = from_float<T>(acc[c] * inv);
}
