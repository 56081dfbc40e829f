// Tensor-core flash attention forward: fp16 or bf16 Q, K, V, O with fp32 accumulation (mma.sync m16n8k16).
//
// A block owns BR = 16·MT·WARPS query rows of one (batch, head); each warp owns 16·MT of them (MT m-tiles, so that
// each K or V fragment read from shared memory feeds MT products) and keeps their S tile, running max m, running
// sum l and O accumulator in registers, and their Q fragments too where they fit (else re-read per k-step). Key blocks of BC keys stream through shared
// memory in two stages: cp.async fills stage j+1 while the warps compute on stage j. Per key block:
//   S = Q·Kᵀ      ldmatrix (K rows are the B operand's columns), mma.sync into fp32;
//   online softmax in base 2 (log2 e folded into the scale, applied by one FFMA inside each exponent), the row
//   reductions across the 4 lanes of a row;
//   O += P·V     P re-packed from S's accumulators as the A operand (their layouts line up), V through
//                ldmatrix.trans.
// Shared tiles are row-major with 16-byte chunks XOR-swizzled by (row mod 8), so the 8 rows an ldmatrix phase reads
// fall in distinct banks. Split-KV instances (SHARED, the decode path): the block loops over the segments of its
// share of the (tile, key block) units (kernels/kv_rows.cuh), each a tile's rows over a range of its key blocks,
// writing O or a partial state; MERGE instances then merge a tile's partial states in place, in the block that
// finishes the tile's last piece (kernels/split_merge.cuh), so the call is one launch. Causal: key j kept for query i when j <= i; key blocks past the block's last query are
// skipped, and blocks run heaviest first. Any N (rows and keys past N are zero-filled by cp.async and masked);
// D in {64, 128}; compiled by NVRTC through CuPy with -arch=sm_90 (kernels/cuda.py).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cp_async.cuh"
#include "kv_rows.cuh"
#include "merge_kind.cuh"
#include "tc_softmax.cuh"
#include "tile_order.cuh"

// One m16n8k16 tensor-core product, c += a·b, for each input type.
template <typename T>
__device__ __forceinline__ void mma16816(float *c, const unsigned *a, const unsigned *b);

template <>
__device__ __forceinline__ void mma16816<__half>(float *c, const unsigned *a, const unsigned *b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float *c, const unsigned *a, const unsigned *b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two floats rounded to the input type and packed into one 32-bit register (low half first).
template <typename T>
__device__ __forceinline__ unsigned pack2(float lo, float hi);

template <>
__device__ __forceinline__ unsigned pack2<__half>(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned *>(&h);
}

template <>
__device__ __forceinline__ unsigned pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned *>(&h);
}

// Four 8×8 matrices of 16-bit elements; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(unsigned *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(p)));
}

// Element offset of 16-byte chunk `chunk` of row `row` in a row-major tile of D elements per row, chunks swizzled.
template <int D>
__device__ __forceinline__ int swizzled(int row, int chunk) {
    return row * D + ((chunk ^ (row & 7)) << 3);
}

// Rows r0 .. r0+ROWS-1 of a (N, D) matrix into a swizzled shared tile, 16 bytes per cp.async, zeros past N.
template <int ROWS, int D, int THREADS, typename T>
__device__ __forceinline__ void load_tile(T *tile, const T *src, int r0, int n) {
    constexpr int CHUNKS = D / 8;
    for (int e = threadIdx.x; e < ROWS * CHUNKS; e += THREADS) {
        const int r = e / CHUNKS, c = e % CHUNKS;
        const bool valid = r0 + r < n;
        cp_async16(tile + swizzled<D>(r, c), src + (size_t)(valid ? r0 + r : 0) * D + c * 8, valid);
    }
}

template <typename T, int D, int WARPS, int BC, int MT, int STAGES = 2, int KW = 1, bool SHARED = false,
          bool MERGE = false>
