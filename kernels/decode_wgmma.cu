// Split-KV decode on Hopper (sm_90a): a K/V head's packed query rows (its G query heads' q_len queries one after
// another, kernels/kv_rows.cuh) in tiles of 64 rows against a long KV cache, on warpgroup MMA (`wgmma`) with K and V
// brought in by the bulk tensor copy engine (TMA). fp16 or bf16 in and out, fp32 accumulation.
//
// Why a second Hopper kernel: at q_len 16 a Llama-style group packs 64 rows, and the mma.sync split kernel
// (kernels/flash_tc.cu) reads every K and V fragment from shared memory once per warp, four times per key block, and
// runs out of shared-memory bandwidth before HBM's (docs/gpu.md, Decode). wgmma reads each K and V tile from shared
// memory once per warpgroup.
//
// A block is one consumer warpgroup (warps 0-3, the tile's 64 rows, 16 per warp) and one producer warpgroup (warps
// 4-7, lowered to 24 registers; one thread issues every copy). The launch's `parts` blocks share the (tile, key
// block) units in equal contiguous shares (a stream-K schedule, kernels/kv_rows.cuh block_share / next_segment);
// each block walks the segments of its share: a segment holding all of a tile's keys writes O, any other writes its
// rows' partial state into the slot next_segment names, merged in place (MERGE: the block finishing a tile's last
// piece, kernels/split_merge.cuh, among the consumer warpgroup's 128 threads at named barrier 1) or by
// kernels/split_combine.cu.
// Shared memory: two Q tiles (a segment's Q is loaded while the previous segment still computes), and STAGES stages
// of K and V, each tile stored as D/64 column halves of 64 elements (128-byte rows, the copy engine's 128-byte
// swizzle). mbarriers: q_full / q_empty per Q buffer, k_full / v_full / empty per stage; the stage counter runs on
// across segments, so the producer streams the next segment's keys while the consumers finish this one's.
// Per key block (the prefill kernel's schedule 1): S_j = Q·K_jᵀ is issued with the previous block's P·V behind it,
// so block j's softmax runs while that P·V occupies the tensor cores.

#include "hopper_sync.cuh"
#include "kv_rows.cuh"
#include "split_merge.cuh"
#include "tc_softmax.cuh"

