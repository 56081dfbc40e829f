// The Q15 attention contract (docs/q15.md, version 2) on the integer tensor cores, bit-exact with host/q15.py.
//
// A block owns BR = 16·WARPS query rows of one (batch, head); each warp owns 16 of them and walks the contract's key
// blocks of Q15_BC = 64 keys in increasing order, through shared memory shared by the block's warps. Every 16-bit
// operand is split into a signed high and an unsigned low byte (x = hi·256 + lo, kernels/q15_math.cuh), so a 16-bit
// product is four int8 products; mma.sync m16n8k32 sums them over 32 terms into int32 (.s8.s8, .s8.u8, .u8.s8,
// .u8.u8), three accumulators per tile (hi·hi, the two cross terms together, lo·lo), and q15_join recombines them
// exactly in int64. Every int32 partial sum is exact: over d <= 256 terms |Σhi·hi'| <= 2^22,
// |Σ(hi·lo' + lo·hi')| < 2^24, Σlo·lo' < 2^24; over a block's 64 keys for P·V (p in 0..32767: hi <= 127) less.
//   S = Q·Kᵀ   A = Q's bytes (16 rows × 32 dims), B = K's bytes (32 dims × 8 keys, K rows are B's columns);
//              z = sat_32(RSH(acc·M, r)) per score on the CUDA cores, in int64;
//   softmax    the block max over the valid keys (the causal mask per key, aligned to the bottom right: query i of
//              q_len is row seq − q_len + i), the rescale of l and A when it grows, p = EXP2(m − z), all as
//              host/q15.py does, in 64-bit integers; the row reductions across the 4 lanes of a row;
//   O += P·V   P's bytes re-packed from S's accumulators as the A operand: a lane holds keys 8j + 2t, 8j + 2t + 1 of
//              its rows (t = lane mod 4), where the A operand wants keys 4t..4t+3 and 16+4t..16+4t+3 of each 32. An
//              integer sum is order-free, so the kernel keeps P where it is and stores Vᵀ's keys in shared memory in
//              that same order (q15_key_slot): A's k-slot 4t + i and Vᵀ's k-slot 4t + i hold the same key.
// A (Σ p·v, up to 2^46) lives in shared memory as int64, a slot per (warp, element, lane) so that a lane's accesses
// never meet another's; the division of docs/q15.md §6 ends the row. A block with no valid key of a row changes
// nothing of that row (its keys are masked; warps skip the blocks past their last row). Any seq, q_len, group and d
// (d <= D, a multiple of 32; columns past d are zero); compiled by NVRTC through CuPy (kernels/cuda.py) and by nvcc
// in CI (tests/kernels/test_q15_build.py).
#include "q15_math.cuh"

// Bytes of one shared row of Q or K bytes (D + 16: the 8 rows a fragment load reads fall in distinct banks), and of
// one Vᵀ row of a block's 64 keys.
#define Q15_VT_STRIDE (Q15_BC + 16)

__constant__ unsigned q15_exp2_table[64] = {Q15_EXP2_TABLE_VALUES};

// c += a·b on the integer tensor cores, m16n8k32, int32 accumulation, each signedness of A and B.
#define Q15_MMA(NAME, TYPES)                                                                                      \
    __device__ __forceinline__ void NAME(int *c, const unsigned *a, const unsigned *b) {                          \
        asm volatile("mma.sync.aligned.m16n8k32.row.col.s32." TYPES ".s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "           \
                     "{%8,%9}, {%0,%1,%2,%3};\n"                                                                  \
                     : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])                                             \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                         \
    }
Q15_MMA(mma_s8s8, "s8.s8")
Q15_MMA(mma_s8u8, "s8.u8")
Q15_MMA(mma_u8s8, "u8.s8")
Q15_MMA(mma_u8u8, "u8.u8")