__global__ void __launch_bounds__(WARPS * 32, 1)  // at least one block an SM: ptxas may take 255 registers
flash_tc_fwd(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v, T *__restrict__ o,
             float *__restrict__ o_part, float *__restrict__ lse, int *__restrict__ tickets, int nq, int qlen, int n,
             int group, int heads, int shared_parts, float scale_log2, int causal) {
    // MT m-tiles of 16 rows per warp: each K or V fragment read from shared memory feeds MT products.
    // KW key warps: the warps split each key block KW ways (and the rows WARPS / KW ways), each with its own m, l
    // and O, merged at the end: a decode block of a few packed rows keeps every warp computing.
    constexpr int RW = WARPS / KW, ROWS = 16 * MT, BR = ROWS * RW, THREADS = WARPS * 32, KSTEPS = D / 16,
                  KEYS = BC / KW, STILES = KEYS / 8, OTILES = D / 8;
    static_assert(WARPS % KW == 0 && KEYS % 16 == 0, "whole 16-key steps for each key warp");
    // Q's fragments stay in registers when S, O and Q together leave room (about 160 of the 255 registers), else
    // they are re-read from shared memory at each k-step (one ldmatrix per m-tile, shared by STILES products).
    constexpr bool Q_IN_REGS = 4 * MT * (KSTEPS + STILES + OTILES) <= 160;
    extern __shared__ __align__(128) unsigned char smem[];
    T *q_tile = reinterpret_cast<T *>(smem);
    static_assert(SHARED || !MERGE, "only split instances merge");
    static_assert(STAGES >= 2, "at least one key block in flight while another is computed on");
    T *k_tiles = q_tile + BR * D;            // STAGES stages of BC × D
    T *v_tiles = k_tiles + STAGES * BC * D;  // STAGES stages of BC × D

    const KvRows rows{nq, qlen, n, group};
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int row0 = (warp % RW) * ROWS, koff = KW == 1 ? 0 : (warp / RW) * KEYS;  // first row, first key of a block
    const int parts = SHARED ? shared_parts : 0;  // prefill instances compile without the segment loop
    Share share = block_share<BR, BC>(heads, nq, n, parts);
    do {  // prefill: one tile; split-KV: each segment of this block's share (kernels/kv_rows.cuh)
        const Segment seg = next_segment<BR, BC>(share, nq, n, parts, causal);
        const int bh = seg.bh, q0 = seg.q0;
        const T *qg = q + (size_t)bh * nq * D, *kg = k + (size_t)(bh / group) * n * D, *vg = v + (size_t)(bh / group) * n * D;

        const int2 keys = make_int2(seg.key_begin, seg.key_end);  // key blocks past the tile's last query skipped
        const int key_stop = min(keys.y, last_key_bounds(rows, q0, min(BR, nq - q0), causal).y + 1);
        const int blocks = key_stop > keys.x ? (key_stop - keys.x + BC - 1) / BC : 0;

        __syncthreads();  // the last segment's warps are done with shared memory
        load_tile<BR, D, THREADS>(q_tile, qg, q0, nq);
#pragma unroll
        for (int p = 0; p < STAGES - 1; ++p) {  // key blocks 0 .. STAGES-2 in flight (Q in the first group)
            if (p < blocks) {
                load_tile<BC, D, THREADS>(k_tiles + p * BC * D, kg, keys.x + p * BC, n);
                load_tile<BC, D, THREADS>(v_tiles + p * BC * D, vg, keys.x + p * BC, n);
            }
            cp_async_commit();
        }

        unsigned qf[MT][Q_IN_REGS ? KSTEPS : 1][4];
        float acc[MT][OTILES][4];
        float m[MT][2], l[MT][2];  // rows g and g+8 of each m-tile
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int i = 0; i < OTILES; ++i) acc[mt][i][0] = acc[mt][i][1] = acc[mt][i][2] = acc[mt][i][3] = 0.0f;
            m[mt][0] = m[mt][1] = TC_NEG_INF;
            l[mt][0] = l[mt][1] = 0.0f;
        }
        auto q_fragment = [&](unsigned *r, int mt, int kk) {
            ldmatrix_x4(r, q_tile + swizzled<D>(row0 + mt * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), kk * 2 + (lane >> 4)));
        };

        for (int j = 0; j < blocks; ++j) {
            const int stage = j % STAGES, ahead = j + STAGES - 1;
            if (ahead < blocks) {  // key block j + STAGES - 1 into the stage block j - 1 left, while this one is computed on
                load_tile<BC, D, THREADS>(k_tiles + (ahead % STAGES) * BC * D, kg, keys.x + ahead * BC, n);
                load_tile<BC, D, THREADS>(v_tiles + (ahead % STAGES) * BC * D, vg, keys.x + ahead * BC, n);
            }
            cp_async_commit();
            cp_async_wait<STAGES - 1>();  // all but the STAGES - 1 newest groups: block j (and Q) is in shared memory
            __syncthreads();
            if (Q_IN_REGS && j == 0) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int kk = 0; kk < KSTEPS; ++kk) q_fragment(qf[mt][Q_IN_REGS ? kk : 0], mt, kk);
            }
            const int kbase = keys.x + j * BC + koff;  // the warp's first key
            const bool warp_sees = kbase <= last_key_bounds(rows, q0 + row0, ROWS, causal).y && q0 + row0 < nq;
            if (warp_sees) {
                const T *ks = k_tiles + stage * BC * D, *vs = v_tiles + stage * BC * D;
                float s[MT][STILES][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int i = 0; i < STILES; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
#pragma unroll
                for (int kk = 0; kk < KSTEPS; ++kk) {
                    if (!Q_IN_REGS) {
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) q_fragment(qf[mt][0], mt, kk);
                    }
#pragma unroll
                    for (int i = 0; i < STILES; i += 2) {
                        unsigned b[4];
                        ldmatrix_x4(b, ks + swizzled<D>(koff + i * 8 + (lane >> 4) * 8 + (lane & 7),
                                                        kk * 2 + ((lane >> 3) & 1)));
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) {
                            mma16816<T>(s[mt][i], qf[mt][Q_IN_REGS ? kk : 0], b);
                            mma16816<T>(s[mt][i + 1], qf[mt][Q_IN_REGS ? kk : 0], b + 2);
                        }
                    }
                }
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    float alpha[2];
                    online_softmax<STILES>(&s[mt][0][0], m[mt], l[mt], alpha, scale_log2, kbase, keys.y, rows,
                                           q0 + row0 + mt * 16 + g, causal);
