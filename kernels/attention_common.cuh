// Shared device helpers of the attention kernels: warp and block reductions, each written once and templated on its
// operator (MaxOp, SumOp), the row-softmax step of the one-block-per-row kernels and the online-softmax step.
// Included by naive.cu, fused.cu and flash.cu; compiled by NVRTC through CuPy (kernels/target.py) and by nvcc in CI.
#pragma once

#define KB_NEG_INF (-__int_as_float(0x7f800000))

// The two reductions of a softmax, each with its identity (what a lane or warp with nothing to add contributes).
struct MaxOp {
    static __device__ __forceinline__ float identity() { return KB_NEG_INF; }
    static __device__ __forceinline__ float apply(float a, float b) { return fmaxf(a, b); }
};

struct SumOp {
    static __device__ __forceinline__ float identity() { return 0.0f; }
    static __device__ __forceinline__ float apply(float a, float b) { return a + b; }
};

// Reduce over groups of `width` consecutive lanes (width a power of two <= 32); every lane gets the result.
template <typename Op>
__device__ __forceinline__ float group_reduce(float x, int width) {
    for (int offset = width >> 1; offset > 0; offset >>= 1) {
        x = Op::apply(x, __shfl_xor_sync(0xffffffffu, x, offset, width));
    }
    return x;
}

// Block-wide reduction for blocks of whole warps; `scratch` holds one float per warp. Every thread gets the result.
template <typename Op>
__device__ __forceinline__ float block_reduce(float x, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    x = group_reduce<Op>(x, 32);
    __syncthreads();
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    x = lane < warps ? scratch[lane] : Op::identity();
    return group_reduce<Op>(x, 32);
}

// The exponentiating step of a row softmax that one block computes: m, each thread's partial max of the row's n
// values x[j], becomes the row max; each x[j] becomes exp(x[j] - m) in place (exp: __expf for natural units,
// exp2f for base-2 units); returns the row's sum of them to every thread. The sum's barriers also publish x[].
template <typename Exp>
__device__ __forceinline__ float block_softmax_exp(float *x, int n, float m, float *scratch, Exp exp) {
    m = block_reduce<MaxOp>(m, scratch);
    float l = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const float p = exp(x[j] - m);
        x[j] = p;
        l += p;
    }
    return block_reduce<SumOp>(l, scratch);
}

// One online-softmax step in base 2: the running max m grows to m_new = max(m, tile_max); returns the factor
// 2^(m - m_new) that rescales what was summed under m (1 when nothing changes, 0 on the first tile).
__device__ __forceinline__ float online_rescale(float m, float tile_max, float *m_new) {
    *m_new = fmaxf(m, tile_max);
    if (*m_new == KB_NEG_INF) return 1.0f;  // nothing seen yet: keep zeros as they are
    return exp2f(m - *m_new);
}
