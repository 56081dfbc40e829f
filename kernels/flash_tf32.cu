// Flash attention forward in fp32 on the tensor cores by 3xTF32: Q, K, V and O are fp32, and each product a·b is
// computed as a_big·b_big + a_big·b_small + a_small·b_big with mma.sync m16n8k8 TF32 (x = big + small, both rounded
// to TF32's 10-bit mantissa; the dropped small·small term is about 2^-22 of the product), which keeps fp32-level
// accuracy at a multiple of the FFMA rate: the arithmetic torch's EFFICIENT kernel uses for fp32 on sm_80 and later
// (CUTLASS's OpMultiplyAddFastF32). The tensor cores add into their accumulator with truncation, so a long chain of
// MMAs into one accumulator drifts toward zero (measured: 12 to 40x torch's error at N 1000 to 4097 with P·V across all keys in
// one accumulator); as in CUTLASS, the products are staged: S in groups of KGROUP k-steps, P·V per key block, each
// stage from zero and added to the total in fp32 (for P·V: acc = acc·alpha + stage, one rounding).
//
// A block owns BR = 16·MT·WARPS query rows of one (batch, head); each warp owns 16·MT of them and keeps their S tile,
// running max m, running sum l and O accumulator in registers, and Q's split fragments too where they fit (else it
// re-reads and re-splits them at each k-step). Key blocks of BC keys stream through shared memory in two stages:
// cp.async fills stage j+1 while the warps compute on stage j. Per key block:
//   S = Q·Kᵀ    the k index of each 8-wide step is permuted (the sum does not care): lane (g, t) takes k = 2t and
//               2t+1 where the instruction says t and t+4, so its A pair (Q row g) and B pair (K row g) are one
//               64-bit shared load each; rows are D + 8 floats apart, so a half-warp's loads fall in distinct banks;
//   online softmax in base 2 (kernels/tc_softmax.cuh: the accumulator layout is the m16n8k16 one);
//   O += P·V   S's accumulators are P's A fragments as they stand (the same permutation, keys 2t and 2t+1), V's
//               pairs are two 32-bit loads of rows 2t and 2t+1 (rows D + 4 floats apart: distinct banks).
// Causal: key j kept for query i when j <= i; key blocks past the block's last query are skipped, and blocks run
// heaviest first. Any N (rows and keys past N are zero-filled by cp.async and masked); D a multiple of 8 (64 and 128
// are built); compiled by NVRTC through CuPy (kernels/cuda.py).
#include "cp_async.cuh"
#include "kv_rows.cuh"
#include "tc_softmax.cuh"
#include "tile_order.cuh"

// x rounded to TF32 (the top 10 mantissa bits, to nearest), as the bits of a float whose low 13 bits are zero.
__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

// x = big + small: big is x in TF32, small the remainder (exact in fp32) in TF32.
__device__ __forceinline__ void split_tf32(float x, unsigned &big, unsigned &small) {
    big = to_tf32(x);
    small = to_tf32(x - __uint_as_float(big));
}

// One m16n8k8 TF32 tensor-core product, c += a·b.
__device__ __forceinline__ void mma1688(float *c, const unsigned *a, const unsigned *b) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// A split operand: the big and small TF32 halves of each fragment register.
template <int REGS>
struct Split {
    unsigned big[REGS], small[REGS];

    __device__ __forceinline__ void set(const float (&x)[REGS]) {
#pragma unroll
        for (int i = 0; i < REGS; ++i) split_tf32(x[i], big[i], small[i]);
    }
};

// c += a·b in 3xTF32, the small terms first so that they are not lost against the large one.
__device__ __forceinline__ void mma_3xtf32(float *c, const Split<4> &a, const Split<2> &b) {
    mma1688(c, a.small, b.big);
    mma1688(c, a.big, b.small);
    mma1688(c, a.big, b.big);
}

// Rows r0 .. r0+ROWS-1 of a (N, D) fp32 matrix into a shared tile with rows LD floats apart, 16 bytes per cp.async,
// zeros past N.
template <int ROWS, int D, int LD, int THREADS>
__device__ __forceinline__ void load_rows(float *tile, const float *src, int r0, int n) {
    constexpr int CHUNKS = D / 4;
    for (int e = threadIdx.x; e < ROWS * CHUNKS; e += THREADS) {
        const int r = e / CHUNKS, c = e % CHUNKS;
        const bool valid = r0 + r < n;
        cp_async16(tile + r * LD + c * 4, src + (size_t)(valid ? r0 + r : 0) * D + c * 4, valid);
    }
}