// The k-slot (0..31) of key `key` (0..31) of a 32-key step in the P operand as S's accumulators leave it: key
// 8j + 2t + b sits in slot 16·(j / 2) + 4t + 2·(j mod 2) + b.
__device__ __forceinline__ int q15_key_slot(int key) {
    const int j = key >> 3, t = (key & 7) >> 1, b = key & 1;
    return 16 * (j >> 1) + 4 * t + 2 * (j & 1) + b;
}

// The four fragment registers of a 16 × 32 A operand (rows g, g + 8; bytes 4t.. and 16 + 4t..) from shared bytes.
__device__ __forceinline__ void q15_load_a(unsigned *a, const unsigned char *base, int stride, int g, int t) {
    a[0] = *reinterpret_cast<const unsigned *>(base + g * stride + 4 * t);
    a[1] = *reinterpret_cast<const unsigned *>(base + (g + 8) * stride + 4 * t);
    a[2] = *reinterpret_cast<const unsigned *>(base + g * stride + 16 + 4 * t);
    a[3] = *reinterpret_cast<const unsigned *>(base + (g + 8) * stride + 16 + 4 * t);
}

// The two fragment registers of a 32 × 8 B operand whose column g is shared row g (bytes 4t.. and 16 + 4t..).
__device__ __forceinline__ void q15_load_b(unsigned *b, const unsigned char *base, int stride, int g, int t) {
    b[0] = *reinterpret_cast<const unsigned *>(base + g * stride + 4 * t);
    b[1] = *reinterpret_cast<const unsigned *>(base + g * stride + 16 + 4 * t);
}