#pragma unroll
                    for (int i = 0; i < OTILES; ++i) {
                        acc[mt][i][0] *= alpha[0];
                        acc[mt][i][1] *= alpha[0];
                        acc[mt][i][2] *= alpha[1];
                        acc[mt][i][3] *= alpha[1];
                    }
                }
#pragma unroll
                for (int ks16 = 0; ks16 < KEYS / 16; ++ks16) {
                    unsigned a[MT][4];
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        a[mt][0] = pack2<T>(s[mt][2 * ks16][0], s[mt][2 * ks16][1]);
                        a[mt][1] = pack2<T>(s[mt][2 * ks16][2], s[mt][2 * ks16][3]);
                        a[mt][2] = pack2<T>(s[mt][2 * ks16 + 1][0], s[mt][2 * ks16 + 1][1]);
                        a[mt][3] = pack2<T>(s[mt][2 * ks16 + 1][2], s[mt][2 * ks16 + 1][3]);
                    }
#pragma unroll
                    for (int i = 0; i < OTILES; i += 2) {
                        unsigned b[4];
                        ldmatrix_x4_trans(b, vs + swizzled<D>(koff + ks16 * 16 + ((lane >> 3) & 1) * 8 + (lane & 7),
                                                              i + (lane >> 4)));
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) {
                            mma16816<T>(acc[mt][i], a[mt], b);
                            mma16816<T>(acc[mt][i + 1], a[mt], b + 2);
                        }
                    }
                }
            }
            __syncthreads();  // every warp is done with this stage before the next iteration refills it
        }
        cp_async_wait<0>();  // no copy may still land in shared memory when the block exits (a split with no keys)
        const int kw = KW == 1 ? 0 : warp / RW;
        if constexpr (KW > 1) {  // the key warps' states into the first's, through the K tiles' shared memory
            constexpr int STATE = MT * OTILES * 4 + 4 * MT;  // floats of one lane: O, then m and l of its rows
            float *scratch = reinterpret_cast<float *>(k_tiles);
            static_assert((KW - 1) * RW * 32 * STATE * 4 <= STAGES * BC * D * (int)sizeof(T), "scratch fits K's tiles");
            __syncthreads();  // no warp reads a key tile any more (none at all where the block had no key block)
            auto slot = [&](int key_warp) { return scratch + (((key_warp - 1) * RW + warp % RW) * 32 + lane) * STATE; };
            if (kw > 0) {
                float *mine = slot(kw);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
                    for (int i = 0; i < OTILES; ++i)
#pragma unroll
                        for (int e = 0; e < 4; ++e) mine[(mt * OTILES + i) * 4 + e] = acc[mt][i][e];
                    mine[MT * OTILES * 4 + 4 * mt] = m[mt][0];
                    mine[MT * OTILES * 4 + 4 * mt + 1] = m[mt][1];
                    mine[MT * OTILES * 4 + 4 * mt + 2] = l[mt][0];
                    mine[MT * OTILES * 4 + 4 * mt + 3] = l[mt][1];
                }
            }
            __syncthreads();
