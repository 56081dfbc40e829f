// Hopper flash attention forward (sm_90a): fp16 or bf16 Q, K, V, O, fp32 accumulation on warpgroup MMA (`wgmma`),
// tiles brought in by the bulk tensor copy engine (TMA), a producer warpgroup feeding consumer warpgroups.
//
// A block owns BR = 64·CONSUMERS query rows of one (batch, head). Warps 0 .. 4·CONSUMERS−1 form the consumer
// warpgroups, 64 rows each, raised to CONSUMER_REGS registers; the last warpgroup is the producer, lowered to 24
// registers, and one of its threads issues every copy. Shared memory holds Q
// and STAGES stages of K and V tiles of BC keys, each tile stored as D/64 column halves of 64 elements (128-byte rows)
// in the 128-byte swizzle the copy engine writes and `wgmma` reads (16-byte chunk c of row r at c XOR r mod 8).
// mbarriers pass the stages: the producer waits for a stage's `empty` barrier (every consumer thread arrives when its
// P·V has read the stage), then issues K and V copies that complete on its `kfull` and `vfull` barriers.
// Per key block, each consumer warpgroup:
//   S = Q·Kᵀ     wgmma m64nBCk16 with both operands from shared memory (K-major descriptors), D/16 steps;
//   online softmax in base 2 on S's registers (the mma.sync accumulator layout per warp: rows lane/4 and lane/4+8,
//   reductions over the 4 lanes of a row), log2 e folded into the scale and applied inside each exponent's FFMA;
//   O += P·V     P packed to 16 bits in registers as wgmma's A operand, V from shared memory (MN-major
//                descriptor), BC/16 steps; O stays in registers.
// SCHEDULE 0 runs those steps in turn; 1 issues block j's S with block j−1's P·V, so block j's softmax runs beside
// that P·V; 2 adds turns between the warpgroups (named barriers) so one's softmax runs beside another's MMAs; 3 is 2
// with block j's rescale of O and packing of P moved to the start of block j+1's turn, so that no wait follows the
// exponentials in their basic block: under 1 and 2 ptxas hoists the wait for P·V_{j−1} (WARPGROUP.DEPBAR) above
// them (the SASS shows every MUFU.EX2 after it), and a warpgroup's softmax never overlaps its own P·V. Schedule 3
// releases a stage one block later, so it needs three stages, or two with EARLY_K (K_j then waits only for S_{j−2},
// and V_j, released with block j−2's P·V at turn j, is first read at turn j+1).
// PERSISTENT: a grid of fewer blocks than tiles (one an SM), each block walking tiles blockIdx.x, + gridDim.x, ...
// in the order below; the producer loads the next tile's Q once the consumers' last S of this tile is done (its
// q_empty barrier) and streams its keys into the stages as they free (the stage count runs on across tiles), so the
// next tile's first copies overlap this tile's last P·V and its epilogue instead of following the block's exit.
// EARLY_K: a stage's K and V are released apart (FlashAttention-3's order): K once the block's S is done (its own
// k_empty barrier), V once its P·V is (`empty`), so the next K copy into a stage starts a P·V earlier; without it
// one `empty` barrier releases both after the P·V.
// Causal: key blocks past the block's last query are not loaded; the diagonal blocks are masked per element.
// Any N: the copy engine fills rows past N with zeros, and those keys are masked. Blocks run heaviest first.
// The tensor maps (kernels/hopper.py) live in device memory: Q's with a box of 64 columns × BR rows, K's and V's
// 64 × BC, over the (d, N, B·H) tensor. BC is any N of wgmma_ss in kernels/wgmma.cuh (64, 96, 128, 160, 176, 192;
// kernels/launch_configs.py WGMMA_BCS); D 64 or 128.

#include "hopper_sync.cuh"
#include "kv_rows.cuh"
#include "tc_softmax.cuh"
#include "tile_order.cuh"

template <int KIND, int D, int BC, int CONSUMERS, int STAGES, int SCHEDULE, bool PERSISTENT = false,
          bool EARLY_K = false>
