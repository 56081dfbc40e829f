// Naive attention in three kernels that materialise S and P in device memory (fp32):
//   scores:  S = (Q Kᵀ) * scale, causal entries above the diagonal set to -inf   (a shared-memory tiled matmul)
//   softmax: P = softmax(S) row by row, row max subtracted, in place                (one block per row)
//   pv:      O = P V                                                                (a shared-memory tiled matmul)
// Layouts: Q and O are (BH, NQ, d) row-major, K and V (B·Hkv, N, d) (query head bh reads K/V head bh / group);
// S and P are (BH, NQ, N). Query i sits at key position i + N − NQ: the causal mask is aligned to the bottom right
// (kernels/kv_rows.cuh). Grid z runs over batch·heads.
#include "attention_common.cuh"

#define NAIVE_TILE 16

// S[bh, i, j] = scale * sum_c Q[bh, i, c] K[bh / group, j, c]
extern "C" __global__ void naive_scores(const float *__restrict__ Q, const float *__restrict__ K,
                                        float *__restrict__ S, int NQ, int N, int group, int d, float scale,
                                        int causal) {
    __shared__ float q_tile[NAIVE_TILE][NAIVE_TILE + 1];
    __shared__ float k_tile[NAIVE_TILE][NAIVE_TILE + 1];
    const long bh = blockIdx.z;
    const int i = blockIdx.y * NAIVE_TILE + threadIdx.y;  // query
    const int j = blockIdx.x * NAIVE_TILE + threadIdx.x;  // key
    const float *q = Q + bh * NQ * d;
    const float *k = K + bh / group * N * d;
    float acc = 0.0f;
    for (int c0 = 0; c0 < d; c0 += NAIVE_TILE) {
        const int c = c0 + threadIdx.x;
        q_tile[threadIdx.y][threadIdx.x] = (i < NQ && c < d) ? q[(long)i * d + c] : 0.0f;
        const int kj = blockIdx.x * NAIVE_TILE + threadIdx.y;
        k_tile[threadIdx.y][threadIdx.x] = (kj < N && c < d) ? k[(long)kj * d + c] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int t = 0; t < NAIVE_TILE; t++) acc += q_tile[threadIdx.y][t] * k_tile[threadIdx.x][t];
        __syncthreads();
    }
    if (i < NQ && j < N) S[(bh * NQ + i) * N + j] = (causal && j > i + N - NQ) ? KB_NEG_INF : acc * scale;
}

// P = softmax(S) over each row, in place; one block per (bh, row).
extern "C" __global__ void naive_softmax(float *__restrict__ S, int NQ, int N) {
    __shared__ float scratch[32];
    float *row = S + ((long)blockIdx.y * NQ + blockIdx.x) * N;
    float m = KB_NEG_INF;
    for (int j = threadIdx.x; j < N; j += blockDim.x) m = fmaxf(m, row[j]);
    const float l = block_softmax_exp(row, N, m, scratch, [](float x) { return __expf(x); });
    const float inv = 1.0f / l;
    for (int j = threadIdx.x; j < N; j += blockDim.x) row[j] *= inv;
}

// O[bh, i, c] = sum_j P[bh, i, j] V[bh / group, j, c]
extern "C" __global__ void naive_pv(const float *__restrict__ P, const float *__restrict__ V,
                                    float *__restrict__ O, int NQ, int N, int group, int d) {
    __shared__ float p_tile[NAIVE_TILE][NAIVE_TILE + 1];
    __shared__ float v_tile[NAIVE_TILE][NAIVE_TILE + 1];
    const long bh = blockIdx.z;
    const int i = blockIdx.y * NAIVE_TILE + threadIdx.y;  // query
    const int c = blockIdx.x * NAIVE_TILE + threadIdx.x;  // output column
    const float *p = P + bh * NQ * N;
    const float *v = V + bh / group * N * d;
    float acc = 0.0f;
    for (int j0 = 0; j0 < N; j0 += NAIVE_TILE) {
        const int pj = j0 + threadIdx.x, vj = j0 + threadIdx.y;
        p_tile[threadIdx.y][threadIdx.x] = (i < NQ && pj < N) ? p[(long)i * N + pj] : 0.0f;
        v_tile[threadIdx.y][threadIdx.x] = (vj < N && c < d) ? v[(long)vj * d + c] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int t = 0; t < NAIVE_TILE; t++) acc += p_tile[threadIdx.y][t] * v_tile[t][threadIdx.x];
        __syncthreads();
    }
    if (i < NQ && c < d) O[(bh * NQ + i) * d + c] = acc;
}
