// FlashAttention-style forward (fp32): a block owns Br query rows of one (batch, head) and streams the keys in
// tiles of Bc, carrying the running max m, the running sum l and the output accumulator across tiles (online
// softmax in base 2), so S and P never reach device memory.
//
// 128 threads per block; each thread holds a register micro-tile of S (TM×TN) and of O (TMO×TNO). Shared memory,
// in floats (kernels/budget.py flash_smem_bytes() is the same formula):
//   Q tile Br·QP, K tile Bc·KP, V tile Bc·D, S/P tile Br·(Bc+4), and m, l and the rescale factor, 3·Br.
// Along d the tiles move in words of W floats (Words<W>): when D % 4 == 0, float4 (16-byte) words, W = 4, in the
// loads from device memory and in the Q·Kᵀ loop (QP = D, KP = D + 4: eight K rows read by a quarter-warp then fall
// in distinct banks); otherwise single floats, W = 1, with QP = KP = D + 1 against bank conflicts. Each loop is
// written once for both widths. The P·V loop reads P along keys and V along d as float4 when TNO % 4 == 0 (i.e.
// D % 64 == 0), single floats otherwise. Causal: key j is kept for query i when j <= i (diagonal kept); key tiles
// past the block's last query are skipped. Any N; Br, Bc powers of two in 8..128; D in 1..256; all three
// compile-time (name_expressions).
#include "attention_common.cuh"
#include "tile_order.cuh"

#define FLASH_THREADS 128

// A word of W floats as the tile loops move it: a float (W = 1) or a 16-byte-aligned float4 (W = 4).
template <int W>
struct Words;

template <>
struct Words<1> {
    using T = float;
    static __device__ __forceinline__ T zero() { return 0.0f; }
    static __device__ __forceinline__ T &at(float *p) { return *p; }
    static __device__ __forceinline__ const T &at(const float *p) { return *p; }
    static __device__ __forceinline__ T scaled(T x, float a) { return x * a; }
    static __device__ __forceinline__ float dot_acc(T a, T b, float acc) { return fmaf(a, b, acc); }  // acc + a·b
};

template <>
struct Words<4> {
    using T = float4;
    static __device__ __forceinline__ T zero() { return make_float4(0.f, 0.f, 0.f, 0.f); }
    static __device__ __forceinline__ T &at(float *p) { return *reinterpret_cast<float4 *>(p); }
    static __device__ __forceinline__ const T &at(const float *p) { return *reinterpret_cast<const float4 *>(p); }
    static __device__ __forceinline__ T scaled(T x, float a) {
        x.x *= a; x.y *= a; x.z *= a; x.w *= a;
        return x;
    }
    static __device__ __forceinline__ float dot_acc(T a, T b, float acc) {  // acc + a·b, one FMA per lane, x to w
        acc = fmaf(a.x, b.x, acc);
        acc = fmaf(a.y, b.y, acc);
        acc = fmaf(a.z, b.z, acc);
        return fmaf(a.w, b.w, acc);
    }
};

// Calls f(r, c) for each W-float word (row r, first column c) of a ROWS × D tile, dealt round-robin to the block's
// threads: the loop of every tile load from device memory.
template <int ROWS, int D, int W, typename F>
__device__ __forceinline__ void for_tile_words(F f) {
    for (int e = threadIdx.x; e < ROWS * D / W; e += FLASH_THREADS) f(e / (D / W), W * (e % (D / W)));
}

// A thread's register fragment of a shared tile (row stride LD): x[i] = the W floats at column c of row r0 + i·STEP,
// zeros for rows at or past ROWS.
template <int W, int ROWS, int LD, int STEP, int COUNT>
__device__ __forceinline__ void load_rows(typename Words<W>::T (&x)[COUNT], const float *tile, int r0, int c) {
#pragma unroll
    for (int i = 0; i < COUNT; i++) {
        const int r = r0 + i * STEP;
        x[i] = r < ROWS ? Words<W>::at(tile + r * LD + c) : Words<W>::zero();
    }
}