__global__ void __launch_bounds__(CONSUMERS * 128 + 128, 1)
flash_wgmma_fwd(const void *map_q, const void *map_k, const void *map_v, unsigned short *__restrict__ o, int nq,
                int n, int group, int heads, float scale_log2, int causal) {
    constexpr int BR = 64 * CONSUMERS, HALVES = D / 64, KSTEPS = D / 16, STILES = BC / 8, OTILES = D / 8;
    constexpr unsigned ROW = 128;                         // bytes per row of a 64-column half
    constexpr unsigned Q_BYTES = BR * D * 2, KV_BYTES = BC * D * 2;
    static_assert(wgmma_ss_shape<BC>::built, "S = Q K^T is one wgmma_ss<BC>: BC must be a shape of kernels/wgmma.cuh");
    // P·V takes BC/16 k16 steps; each tile half (BC·128 bytes) starts on the swizzle's 1024-byte period (BC % 8 == 0);
    // the copy engine's box holds at most 256 rows (BR of Q's, BC of K's and V's)
    static_assert(BC % 16 == 0 && BC <= 256 && BR <= 256 && (D == 64 || D == 128), "BC, BR or D out of range");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // the swizzle repeats every 1024 bytes and is taken from the address: tiles start on a 1024-byte boundary
    unsigned char *smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    unsigned char *q_tile = smem;                          // [HALVES][BR][64]
    unsigned char *k_tiles = q_tile + Q_BYTES;             // [STAGES][HALVES][BC][64]
    unsigned char *v_tiles = k_tiles + STAGES * KV_BYTES;  // [STAGES][HALVES][BC][64]
    u64 *bars = reinterpret_cast<u64 *>(v_tiles + STAGES * KV_BYTES);
    u64 *q_full = bars, *k_full = bars + 1, *v_full = k_full + STAGES, *empty = v_full + STAGES;
    u64 *q_empty = empty + STAGES;  // PERSISTENT only: the consumers are done with Q's tile
    u64 *k_empty = q_empty + (PERSISTENT ? 1 : 0);  // EARLY_K only: [STAGES], the consumers are done with a stage's K

    const KvRows rows{nq, nq, n, group};
    const int total = (nq + BR - 1) / BR * heads;  // tiles of the launch
    const int step = PERSISTENT ? (int)gridDim.x : total;  // a block a tile: one pass of the tile loop
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // key blocks the tile reads: none past its last query's keys
    auto tile_blocks = [&](const TileSlot &slot) {
        return min((n + BC - 1) / BC, last_key_bounds(rows, slot.q0, min(BR, nq - slot.q0), causal).y / BC + 1);
    };

    if (threadIdx.x == 0) {
        mbar_init(q_full, 1);
        if (PERSISTENT) mbar_init(q_empty, CONSUMERS * 128);
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(k_full + s, 1);
            mbar_init(v_full + s, 1);
            mbar_init(empty + s, CONSUMERS * 128);
            if (EARLY_K) mbar_init(k_empty + s, CONSUMERS * 128);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    // The producer warpgroup gives up registers for the consumers (65,536 per SM; one block per SM).
    constexpr int PRODUCER_REGS = 24, CONSUMER_REGS = (65536 / 128 - PRODUCER_REGS) / CONSUMERS / 8 * 8;
    if (warp >= 4 * CONSUMERS) {  // the producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        if (warp == 4 * CONSUMERS && lane == 0) {
            int c = 0;  // key blocks loaded so far: stage c % STAGES, its (c / STAGES)-th use
            for (int tile = blockIdx.x, i = 0; tile < total; tile += step, ++i) {
                const TileSlot slot = tile_slot_at<BR>(tile, total, nq, causal);
                const int blocks = tile_blocks(slot), kv_head = slot.bh / group;
                if (i > 0) mbar_wait(q_empty, (i - 1) & 1);
                mbar_expect_tx(q_full, Q_BYTES);
                for (int h = 0; h < HALVES; ++h) tma_load(q_tile + h * BR * ROW, map_q, 64 * h, slot.q0, slot.bh, q_full);
                for (int j = 0; j < blocks; ++j, ++c) {
                    const int s = c % STAGES;
                    if (c >= STAGES) mbar_wait((EARLY_K ? k_empty : empty) + s, ((c / STAGES) - 1) & 1);
                    unsigned char *ks = k_tiles + s * KV_BYTES, *vs = v_tiles + s * KV_BYTES;
                    mbar_expect_tx(k_full + s, KV_BYTES);
                    for (int h = 0; h < HALVES; ++h) tma_load(ks + h * BC * ROW, map_k, 64 * h, j * BC, kv_head, k_full + s);
                    if (EARLY_K && c >= STAGES) mbar_wait(empty + s, ((c / STAGES) - 1) & 1);  // V's turn
                    mbar_expect_tx(v_full + s, KV_BYTES);
                    for (int h = 0; h < HALVES; ++h) tma_load(vs + h * BC * ROW, map_v, 64 * h, j * BC, kv_head, v_full + s);
                }
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS > 256 ? 256 : CONSUMER_REGS));

    const int wg = warp >> 2, g = lane >> 2, t = lane & 3;
    const int row0 = wg * 64 + (warp & 3) * 16;  // the warp's first row in the block's tile
    const unsigned q_base = smem_u32(q_tile) + wg * 64 * ROW;
    float acc[OTILES * 4], sc[STILES * 4];
    unsigned p[BC / 16][4];  // P as the A operand, one k16 step of keys per entry
    float m[2], l[2];        // rows g and g+8 of the warp's 16
#pragma unroll
    for (int i = 0; i < STILES * 4; ++i) sc[i] = 0.0f;

    // SCHEDULE 2: the warpgroups take turns to issue their MMAs (named barrier 1 + w is w's turn; a turn ends when
    // its S is done), so that one warpgroup's softmax runs while another's products occupy the tensor cores
    auto turn_begin = [&]() {
        if (SCHEDULE >= 2) named_sync(1 + wg, 256);
    };
    auto turn_end = [&]() {
        if (SCHEDULE >= 2) named_arrive(1 + (wg + 1) % CONSUMERS, 256);
    };
    // key block u of the block's stream (every tile's blocks one after another) is in stage u % STAGES
    auto issue_scores = [&](int u) {  // S = Q·K_uᵀ: D/16 steps, 16 columns = 32 bytes along the 128-byte rows
        const unsigned k_base = smem_u32(k_tiles + (u % STAGES) * KV_BYTES);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk)
            wgmma_ss<BC, KIND>(sc, descriptor(q_base + (kk / 4) * BR * ROW + (kk % 4) * 32, 16, 1024),
                               descriptor(k_base + (kk / 4) * BC * ROW + (kk % 4) * 32, 16, 1024), kk > 0);
        wgmma_commit();
    };
    auto issue_pv = [&](int u) {  // O += P·V_u: 16 keys = two 8-row groups of 1024 bytes; halves BC·128 apart
        mbar_wait(v_full + u % STAGES, (u / STAGES) & 1);
        const unsigned v_base = smem_u32(v_tiles + (u % STAGES) * KV_BYTES);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < BC / 16; ++ks)
            wgmma_rs<D, KIND>(acc, p[ks], descriptor(v_base + ks * 16 * ROW, BC * ROW, 1024), 1);
        wgmma_commit();
    };

    static_assert(SCHEDULE >= 0 && SCHEDULE <= 3 && (SCHEDULE != 3 || STAGES >= 3 || EARLY_K),
                  "schedule 0-3; 3 needs three stages, or two with K released early");
    if (SCHEDULE >= 2 && wg == CONSUMERS - 1) named_arrive(1, 256);  // warpgroup 0 takes the first turn
    int c = 0;  // key blocks consumed so far, as the producer counts them
    for (int tile = blockIdx.x, i = 0; tile < total; tile += step, ++i) {
        const TileSlot slot = tile_slot_at<BR>(tile, total, nq, causal);
        const int bh = slot.bh, q0 = slot.q0, blocks = tile_blocks(slot);
        // key blocks this warpgroup computes on; with the causal mask the later ones are only passed through
        const int mine = min(blocks, last_key_bounds(rows, q0 + wg * 64, 64, causal).y / BC + 1);
        auto softmax = [&](int j, float *alpha) {  // sc becomes P (unrounded); m and l move on
            online_softmax<STILES>(sc, m, l, alpha, scale_log2, j * BC, n, rows, q0 + row0 + g, causal);
        };
#pragma unroll
        for (int e = 0; e < OTILES * 4; ++e) acc[e] = 0.0f;
        m[0] = m[1] = TC_NEG_INF;
        l[0] = l[1] = 0.0f;

        mbar_wait(q_full, i & 1);
        float alpha[2];  // the last softmax's rescale of O (schedule 3 applies it at the next block's turn)
        // Schedule 3, at the start of a turn: wait for the pending P·V (it has read p and block `done`'s stage),
        // release that stage (none while done < 0), then scale O by the last softmax's alpha and pack its P
        auto catch_up = [&](int done) {
            wgmma_wait<0>();
            fence_operands<OTILES * 4>(acc);
            fence_operands<BC / 4>(&p[0][0]);
            if (done >= 0) mbar_arrive(empty + (c + done) % STAGES);
            rescale_and_pack<OTILES, BC, KIND>(acc, p, sc, alpha);
        };
        for (int j = 0; j < mine; ++j) {
            mbar_wait(k_full + (c + j) % STAGES, ((c + j) / STAGES) & 1);
            if (SCHEDULE == 3) {  // block j−1's rescale and packing, then S_j with P·V_{j−1} behind it, then softmax
                turn_begin();
                if (j > 0) catch_up(j - 2);  // P·V_{j−2} done; O·alpha_{j−1}, P_{j−1} packed
                issue_scores(c + j);
                if (j > 0) {
                    issue_pv(c + j - 1);
                    wgmma_wait<1>();
                } else {
                    wgmma_wait<0>();
                }
                fence_operands<STILES * 4>(sc);
                if (EARLY_K) mbar_arrive(k_empty + (c + j) % STAGES);  // S_j is done with K_j
                turn_end();
                softmax(j, alpha);  // beside P·V_{j−1}; its wait is at the next block's turn
            } else if (SCHEDULE == 0) {  // each block's products and softmax in turn
                issue_scores(c + j);
                wgmma_wait<0>();
                fence_operands<STILES * 4>(sc);
                if (EARLY_K) mbar_arrive(k_empty + (c + j) % STAGES);  // S_j is done with K_j
                softmax(j, alpha);
                rescale_and_pack<OTILES, BC, KIND>(acc, p, sc, alpha);
                issue_pv(c + j);
                wgmma_wait<0>();
                fence_operands<OTILES * 4>(acc);
                fence_operands<BC / 4>(&p[0][0]);
                mbar_arrive(empty + (c + j) % STAGES);
            } else {  // S_j, then the previous block's P·V behind it: block j's softmax runs while P·V is on the MMAs
                turn_begin();
                issue_scores(c + j);
                if (j > 0) issue_pv(c + j - 1);
                if (j > 0)
                    wgmma_wait<1>();
                else
                    wgmma_wait<0>();
                fence_operands<STILES * 4>(sc);
                if (EARLY_K) mbar_arrive(k_empty + (c + j) % STAGES);  // S_j is done with K_j
                turn_end();  // after the wait: a barrier between an MMA's commit and its wait serialises the MMAs
                softmax(j, alpha);
                wgmma_wait<0>();
                fence_operands<OTILES * 4>(acc);
                fence_operands<BC / 4>(&p[0][0]);
                if (j > 0) mbar_arrive(empty + (c + j - 1) % STAGES);
                rescale_and_pack<OTILES, BC, KIND>(acc, p, sc, alpha);
            }
        }
        if (PERSISTENT) mbar_arrive(q_empty);  // every S of this tile is done: the producer may load the next Q
        if (SCHEDULE == 3) {  // the last block's rescale, packing and P·V
            turn_begin();
            catch_up(mine - 2);
            issue_pv(c + mine - 1);
            wgmma_wait<0>();
            fence_operands<OTILES * 4>(acc);
            turn_end();
            mbar_arrive(empty + (c + mine - 1) % STAGES);
        } else if (SCHEDULE != 0) {  // the last block's P·V
            turn_begin();
            issue_pv(c + mine - 1);
            wgmma_wait<0>();
            fence_operands<OTILES * 4>(acc);
            turn_end();
            mbar_arrive(empty + (c + mine - 1) % STAGES);
        }
        for (int j = mine; j < blocks; ++j) {  // (causal) blocks past this warpgroup's rows: release them once loaded
            turn_begin();
            turn_end();
            mbar_wait(k_full + (c + j) % STAGES, ((c + j) / STAGES) & 1);
            mbar_wait(v_full + (c + j) % STAGES, ((c + j) / STAGES) & 1);
            if (EARLY_K) mbar_arrive(k_empty + (c + j) % STAGES);
            mbar_arrive(empty + (c + j) % STAGES);
        }
        c += blocks;

        unsigned short *og = o + (size_t)bh * nq * D;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float inv = inverse_row_sum(l[r]);
            const int query = q0 + row0 + g + r * 8;
            if (query >= nq) continue;
#pragma unroll
            for (int e = 0; e < OTILES; ++e)
                *reinterpret_cast<unsigned *>(og + (size_t)query * D + e * 8 + 2 * t) =
                    pack2<KIND>(acc[4 * e + 2 * r] * inv, acc[4 * e + 2 * r + 1] * inv);
        }
    }
}
