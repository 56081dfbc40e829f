// Fused attention, one block per query row (fp32): the row's N scores live in shared memory, so S and P never reach
// device memory, but N is capped by the shared memory one block can have (kernels/target.py computes the cap).
// Dynamic shared memory: N floats of scores + 32 floats of reduction scratch. Layouts and the causal mask's
// alignment as in naive.cu; the grid is (NQ, B·H).
#include "attention_common.cuh"

extern "C" __global__ void fused_row(const float *__restrict__ Q, const float *__restrict__ K,
                                     const float *__restrict__ V, float *__restrict__ O, int NQ, int N,
                                     int group, int d, float scale_log2, int causal) {
    extern __shared__ float smem[];
    float *scores = smem;          // N
    float *scratch = smem + N;     // 32
    const long bh = blockIdx.y;
    const int i = blockIdx.x;
    const float *q = Q + (bh * NQ + i) * d;
    const float *k = K + bh / group * N * d;
    const float *v = V + bh / group * N * d;
    const int keys = causal ? i + N - NQ + 1 : N;
    float m = KB_NEG_INF;
    for (int j = threadIdx.x; j < keys; j += blockDim.x) {
        const float *kj = k + (long)j * d;
        float s = 0.0f;
        for (int c = 0; c < d; c++) s += q[c] * kj[c];
        s *= scale_log2;  // base-2 units: exp(x) = 2^(x log2 e)
        scores[j] = s;
        m = fmaxf(m, s);
    }
    // its barriers also publish scores[] to every thread
    const float l = block_softmax_exp(scores, keys, m, scratch, [](float x) { return exp2f(x); });
    const float inv = 1.0f / l;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < keys; j++) acc += scores[j] * v[(long)j * d + c];
        O[(bh * NQ + i) * d + c] = acc * inv;
    }
}
