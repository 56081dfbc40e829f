// The online-softmax step the tensor-core flash kernels (kernels/flash_tc.cu, flash_wgmma.cu, flash_tf32.cu) run on one
// warp's 16 rows of a key block's scores, held in the mma.sync / wgmma accumulator layout: s[4i + e] is row
// g + 8·(e/2) (g = lane/4) and key kbase + 8i + 2·(lane mod 4) + (e mod 2), for i < STILES (BC / 8).
// In base 2: log2 e is folded into scale_log2, applied inside each exponent's FFMA, so the max runs on raw scores
// (a positive scale keeps their order) and m stays in raw units.

#pragma once

#include "kv_rows.cuh"

#define TC_NEG_INF (-__int_as_float(0x7f800000))

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Masks keys at or past key_end (the end of the keys this block reads: N, or its split's end) and keys after a row's
// last visible key (kernels/kv_rows.cuh last_key; `row` is the warp's row g of these 16, rows g and g+8 are this
// lane's), turns s into the unnormalised probabilities p = 2^((s - max)·scale), moves the running max m and this
// lane's share of the running sum l (rows g and g+8) on, and returns in alpha the factors that rescale the old
// accumulator rows. The per-element test runs only on blocks that reach past the least last key of the 16 rows.
template <int STILES>
__device__ __forceinline__ void online_softmax(float *s, float *m, float *l, float *alpha, float scale_log2, int kbase,
                                               int key_end, const KvRows &rows, int row, int causal) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (kbase + 8 * STILES > key_end || kbase + 8 * STILES - 1 > last_key_bounds(rows, row - g, 16, causal).x) {
        const int last[2] = {last_key(rows, row, causal), last_key(rows, row + 8, causal)};
#pragma unroll
        for (int i = 0; i < STILES; ++i) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int key = kbase + i * 8 + 2 * t + (e & 1);
                if (key >= key_end || key > last[e >> 1]) s[4 * i + e] = TC_NEG_INF;
            }
        }
    }
    float top[2] = {m[0], m[1]};
#pragma unroll
    for (int i = 0; i < STILES; ++i) {
        top[0] = fmaxf(top[0], fmaxf(s[4 * i], s[4 * i + 1]));
        top[1] = fmaxf(top[1], fmaxf(s[4 * i + 2], s[4 * i + 3]));
    }
    float base[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 1));  // the row's 4 lanes
        top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffffu, top[r], 2));
        // Both products rounded alike (__fmul_rn: no FMA contraction), so that an unchanged max gives alpha = 1
        // exactly: a contracted m·c − base left the rounding residual of m·c, an alpha of 1 + ~1e-7 that scaled the
        // older key blocks up once per block (the 3xTF32 kernel's error grew with N / BC: 7x torch's at Bc 16).
        base[r] = top[r] == TC_NEG_INF ? 0.0f : __fmul_rn(top[r], scale_log2);  // nothing seen yet: p = 0, not NaN
        alpha[r] = fast_exp2(__fmul_rn(m[r], scale_log2) - base[r]);
        m[r] = top[r];
    }
#pragma unroll
    for (int i = 0; i < STILES; ++i) {
        s[4 * i] = fast_exp2(fmaf(s[4 * i], scale_log2, -base[0]));
        s[4 * i + 1] = fast_exp2(fmaf(s[4 * i + 1], scale_log2, -base[0]));
        s[4 * i + 2] = fast_exp2(fmaf(s[4 * i + 2], scale_log2, -base[1]));
        s[4 * i + 3] = fast_exp2(fmaf(s[4 * i + 3], scale_log2, -base[1]));
        sum[0] += s[4 * i] + s[4 * i + 1];
        sum[1] += s[4 * i + 2] + s[4 * i + 3];
    }
    l[0] = l[0] * alpha[0] + sum[0];  // this lane's share of the row; summed over its 4 lanes at the end
    l[1] = l[1] * alpha[1] + sum[1];
}

// A row's running sum: this lane's share l added over the row's 4 lanes.
__device__ __forceinline__ float row_sum(float l) {
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    return l + __shfl_xor_sync(0xffffffffu, l, 2);
}

// 1 / a row's running sum (the kernels' final normalisation).
__device__ __forceinline__ float inverse_row_sum(float l) { return 1.0f / row_sum(l); }
