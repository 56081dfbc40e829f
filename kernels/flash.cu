// FlashAttention-style forward (fp32): a block owns Br query rows of one (batch, head) and streams the keys in
// tiles of Bc, carrying the running max m, the running sum l and the output accumulator across tiles (online
// softmax in base 2), so S and P never reach device memory.
//
// 128 threads per block; each thread holds a register micro-tile of S (TM×TN) and of O (TMO×TNO). Shared memory,
// in floats (kernels/budget.py flash_smem_bytes() is the same formula):
//   Q tile Br·QP, K tile Bc·KP, V tile Bc·D, S/P tile Br·(Bc+4), and m, l and the rescale factor, 3·Br.
// When D % 4 == 0 the tiles are loaded from device memory as float4, and the inner loops read float4 (16-byte)
// words: Q and K along d (QP = D, KP = D + 4: eight K rows read by a quarter-warp then fall in distinct banks), P
// along keys and V along d (TNO % 4 == 0, i.e. D % 64 == 0).
// Otherwise they read single floats, with QP = KP = D + 1 against bank conflicts. Causal: key j is kept for query
// i when j <= i (diagonal kept); key tiles past the block's last query are skipped. Any N; Br, Bc powers of two
// in 8..128; D in 1..256; all three compile-time (name_expressions).
#include "attention_common.cuh"

#define FLASH_THREADS 128