template <int KIND, int D, int BC, int STAGES, bool MERGE = false>
__global__ void __launch_bounds__(256, 1)
decode_wgmma_fwd(const void *map_q, const void *map_k, const void *map_v, unsigned short *__restrict__ o,
                 float *__restrict__ o_part, float *__restrict__ lse, int *__restrict__ tickets, int nq, int qlen,
                 int n, int heads, int parts, float scale_log2, int causal) {
    constexpr int BR = 64, HALVES = D / 64, KSTEPS = D / 16, STILES = BC / 8, OTILES = D / 8;
    constexpr unsigned ROW = 128;  // bytes per row of a 64-column half
    constexpr unsigned Q_BYTES = BR * D * 2, KV_BYTES = BC * D * 2;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // the swizzle repeats every 1024 bytes and is taken from the address: tiles start on a 1024-byte boundary
    unsigned char *smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    unsigned char *q_tiles = smem;                         // [2][HALVES][BR][64]
    unsigned char *k_tiles = q_tiles + 2 * Q_BYTES;        // [STAGES][HALVES][BC][64]
    unsigned char *v_tiles = k_tiles + STAGES * KV_BYTES;  // [STAGES][HALVES][BC][64]
    u64 *bars = reinterpret_cast<u64 *>(v_tiles + STAGES * KV_BYTES);
    u64 *q_full = bars, *q_empty = bars + 2, *k_full = bars + 4, *v_full = k_full + STAGES, *empty = v_full + STAGES;

    const KvRows rows{nq, qlen, n, 1};
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        for (int b = 0; b < 2; ++b) {
            mbar_init(q_full + b, 1);
            mbar_init(q_empty + b, 128);
        }
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(k_full + s, 1);
            mbar_init(v_full + s, 1);
            mbar_init(empty + s, 128);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    // The key blocks of a segment a tile's rows see (past the tile's greatest last key none is read).
    auto key_blocks = [&](const Segment &seg) {
        const int stop = min(seg.key_end, last_key_bounds(rows, seg.q0, min(BR, nq - seg.q0), causal).y + 1);
        return stop > seg.key_begin ? (stop - seg.key_begin + BC - 1) / BC : 0;
    };

    if (warp >= 4) {  // the producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(24));
        if (warp == 4 && lane == 0) {
            Share share = block_share<BR, BC>(heads, nq, n, parts);
            int c = 0;  // key blocks loaded so far: stage c % STAGES, its (c / STAGES)-th use
            for (int segment = 0; share.unit < share.end; ++segment) {
                const Segment seg = next_segment<BR, BC>(share, nq, n, parts, causal);
                const int b = segment & 1, blocks = key_blocks(seg);
                if (segment >= 2) mbar_wait(q_empty + b, ((segment >> 1) - 1) & 1);
                mbar_expect_tx(q_full + b, Q_BYTES);
                for (int h = 0; h < HALVES; ++h)
                    tma_load(q_tiles + b * Q_BYTES + h * BR * ROW, map_q, 64 * h, seg.q0, seg.bh, q_full + b);
                for (int j = 0; j < blocks; ++j, ++c) {
                    const int s = c % STAGES, key = seg.key_begin + j * BC;
                    if (c >= STAGES) mbar_wait(empty + s, ((c / STAGES) - 1) & 1);
                    unsigned char *ks = k_tiles + s * KV_BYTES, *vs = v_tiles + s * KV_BYTES;
                    mbar_expect_tx(k_full + s, KV_BYTES);
                    for (int h = 0; h < HALVES; ++h) tma_load(ks + h * BC * ROW, map_k, 64 * h, key, seg.bh, k_full + s);
                    mbar_expect_tx(v_full + s, KV_BYTES);
                    for (int h = 0; h < HALVES; ++h) tma_load(vs + h * BC * ROW, map_v, 64 * h, key, seg.bh, v_full + s);
                }
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(240));

    const int g = lane >> 2, t = lane & 3, row0 = warp * 16;  // the warp's first row in the tile
    float acc[OTILES * 4], sc[STILES * 4];
    unsigned p[BC / 16][4];  // P as the A operand, one k16 step of keys per entry
    float m[2], l[2];        // rows g and g+8 of the warp's 16
    Share share = block_share<BR, BC>(heads, nq, n, parts);
    int c = 0;  // key blocks consumed so far, as the producer counts them
    for (int segment = 0; share.unit < share.end; ++segment) {
        const Segment seg = next_segment<BR, BC>(share, nq, n, parts, causal);
        const int b = segment & 1, blocks = key_blocks(seg);
        const unsigned q_base = smem_u32(q_tiles + b * Q_BYTES);
#pragma unroll
        for (int i = 0; i < OTILES * 4; ++i) acc[i] = 0.0f;
        m[0] = m[1] = TC_NEG_INF;
        l[0] = l[1] = 0.0f;

        auto issue_scores = [&](int j) {  // S = Q·K_jᵀ: D/16 steps, 16 columns = 32 bytes along the 128-byte rows
            const unsigned k_base = smem_u32(k_tiles + ((c + j) % STAGES) * KV_BYTES);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < KSTEPS; ++kk)
                wgmma_ss<BC, KIND>(sc, descriptor(q_base + (kk / 4) * BR * ROW + (kk % 4) * 32, 16, 1024),
                                   descriptor(k_base + (kk / 4) * BC * ROW + (kk % 4) * 32, 16, 1024), 0 + (kk > 0));
            wgmma_commit();
        };
        auto issue_pv = [&](int j) {  // O += P·V_j: 16 keys = two 8-row groups of 1024 bytes; halves BC·128 apart
            mbar_wait(v_full + (c + j) % STAGES, ((c + j) / STAGES) & 1);
            const unsigned v_base = smem_u32(v_tiles + ((c + j) % STAGES) * KV_BYTES);
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < BC / 16; ++ks)
                wgmma_rs<D, KIND>(acc, p[ks], descriptor(v_base + ks * 16 * ROW, BC * ROW, 1024), 1);
            wgmma_commit();
        };

        mbar_wait(q_full + b, (segment >> 1) & 1);
        for (int j = 0; j < blocks; ++j) {
            float alpha[2];
            mbar_wait(k_full + (c + j) % STAGES, ((c + j) / STAGES) & 1);
            issue_scores(j);
            if (j > 0) {
                issue_pv(j - 1);
                wgmma_wait<1>();
            } else {
                wgmma_wait<0>();
            }
            fence_operands<STILES * 4>(sc);
            online_softmax<STILES>(sc, m, l, alpha, scale_log2, seg.key_begin + j * BC, seg.key_end, rows,
                                   seg.q0 + row0 + g, causal);
            wgmma_wait<0>();
            fence_operands<OTILES * 4>(acc);
            fence_operands<BC / 4>(&p[0][0]);
            if (j > 0) mbar_arrive(empty + (c + j - 1) % STAGES);
            rescale_and_pack<OTILES, BC, KIND>(acc, p, sc, alpha);
        }
        mbar_arrive(q_empty + b);  // every S of this segment has been waited for: its Q buffer is free
        if (blocks > 0) {          // the last block's P·V
            issue_pv(blocks - 1);
            wgmma_wait<0>();
            fence_operands<OTILES * 4>(acc);
            mbar_arrive(empty + (c + blocks - 1) % STAGES);
        }
        c += blocks;

#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float sum = row_sum(l[r]);
            const int query = seg.q0 + row0 + g + r * 8;
            if (query >= nq) continue;
            const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // a split may hold no key of a row
            if (seg.slot < 0) {
                unsigned short *orow = o + ((size_t)seg.bh * nq + query) * D;
#pragma unroll
                for (int i = 0; i < OTILES; ++i)
                    *reinterpret_cast<unsigned *>(orow + i * 8 + 2 * t) =
                        pack2<KIND>(acc[4 * i + 2 * r] * inv, acc[4 * i + 2 * r + 1] * inv);
            } else {
                const size_t prow = (size_t)seg.slot * BR + query - seg.q0;
                float *orow = o_part + prow * D;
#pragma unroll
                for (int i = 0; i < OTILES; ++i)
                    *reinterpret_cast<float2 *>(orow + i * 8 + 2 * t) =
                        make_float2(acc[4 * i + 2 * r] * inv, acc[4 * i + 2 * r + 1] * inv);
                if (t == 0) lse[prow] = split_lse(m[r], sum, scale_log2);
            }
        }
        if (MERGE && seg.slot >= 0)  // the tile's last piece merges it (KIND 0 and 1 are MERGE_FP16 and MERGE_BF16)
            merge_if_last<KIND, D, BR, BC, 128, 1>(o_part, lse, o, tickets, seg.bh, seg.q0, nq, n, heads, parts);
    }
}