template <int Br, int Bc, int D>
__global__ void __launch_bounds__(FLASH_THREADS)
flash_fwd(const float *__restrict__ Q, const float *__restrict__ K, const float *__restrict__ V,
          float *__restrict__ O, int NQ, int N, int group, float scale_log2, int causal) {
    constexpr int NT = FLASH_THREADS;
    constexpr int W = D % 4 == 0 ? 4 : 1;                // floats per word along d: tile loads and the score loop
    using Word = Words<W>;
    constexpr int QP = W == 4 ? D : D + 1, KP = W == 4 ? D + 4 : D + 1, SP = Bc + 4;
    // S micro-tiles: SX threads across the Bc keys, SY across the Br rows.
    constexpr int SX = Bc < 16 ? Bc : 16, SY = NT / SX;
    constexpr int TM = (Br + SY - 1) / SY, TN = Bc / SX;
    // O micro-tiles: 16 threads across D, 8 across Br.
    constexpr int OX = 16, OY = NT / OX;
    constexpr int TMO = (Br + OY - 1) / OY, TNO = (D + OX - 1) / OX;
    constexpr bool VEC_O = TNO % 4 == 0 && D % OX == 0;  // float4 along d in the P·V loop
    // softmax: G threads per row
    constexpr int G = NT / Br;
    static_assert(Br >= 4 && Br <= NT && (NT % Br) == 0, "Br must divide 128");
    static_assert(Bc % SX == 0 && Bc % 4 == 0, "Bc must be a multiple of min(Bc, 16) and of 4");

    extern __shared__ float4 smem4[];                   // float4 for 16-byte alignment
    float *smem = reinterpret_cast<float *>(smem4);
    float *q_s = smem;              // Br × QP, pre-scaled by scale·log2(e)
    float *k_s = q_s + Br * QP;     // Bc × KP
    float *v_s = k_s + Bc * KP;     // Bc × D
    float *s_s = v_s + Bc * D;      // Br × SP: scores, then probabilities
    float *m_s = s_s + Br * SP;     // Br running max (base-2 units)
    float *l_s = m_s + Br;          // Br running sum
    float *a_s = l_s + Br;          // Br this tile's rescale factor

    const int tid = threadIdx.x;
    const TileSlot slot = tile_slot<Br>(NQ, causal);  // causal: longest tiles first, across heads
    const long bh = slot.bh;
    const int q0 = slot.q0;
    const int offset = N - NQ;  // query i sits at key position i + offset (the mask's bottom-right alignment)
    const float *q = Q + bh * NQ * D;
    const float *k = K + bh / group * N * D;
    const float *v = V + bh / group * N * D;

    for_tile_words<Br, D, W>([&](int r, int c) {
        typename Word::T x = Word::zero();
        if (q0 + r < NQ) x = Word::scaled(Word::at(q + (long)(q0 + r) * D + c), scale_log2);
        Word::at(q_s + r * QP + c) = x;
    });
    for (int r = tid; r < Br; r += NT) {
        m_s[r] = KB_NEG_INF;
        l_s[r] = 0.0f;
    }
    const int sx = tid % SX, sy = tid / SX;
    const int ox = tid % OX, oy = tid / OX;
    // output column of register jj: interleaved chunks of 4 (float4 path) or of 1 (scalar path)
    auto out_col = [&](int jj) { return VEC_O ? (jj / 4) * (OX * 4) + ox * 4 + (jj % 4) : ox + jj * OX; };
    float acc[TMO][TNO];
#pragma unroll
    for (int i = 0; i < TMO; i++)
#pragma unroll
        for (int j = 0; j < TNO; j++) acc[i][j] = 0.0f;

    const int kv_end = causal ? min(N, min(q0 + Br, NQ) + offset) : N;
    for (int kv0 = 0; kv0 < kv_end; kv0 += Bc) {
        __syncthreads();  // the previous tile's readers are done with k_s, v_s, s_s
        for_tile_words<Bc, D, W>([&](int r, int c) {
            const bool in = kv0 + r < N;
            Word::at(k_s + r * KP + c) = in ? Word::at(k + (long)(kv0 + r) * D + c) : Word::zero();
            Word::at(v_s + r * D + c) = in ? Word::at(v + (long)(kv0 + r) * D + c) : Word::zero();
        });
        __syncthreads();

        // S = Q Kᵀ for this tile, masked, into s_s
        float s[TM][TN];
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int j = 0; j < TN; j++) s[i][j] = 0.0f;
        constexpr int S_UNROLL = W == 4 ? 2 : 4;  // d-steps per unrolled iteration: 8 floats as float4, 4 as floats
#pragma unroll S_UNROLL
        for (int c = 0; c < D; c += W) {
            typename Word::T qv[TM], kv[TN];
            load_rows<W, Br, QP, SY>(qv, q_s, sy, c);
#pragma unroll
            for (int j = 0; j < TN; j++) kv[j] = Word::at(k_s + (sx + j * SX) * KP + c);
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++) s[i][j] = Word::dot_acc(qv[i], kv[j], s[i][j]);
        }
