// Shared device helpers of the attention kernels: warp and block reductions and the online-softmax step.
// Included by naive.cu, fused.cu and flash.cu; compiled by NVRTC through CuPy (kernels/target.py) and by nvcc in CI.
#pragma once

#define KB_NEG_INF (-__int_as_float(0x7f800000))

// Reduce over groups of `width` consecutive lanes (width a power of two <= 32); every lane gets the result.
__device__ __forceinline__ float group_max(float x, int width) {
    for (int offset = width >> 1; offset > 0; offset >>= 1) {
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset, width));
    }
    return x;
}

__device__ __forceinline__ float group_sum(float x, int width) {
    for (int offset = width >> 1; offset > 0; offset >>= 1) {
        x += __shfl_xor_sync(0xffffffffu, x, offset, width);
    }
    return x;
}

// Block-wide reductions for blocks of whole warps; `scratch` holds one float per warp. Every thread gets the result.
__device__ __forceinline__ float block_max(float x, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    x = group_max(x, 32);
    __syncthreads();
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    x = lane < warps ? scratch[lane] : KB_NEG_INF;
    return group_max(x, 32);
}

__device__ __forceinline__ float block_sum(float x, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    x = group_sum(x, 32);
    __syncthreads();
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    x = lane < warps ? scratch[lane] : 0.0f;
    return group_sum(x, 32);
}

// One online-softmax step in base 2: the running max m grows to m_new = max(m, tile_max); returns the factor
// 2^(m - m_new) that rescales what was summed under m (1 when nothing changes, 0 on the first tile).
__device__ __forceinline__ float online_rescale(float m, float tile_max, float *m_new) {
    *m_new = fmaxf(m, tile_max);
    if (*m_new == KB_NEG_INF) return 1.0f;  // nothing seen yet: keep zeros as they are
    return exp2f(m - *m_new);
}