template <int Br, int Bc, int D>
__global__ void __launch_bounds__(FLASH_THREADS)
flash_fwd(const float *__restrict__ Q, const float *__restrict__ K, const float *__restrict__ V,
          float *__restrict__ O, int N, float scale_log2, int causal) {
    constexpr int NT = FLASH_THREADS;
    constexpr bool VEC_D = D % 4 == 0;                   // float4 along d in the score loop
    constexpr int QP = VEC_D ? D : D + 1, KP = VEC_D ? D + 4 : D + 1, SP = Bc + 4;
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
    const long bh = blockIdx.y;
    const int q_tile = causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;  // heavy causal tiles first
    const int q0 = q_tile * Br;
    const float *q = Q + bh * N * D;
    const float *k = K + bh * N * D;
    const float *v = V + bh * N * D;

    if constexpr (VEC_D) {  // 16-byte global loads and shared stores
        for (int e = tid; e < Br * D / 4; e += NT) {
            const int r = e / (D / 4), c = 4 * (e % (D / 4));
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
            if (q0 + r < N) {
                x = *reinterpret_cast<const float4 *>(q + (long)(q0 + r) * D + c);
                x.x *= scale_log2; x.y *= scale_log2; x.z *= scale_log2; x.w *= scale_log2;
            }
            *reinterpret_cast<float4 *>(q_s + r * QP + c) = x;
        }
    } else {
        for (int e = tid; e < Br * D; e += NT) {
            const int r = e / D, c = e % D;
            q_s[r * QP + c] = (q0 + r < N) ? q[(long)(q0 + r) * D + c] * scale_log2 : 0.0f;
        }
    }
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

    const int kv_end = causal ? min(N, q0 + Br) : N;
    for (int kv0 = 0; kv0 < kv_end; kv0 += Bc) {
        __syncthreads();  // the previous tile's readers are done with k_s, v_s, s_s
        if constexpr (VEC_D) {
            for (int e = tid; e < Bc * D / 4; e += NT) {
                const int r = e / (D / 4), c = 4 * (e % (D / 4));
                const bool in = kv0 + r < N;
                const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
                *reinterpret_cast<float4 *>(k_s + r * KP + c) =
                    in ? *reinterpret_cast<const float4 *>(k + (long)(kv0 + r) * D + c) : zero;
                *reinterpret_cast<float4 *>(v_s + r * D + c) =
                    in ? *reinterpret_cast<const float4 *>(v + (long)(kv0 + r) * D + c) : zero;
            }
        } else {
            for (int e = tid; e < Bc * D; e += NT) {
                const int r = e / D, c = e % D;
                const bool in = kv0 + r < N;
                k_s[r * KP + c] = in ? k[(long)(kv0 + r) * D + c] : 0.0f;
                v_s[r * D + c] = in ? v[(long)(kv0 + r) * D + c] : 0.0f;
            }
        }
        __syncthreads();

        // S = Q Kᵀ for this tile, masked, into s_s
        float s[TM][TN];
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int j = 0; j < TN; j++) s[i][j] = 0.0f;
        if constexpr (VEC_D) {
#pragma unroll 2
            for (int c = 0; c < D; c += 4) {
                float4 qv[TM], kv[TN];
#pragma unroll
                for (int i = 0; i < TM; i++) {
                    const int r = sy + i * SY;
                    qv[i] = r < Br ? *reinterpret_cast<const float4 *>(q_s + r * QP + c) : make_float4(0.f, 0.f, 0.f, 0.f);
                }
#pragma unroll
                for (int j = 0; j < TN; j++) kv[j] = *reinterpret_cast<const float4 *>(k_s + (sx + j * SX) * KP + c);
#pragma unroll
                for (int i = 0; i < TM; i++)
#pragma unroll
                    for (int j = 0; j < TN; j++) {
                        s[i][j] = fmaf(qv[i].x, kv[j].x, s[i][j]);
                        s[i][j] = fmaf(qv[i].y, kv[j].y, s[i][j]);
                        s[i][j] = fmaf(qv[i].z, kv[j].z, s[i][j]);
                        s[i][j] = fmaf(qv[i].w, kv[j].w, s[i][j]);
                    }
            }
        } else {
#pragma unroll 4
            for (int c = 0; c < D; c++) {
                float qv[TM], kv[TN];
#pragma unroll
                for (int i = 0; i < TM; i++) {
                    const int r = sy + i * SY;
                    qv[i] = r < Br ? q_s[r * QP + c] : 0.0f;
                }
#pragma unroll
                for (int j = 0; j < TN; j++) kv[j] = k_s[(sx + j * SX) * KP + c];
#pragma unroll
                for (int i = 0; i < TM; i++)
#pragma unroll
                    for (int j = 0; j < TN; j++) s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
            }
        }
#pragma unroll
        for (int i = 0; i < TM; i++) {
            const int r = sy + i * SY;
            if (r >= Br) continue;
#pragma unroll
            for (int j = 0; j < TN; j++) {
                const int c = sx + j * SX, key = kv0 + c;
                const bool masked = key >= N || (causal && key > q0 + r);
                s_s[r * SP + c] = masked ? KB_NEG_INF : s[i][j];
            }
        }
        __syncthreads();

        // online softmax per row: G threads share a row
        {
            const int r = tid / G, g = tid % G;
            float tile_max = KB_NEG_INF;
            for (int c = g; c < Bc; c += G) tile_max = fmaxf(tile_max, s_s[r * SP + c]);
            tile_max = group_max(tile_max, G);
            float m_new;
            const float alpha = online_rescale(m_s[r], tile_max, &m_new);
            float row_sum = 0.0f;
            for (int c = g; c < Bc; c += G) {
                const float p = m_new == KB_NEG_INF ? 0.0f : exp2f(s_s[r * SP + c] - m_new);
                s_s[r * SP + c] = p;
                row_sum += p;
            }
            row_sum = group_sum(row_sum, G);
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
#pragma unroll
                for (int i = 0; i < TMO; i++) {
                    const int r = oy + i * OY;
                    pv[i] = r < Br ? *reinterpret_cast<const float4 *>(s_s + r * SP + key) : make_float4(0.f, 0.f, 0.f, 0.f);
                }
#pragma unroll
                for (int kk = 0; kk < 4; kk++) {
                    float4 vv[CH];
#pragma unroll
                    for (int ch = 0; ch < CH; ch++)
                        vv[ch] = *reinterpret_cast<const float4 *>(v_s + (key + kk) * D + ch * OX * 4 + ox * 4);
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
#pragma unroll
                for (int i = 0; i < TMO; i++) {
                    const int r = oy + i * OY;
                    pv[i] = r < Br ? s_s[r * SP + key] : 0.0f;
                }
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
        if (r >= Br || q0 + r >= N) continue;
        const float inv = 1.0f / l_s[r];
#pragma unroll
        for (int j = 0; j < TNO; j++) {
            const int c = out_col(j);
            if (c < D) O[(bh * N + q0 + r) * D + c] = acc[i][j] * inv;
        }
    }
}
