// The second launch of a split-KV flash call (kernels/kv_rows.cuh): each of the `splits` blocks of a query tile left
// its rows' partial state, O_s normalised by its own sum and lse_s = log2 of that sum in base-2 score units (plus the
// max). For each row, with L = max_s lse_s and w_s = 2^(lse_s − L):
//   O = Σ_s w_s · O_s / Σ_s w_s,
// in float32, written in the output type T (float, __half, __nv_bfloat16). A split that saw no key of the row has
// lse −inf, so w = 0. One warp per row, each lane D / 32 columns; 4 rows per block of 128 threads.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

template <typename T>
__device__ __forceinline__ T from_float(float x);

template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }

template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename T, int D>
__global__ void __launch_bounds__(128)
split_combine(const float *__restrict__ o_part, const float *__restrict__ lse, T *__restrict__ o, int rows,
              int splits) {
    static_assert(D % 32 == 0, "a lane takes D / 32 columns");
    constexpr int COLS = D / 32;
    const int lane = threadIdx.x & 31, row = blockIdx.x * 4 + (threadIdx.x >> 5);
    if (row >= rows) return;
    float top = -__int_as_float(0x7f800000);
    for (int s = 0; s < splits; ++s) top = fmaxf(top, lse[(size_t)s * rows + row]);
    float acc[COLS], total = 0.0f;
#pragma unroll
    for (int c = 0; c < COLS; ++c) acc[c] = 0.0f;
    for (int s = 0; s < splits; ++s) {
        const float l = lse[(size_t)s * rows + row];
        if (l == -__int_as_float(0x7f800000)) continue;  // this split held no key of the row
        const float w = exp2f(l - top);
        total += w;
        const float *part = o_part + ((size_t)s * rows + row) * D + lane * COLS;
#pragma unroll
        for (int c = 0; c < COLS; ++c) acc[c] = fmaf(w, part[c], acc[c]);
    }
    const float inv = 1.0f / total;
    T *out = o + (size_t)row * D + lane * COLS;
#pragma unroll
    for (int c = 0; c < COLS; ++c) out[c] = from_float<T>(acc[c] * inv);
}