// The two floats at p (8-byte aligned) from shared memory, as x[i] and x[i + 1].
__device__ __forceinline__ void load_pair(float *x, const float *p) {
    const float2 v = *reinterpret_cast<const float2 *>(p);
    x[0] = v.x;
    x[1] = v.y;
}

// k-steps of Q·Kᵀ accumulated in one stage: CUTLASS's 32-wide k tile.
#define TF32_KGROUP 4

template <int D, int WARPS, int BC, int MT, bool Q_IN_REGS, bool SHARED = false>
__global__ void __launch_bounds__(WARPS * 32)
flash_tf32_fwd(const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,
               float *__restrict__ o, float *__restrict__ o_part, float *__restrict__ lse, int nq, int qlen, int n,
               int group, int heads, int shared_parts, float scale_log2, int causal) {
    constexpr int ROWS = 16 * MT, BR = ROWS * WARPS, THREADS = WARPS * 32, KSTEPS = D / 8, STILES = BC / 8,
                  OTILES = D / 8;
    constexpr int QK_LD = D + 8, V_LD = D + 4;  // row strides in floats (bank-conflict-free, 16-byte aligned)
    // Q_IN_REGS: Q's split fragments (8 registers per m-tile and k-step) stay in registers, else they are re-read
    // and re-split at each k-step (kernels/budget.py TF32_CONFIGS picks, by measurement).
    extern __shared__ __align__(128) unsigned char smem[];
    float *q_tile = reinterpret_cast<float *>(smem);
    float *k_tiles = q_tile + BR * QK_LD;      // two stages of BC × QK_LD
    float *v_tiles = k_tiles + 2 * BC * QK_LD;  // two stages of BC × V_LD

    const KvRows rows{nq, qlen, n, group};
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int row0 = warp * ROWS;  // the warp's first row in the tile
    const int parts = SHARED ? shared_parts : 0;  // prefill instances compile without the segment loop
    Share share = block_share<BR, BC>(heads, nq, n, parts);
    do {  // prefill: one tile; split-KV: each segment of this block's share (kernels/kv_rows.cuh)
        const Segment seg = next_segment<BR, BC>(share, nq, n, parts, causal);
        const int bh = seg.bh, q0 = seg.q0;
        const size_t head_row = (size_t)bh * nq, kv_head = (size_t)(bh / group) * n * D;
        const float *qg = q + head_row * D, *kg = k + kv_head, *vg = v + kv_head;

        const int2 keys = make_int2(seg.key_begin, seg.key_end);  // key blocks past the tile's last query skipped
        const int key_stop = min(keys.y, last_key_bounds(rows, q0, min(BR, nq - q0), causal).y + 1);
        const int blocks = key_stop > keys.x ? (key_stop - keys.x + BC - 1) / BC : 0;

        __syncthreads();  // the last segment's warps are done with shared memory
        load_rows<BR, D, QK_LD, THREADS>(q_tile, qg, q0, nq);
        load_rows<BC, D, QK_LD, THREADS>(k_tiles, kg, keys.x, n);
        load_rows<BC, D, V_LD, THREADS>(v_tiles, vg, keys.x, n);
        cp_async_commit();

        Split<4> qf[MT][Q_IN_REGS ? KSTEPS : 1];
        float acc[MT][OTILES][4];
        float m[MT][2], l[MT][2];  // rows g and g+8 of each m-tile
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int i = 0; i < OTILES; ++i) acc[mt][i][0] = acc[mt][i][1] = acc[mt][i][2] = acc[mt][i][3] = 0.0f;
            m[mt][0] = m[mt][1] = TC_NEG_INF;
            l[mt][0] = l[mt][1] = 0.0f;
        }
        // Q's A fragment of m-tile mt at k-step kk: a0, a2 from row g (k = 2t, 2t+1), a1, a3 from row g + 8.
        auto q_fragment = [&](Split<4> &r, int mt, int kk) {
            const float *row = q_tile + (row0 + mt * 16 + g) * QK_LD + kk * 8 + 2 * t;
            float x[4];
            const float2 lo = *reinterpret_cast<const float2 *>(row);
            const float2 hi = *reinterpret_cast<const float2 *>(row + 8 * QK_LD);
            x[0] = lo.x, x[2] = lo.y, x[1] = hi.x, x[3] = hi.y;
            r.set(x);
        };

        for (int j = 0; j < blocks; ++j) {
            const int stage = j & 1;
            if (j + 1 < blocks) {  // the next key block into the other stage, while this one is computed on
                load_rows<BC, D, QK_LD, THREADS>(k_tiles + (stage ^ 1) * BC * QK_LD, kg, keys.x + (j + 1) * BC, n);
                load_rows<BC, D, V_LD, THREADS>(v_tiles + (stage ^ 1) * BC * V_LD, vg, keys.x + (j + 1) * BC, n);
            }
            cp_async_commit();
            cp_async_wait<1>();  // everything but the group just issued: block j (and Q) is in shared memory
            __syncthreads();
            if (Q_IN_REGS && j == 0) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int kk = 0; kk < KSTEPS; ++kk) q_fragment(qf[mt][Q_IN_REGS ? kk : 0], mt, kk);
            }
            const int kbase = keys.x + j * BC;
            const bool warp_sees = kbase <= last_key_bounds(rows, q0 + row0, ROWS, causal).y && q0 + row0 < nq;
            if (warp_sees) {
                const float *ks = k_tiles + stage * BC * QK_LD, *vs = v_tiles + stage * BC * V_LD;
                float s[MT][STILES][4];
#pragma unroll
                for (int k0 = 0; k0 < KSTEPS; k0 += TF32_KGROUP) {
                    float part[MT][STILES][4];
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                        for (int i = 0; i < STILES; ++i)
                            part[mt][i][0] = part[mt][i][1] = part[mt][i][2] = part[mt][i][3] = 0.0f;
#pragma unroll
                    for (int kk = k0; kk < k0 + TF32_KGROUP && kk < KSTEPS; ++kk) {
                        if (!Q_IN_REGS) {
#pragma unroll
                            for (int mt = 0; mt < MT; ++mt) q_fragment(qf[mt][0], mt, kk);
                        }
#pragma unroll
                        for (int i = 0; i < STILES; ++i) {
                            float x[2];
                            load_pair(x, ks + (i * 8 + g) * QK_LD + kk * 8 + 2 * t);  // B = Kᵀ: column g is K's row g
                            Split<2> b;
                            b.set(x);
#pragma unroll
                            for (int mt = 0; mt < MT; ++mt) mma_3xtf32(part[mt][i], qf[mt][Q_IN_REGS ? kk : 0], b);
                        }
                    }
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                        for (int i = 0; i < STILES; ++i)
#pragma unroll
                            for (int e = 0; e < 4; ++e) s[mt][i][e] = k0 == 0 ? part[mt][i][e] : s[mt][i][e] + part[mt][i][e];
                }
                float alpha[MT][2];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
                    online_softmax<STILES>(&s[mt][0][0], m[mt], l[mt], alpha[mt], scale_log2, kbase, keys.y, rows,
                                           q0 + row0 + mt * 16 + g, causal);
                float part[MT][OTILES][4];  // this key block's P·V, staged from zero
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int i = 0; i < OTILES; ++i) part[mt][i][0] = part[mt][i][1] = part[mt][i][2] = part[mt][i][3] = 0.0f;
#pragma unroll
                for (int kp = 0; kp < STILES; ++kp) {  // 8 keys per step: P's A fragment is S's tile kp
                    Split<4> a[MT];
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        const float x[4] = {s[mt][kp][0], s[mt][kp][2], s[mt][kp][1], s[mt][kp][3]};
                        a[mt].set(x);
                    }
                    const float *v_rows = vs + (kp * 8 + 2 * t) * V_LD + g;  // keys 2t and 2t+1, column g