#pragma unroll
        for (int i = 0; i < TM; i++) {
            const int r = sy + i * SY;
            if (r >= Br) continue;
#pragma unroll
            for (int j = 0; j < TN; j++) {
                const int c = sx + j * SX, key = kv0 + c;
                const bool masked = key >= N || (causal && key > q0 + r + offset);
                s_s[r * SP + c] = masked ? KB_NEG_INF : s[i][j];
            }
        }
        __syncthreads();

        // online softmax per row: G threads share a row
        {
            const int r = tid / G, g = tid % G;
            float tile_max = KB_NEG_INF;
            for (int c = g; c < Bc; c += G) tile_max = fmaxf(tile_max, s_s[r * SP + c]);
            tile_max = group_reduce<MaxOp>(tile_max, G);
            float m_new;
            const float alpha = online_rescale(m_s[r], tile_max, &m_new);
            float row_sum = 0.0f;
            for (int c = g; c < Bc; c += G) {
                const float p = m_new == KB_NEG_INF ? 0.0f : exp2f(s_s[r * SP + c] - m_new);
                s_s[r * SP + c] = p;
                row_sum += p;
            }
            row_sum = group_reduce<SumOp>(row_sum, G);
            if (g == 0) {
                l_s[r] = l_s[r] * alpha + row_sum;
                m_s[r] = m_new;
                a_s[r] = alpha;
            }
        }
        __syncthreads();

        // O = O · alpha + P V
#pragma unroll
        for (int i = 0; i < TMO; i++) {
            const int r = oy + i * OY;
            const float alpha = r < Br ? a_s[r] : 1.0f;
#pragma unroll
            for (int j = 0; j < TNO; j++) acc[i][j] *= alpha;
        }
        if constexpr (VEC_O) {  // all Bc keys: masked keys have p = 0 and finite V
            constexpr int CH = TNO / 4;
            for (int key = 0; key < Bc; key += 4) {
                float4 pv[TMO];
                load_rows<4, Br, SP, OY>(pv, s_s, oy, key);
#pragma unroll
                for (int kk = 0; kk < 4; kk++) {
                    float4 vv[CH];
#pragma unroll
                    for (int ch = 0; ch < CH; ch++)
                        vv[ch] = Words<4>::at(v_s + (key + kk) * D + ch * OX * 4 + ox * 4);
#pragma unroll
                    for (int i = 0; i < TMO; i++) {
                        const float p = kk == 0 ? pv[i].x : kk == 1 ? pv[i].y : kk == 2 ? pv[i].z : pv[i].w;
#pragma unroll
                        for (int ch = 0; ch < CH; ch++) {
                            acc[i][4 * ch + 0] = fmaf(p, vv[ch].x, acc[i][4 * ch + 0]);
                            acc[i][4 * ch + 1] = fmaf(p, vv[ch].y, acc[i][4 * ch + 1]);
                            acc[i][4 * ch + 2] = fmaf(p, vv[ch].z, acc[i][4 * ch + 2]);
                            acc[i][4 * ch + 3] = fmaf(p, vv[ch].w, acc[i][4 * ch + 3]);
                        }
                    }
                }
            }
        } else {
            const int tile_keys = min(Bc, kv_end - kv0);
            for (int key = 0; key < tile_keys; key++) {
                float pv[TMO], vv[TNO];
                load_rows<1, Br, SP, OY>(pv, s_s, oy, key);
#pragma unroll
                for (int j = 0; j < TNO; j++) {
                    const int c = out_col(j);
                    vv[j] = c < D ? v_s[key * D + c] : 0.0f;
                }
#pragma unroll
                for (int i = 0; i < TMO; i++)
#pragma unroll
                    for (int j = 0; j < TNO; j++) acc[i][j] = fmaf(pv[i], vv[j], acc[i][j]);
            }
        }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < TMO; i++) {
        const int r = oy + i * OY;
        if (r >= Br || q0 + r >= NQ) continue;
        const float inv = 1.0f / l_s[r];
#pragma unroll
        for (int j = 0; j < TNO; j++) {
            const int c = out_col(j);
            if (c < D) O[(bh * NQ + q0 + r) * D + c] = acc[i][j] * inv;
        }
    }
}