#pragma unroll
            for (int other = 1; other < KW && kw == 0; ++other) {
                const float *theirs = slot(other);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        const float m2 = theirs[MT * OTILES * 4 + 4 * mt + r], l2 = theirs[MT * OTILES * 4 + 4 * mt + 2 + r];
                        const float top = fmaxf(m[mt][r], m2);
                        const float base = top == TC_NEG_INF ? 0.0f : __fmul_rn(top, scale_log2);
                        const float a = fast_exp2(__fmul_rn(m[mt][r], scale_log2) - base);
                        const float b = fast_exp2(__fmul_rn(m2, scale_log2) - base);
                        m[mt][r] = top;
                        l[mt][r] = l[mt][r] * a + l2 * b;
#pragma unroll
                        for (int i = 0; i < OTILES; ++i) {
                            acc[mt][i][2 * r] = acc[mt][i][2 * r] * a + theirs[(mt * OTILES + i) * 4 + 2 * r] * b;
                            acc[mt][i][2 * r + 1] = acc[mt][i][2 * r + 1] * a + theirs[(mt * OTILES + i) * 4 + 2 * r + 1] * b;
                        }
                    }
                }
            }
        }
        // prefill: recomputed, fewer registers live through the key loop
        const size_t head_row = (size_t)(SHARED ? bh : tile_slot<BR>(nq, causal).bh) * nq;
#pragma unroll
        for (int mt = 0; mt < MT && kw == 0; ++mt) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float sum = row_sum(l[mt][r]);
                const int query = q0 + row0 + mt * 16 + g + r * 8;
                if (query >= nq) continue;
                const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // a split may hold no key of a row
                if (seg.slot < 0) {
                    T *orow = o + (head_row + query) * D;
#pragma unroll
                    for (int i = 0; i < OTILES; ++i)
                        *reinterpret_cast<unsigned *>(orow + i * 8 + 2 * t) =
                            pack2<T>(acc[mt][i][2 * r] * inv, acc[mt][i][2 * r + 1] * inv);
                } else {
                    const size_t prow = (size_t)seg.slot * BR + query - q0;
                    float *orow = o_part + prow * D;
#pragma unroll
                    for (int i = 0; i < OTILES; ++i)
                        *reinterpret_cast<float2 *>(orow + i * 8 + 2 * t) =
                            make_float2(acc[mt][i][2 * r] * inv, acc[mt][i][2 * r + 1] * inv);
                    if (t == 0) lse[prow] = split_lse(m[mt][r], sum, scale_log2);
                }
            }
        }
        if constexpr (SHARED && MERGE) {  // the tile's last piece merges it (every thread of the block calls)
            if (seg.slot >= 0)
                merge_if_last<MergeKind<T>::value, D, BR, BC, THREADS>(o_part, lse, o, tickets, bh, q0, nq, n, heads, parts);
        }
    } while (share.unit < share.end);
}