#pragma unroll
                    for (int i = 0; i < OTILES; ++i) {
                        const float x[2] = {v_rows[i * 8], v_rows[V_LD + i * 8]};
                        Split<2> b;
                        b.set(x);
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) mma_3xtf32(part[mt][i], a[mt], b);
                    }
                }
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int i = 0; i < OTILES; ++i)
#pragma unroll
                        for (int e = 0; e < 4; ++e) acc[mt][i][e] = fmaf(acc[mt][i][e], alpha[mt][e >> 1], part[mt][i][e]);
            }
            __syncthreads();  // every warp is done with this stage before the next iteration refills it
        }
        cp_async_wait<0>();  // no copy may still land in shared memory when the block exits (a split with no keys)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float sum = row_sum(l[mt][r]);
                const int query = q0 + row0 + mt * 16 + g + r * 8;
                if (query >= nq) continue;
                const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // a split may hold no key of a row
                const size_t prow = seg.slot < 0 ? head_row + query : (size_t)seg.slot * BR + query - q0;
                float *orow = (seg.slot < 0 ? o : o_part) + prow * D;
#pragma unroll
                for (int i = 0; i < OTILES; ++i) {
                    *reinterpret_cast<float2 *>(orow + i * 8 + 2 * t) =
                        make_float2(acc[mt][i][2 * r] * inv, acc[mt][i][2 * r + 1] * inv);
                }
                if (seg.slot >= 0 && t == 0) lse[prow] = split_lse(m[mt][r], sum, scale_log2);
            }
        }
    } while (share.unit < share.end);
}