// Max and sum over the 4 lanes of a row.
__device__ __forceinline__ int q15_row_max(int x) {
    x = max(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return max(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ int q15_row_sum(int x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
__device__ __forceinline__ unsigned long long q15_row_max_u64(unsigned long long x) {
    const unsigned long long y = __shfl_xor_sync(0xffffffffu, x, 1);
    x = x > y ? x : y;
    const unsigned long long z = __shfl_xor_sync(0xffffffffu, x, 2);
    return x > z ? x : z;
}

// Q (B·H, nq, d), K and V (B·Hkv, n, d) int16 Q15; o (B·H, nq, d) int16 and shift (B·H, nq) uint8 out. nq queries
// per head against n keys (row0 = n − nq: query i is the contract's row row0 + i), `group` query heads per K/V head,
// causal 0 or 1, the score scale (mult, rshift). Grid: ⌈nq / BR⌉ tiles × B·H heads on x; 32·WARPS threads.
template <int D, int WARPS>
__global__ void __launch_bounds__(32 * WARPS)
    q15_attention(const short *q, const short *k, const short *v, short *o, unsigned char *shift, int nq, int n,
                  int group, int d, int causal, int mult, int rshift) {
    static_assert(D % 32 == 0 && D <= 256, "D: a multiple of 32, at most 256");
    constexpr int BR = 16 * WARPS, QS = D + 16, VS = Q15_VT_STRIDE, THREADS = 32 * WARPS;
    extern __shared__ __align__(16) unsigned char smem[];
    long long *acc = reinterpret_cast<long long *>(smem);  // (WARPS, D/2, 32): A, a slot per lane and element
    unsigned *table = reinterpret_cast<unsigned *>(acc + BR * D);
    unsigned char *q_hi = reinterpret_cast<unsigned char *>(table + 64), *q_lo = q_hi + BR * QS;  // (BR, QS)
    unsigned char *k_hi = q_lo + BR * QS, *k_lo = k_hi + Q15_BC * QS;                            // (Bc, QS)
    unsigned char *v_hi = k_lo + Q15_BC * QS, *v_lo = v_hi + D * VS;                              // (D, VS): Vᵀ

    const int tiles = (nq + BR - 1) / BR, tile = blockIdx.x % tiles, head = blockIdx.x / tiles;
    const long long kv_base = (long long)(head / group) * n * d, q_base = (long long)head * nq * d;
    const int row0 = n - nq, i0 = tile * BR;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int w0 = i0 + 16 * warp;  // the warp's first row (of nq)
    // keys the block reads, and the warp: to the last row's own key when causal
    const int key_end = causal ? row0 + min(nq, i0 + BR) : n;
    const int warp_key_end = w0 >= nq ? 0 : causal ? row0 + min(nq, w0 + 16) : n;

    for (int i = threadIdx.x; i < 64; i += THREADS) table[i] = q15_exp2_table[i];
    for (int i = threadIdx.x; i < BR * D; i += THREADS) {
        const int r = i / D, c = i % D;
        const int x = i0 + r < nq && c < d ? q[q_base + (long long)(i0 + r) * d + c] : 0;
        q_hi[r * QS + c] = (unsigned char)q15_hi(x);
        q_lo[r * QS + c] = (unsigned char)q15_lo(x);
    }
    long long *my_acc = acc + warp * (D / 2) * 32 + lane;  // element e at my_acc[32·e]
    for (int e = 0; e < D / 2; ++e) my_acc[32 * e] = 0;

    int m[2] = {Q15_INT32_MIN, Q15_INT32_MIN};  // rows g and g + 8: running max (Q15.16) and sum
    long long l[2] = {0, 0};
    const int pos[2] = {row0 + w0 + g, row0 + w0 + g + 8};  // the rows' positions among the keys
    const unsigned char *wq_hi = q_hi + 16 * warp * QS, *wq_lo = q_lo + 16 * warp * QS;

    for (int j0 = 0; j0 < key_end; j0 += Q15_BC) {
        __syncthreads();  // every warp is done with the previous block's K and V
        for (int i = threadIdx.x; i < Q15_BC * D; i += THREADS) {
            const int key = i / D, c = i % D;
            const bool in = j0 + key < n && c < d;
            const int kx = in ? k[kv_base + (long long)(j0 + key) * d + c] : 0;
            const int vx = in ? v[kv_base + (long long)(j0 + key) * d + c] : 0;
            k_hi[key * QS + c] = (unsigned char)q15_hi(kx);
            k_lo[key * QS + c] = (unsigned char)q15_lo(kx);
            const int slot = (key & ~31) + q15_key_slot(key & 31);
            v_hi[c * VS + slot] = (unsigned char)q15_hi(vx);
            v_lo[c * VS + slot] = (unsigned char)q15_lo(vx);
        }
        __syncthreads();
        if (j0 >= warp_key_end) continue;  // no key of this block is visible to the warp's rows

        int z[8][4];  // S tile, 16 rows × 64 keys: z[j][e] is row g + 8·(e/2), key j0 + 8j + 2t + (e mod 2)
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            int hh[4] = {0, 0, 0, 0}, mid[4] = {0, 0, 0, 0}, ll[4] = {0, 0, 0, 0};
#pragma unroll
            for (int ks = 0; ks < D / 32; ++ks) {
                unsigned ah[4], al[4], bh[2], bl[2];
                q15_load_a(ah, wq_hi + 32 * ks, QS, g, t);
                q15_load_a(al, wq_lo + 32 * ks, QS, g, t);
                q15_load_b(bh, k_hi + 8 * j * QS + 32 * ks, QS, g, t);
                q15_load_b(bl, k_lo + 8 * j * QS + 32 * ks, QS, g, t);
                mma_s8s8(hh, ah, bh);
                mma_s8u8(mid, ah, bl);
                mma_u8s8(mid, al, bh);
                mma_u8u8(ll, al, bl);
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) z[j][e] = q15_score(q15_join(hh[e], mid[e], ll[e]), mult, rshift);
        }

        // the block max over each row's valid keys; a row with none changes nothing
        int top[2] = {Q15_INT32_MIN, Q15_INT32_MIN}, seen[2] = {0, 0};
        unsigned valid = 0;  // bit 4j + e: z[j][e]'s key is visible to its row
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int key = j0 + 8 * j + 2 * t + (e & 1), r = e >> 1;
                if (key < n && (!causal || key <= pos[r])) {
                    valid |= 1u << (4 * j + e);
                    top[r] = max(top[r], z[j][e]);
                    seen[r] = 1;
                }
            }
        }
        int alpha[2], grow[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            top[r] = q15_row_max(top[r]);
            grow[r] = q15_row_max(seen[r]) && top[r] > m[r];
            alpha[r] = grow[r] ? q15_exp2((long long)top[r] - m[r], table) : 0;
            if (grow[r]) {
                l[r] = q15_rescale(l[r], alpha[r]);
                m[r] = top[r];
            }
        }
        int sum[2] = {0, 0};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = e >> 1;
                z[j][e] = valid >> (4 * j + e) & 1 ? q15_exp2((long long)m[r] - z[j][e], table) : 0;  // now p
                sum[r] += z[j][e];
            }
        }
        l[0] += q15_row_sum(sum[0]);
        l[1] += q15_row_sum(sum[1]);

        // P's bytes as the A operand of each 32-key step: slots 4t.. hold keys 8j + 2t (+1) of j = 4s, 4s + 1, slots
        // 16 + 4t.. those of j = 4s + 2, 4s + 3, in rows g (registers 0, 2) and g + 8 (1, 3)
        unsigned ph[2][4], pl[2][4];
#pragma unroll
        for (int s = 0; s < 2; ++s) {
#pragma unroll
            for (int reg = 0; reg < 4; ++reg) {
                const int j = 4 * s + 2 * (reg >> 1), e = 2 * (reg & 1);
                const int p0 = z[j][e], p1 = z[j][e + 1], p2 = z[j + 1][e], p3 = z[j + 1][e + 1];
                ph[s][reg] = q15_pack4(q15_hi(p0), q15_hi(p1), q15_hi(p2), q15_hi(p3));
                pl[s][reg] = q15_pack4(q15_lo(p0), q15_lo(p1), q15_lo(p2), q15_lo(p3));
            }
        }
#pragma unroll 4
        for (int nt = 0; nt < D / 8; ++nt) {  // output columns 8·nt .. 8·nt + 7
            int hh[4] = {0, 0, 0, 0}, mid[4] = {0, 0, 0, 0}, ll[4] = {0, 0, 0, 0};
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                unsigned bh[2], bl[2];
                q15_load_b(bh, v_hi + 8 * nt * VS + 32 * s, VS, g, t);
                q15_load_b(bl, v_lo + 8 * nt * VS + 32 * s, VS, g, t);
                mma_u8s8(hh, ph[s], bh);
                mma_u8u8(mid, ph[s], bl);
                mma_u8s8(mid, pl[s], bh);
                mma_u8u8(ll, pl[s], bl);
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) {  // element (row g + 8·(e/2), column 8·nt + 2t + (e mod 2))
                long long a = my_acc[32 * (4 * nt + e)];
                if (grow[e >> 1]) a = q15_rescale(a, alpha[e >> 1]);
                my_acc[32 * (4 * nt + e)] = a + q15_join(hh[e], mid[e], ll[e]);
            }
        }
    }
    if (w0 >= nq) return;

    // the division (docs/q15.md §6): each row's shift from its peak |A| and l, then every column
    unsigned long long peak[2] = {0, 0};
    for (int e = 0; e < D / 2; ++e) {
        const long long a = my_acc[32 * e];
        const unsigned long long mag = (unsigned long long)(a < 0 ? -a : a);
        peak[(e >> 1) & 1] = mag > peak[(e >> 1) & 1] ? mag : peak[(e >> 1) & 1];
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = w0 + g + 8 * r, shift_g = q15_out_shift(q15_row_max_u64(peak[r]), l[r]);
        if (row >= nq) continue;
        const Q15Divisor divisor = q15_divisor(l[r], shift_g);
        for (int nt = 0; nt < D / 8; ++nt) {
            for (int b = 0; b < 2; ++b) {
                const int c = 8 * nt + 2 * t + b;
                if (c < d) {
                    o[q_base + (long long)row * d + c] = (short)q15_divide(my_acc[32 * (4 * nt + 2 * r + b)], divisor);
                }
            }
        }
        if (t == 0) shift[(long long)head * nq + row] = (unsigned char)shift_g;
    }
}
