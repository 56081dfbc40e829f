/*
 * Q15 attention for one head with keys streamed in blocks of Bc (online softmax): the C implementation of
 * docs/q15.md, bit-exact with host/q15.py. See attention_q15.h for the API and buffer layouts.
 *
 * Query rows go two at a time (q15attn_absorb_pair: 2x2 register blocking, every load of K and Vᵀ serves both rows)
 * when dim <= 64, else one at a time (q15attn_absorb_row). Both take a span of keys into a state that q15attn_rows
 * keeps on the stack and q15attn_stream (attention_q15_stream.c) in the caller's buffer between key chunks; the
 * division (docs/q15.md §6, each row's shift g) is attention_q15_divide.c. On a Cortex-M4 (__ARM_FEATURE_SIMD32) the
 * dot products use SMLALD, two 16x16 products added into a 64-bit accumulator per instruction, and the two-row
 * kernels are hand-scheduled Thumb-2 (docs/performance.md has the cycle counts); elsewhere portable C computes the
 * same exact sums. Right shifts of negative values are arithmetic (as gcc and clang define them), which the rounding
 * steps rely on.
 */
#include "attention_q15.h"
#include "attention_q15_core.h"

#if defined(__ARM_FEATURE_SIMD32) && __ARM_FEATURE_SIMD32
#include <arm_acle.h>
#define Q15ATTN_HAVE_DSP 1
#else
#define Q15ATTN_HAVE_DSP 0
#endif

/* The two-row kernels in Thumb-2 assembly (QKᵀ, P·V) on the Cortex-M4; portable C elsewhere. */
#if Q15ATTN_HAVE_DSP && defined(__GNUC__) && defined(__thumb2__)
#define Q15ATTN_PAIR_ASM 1
#else
#define Q15ATTN_PAIR_ASM 0
#endif

#define INT32_LOWEST (-2147483647 - 1)

/* 2^(-i/64) in Q0.24, i = 0..64 (host/q15.py EXP2_TABLE, then T_next of i = 63). */
static const uint32_t exp2_table[65] = {
    16777216u, 16596492u, 16417715u, 16240863u, 16065917u, 15892855u,
    15721658u, 15552304u, 15384775u, 15219050u, 15055111u, 14892937u,
    14732511u, 14573813u, 14416824u, 14261526u, 14107901u, 13955931u,
    13805598u, 13656884u, 13509772u, 13364245u, 13220286u, 13077877u,
    12937002u, 12797645u, 12659789u, 12523418u, 12388516u, 12255067u,
    12123055u, 11992466u, 11863283u, 11735492u, 11609078u, 11484025u,
    11360319u, 11237946u, 11116891u, 10997140u, 10878679u, 10761494u,
    10645571u, 10530897u, 10417458u, 10305242u, 10194234u, 10084422u,
    9975792u, 9868333u, 9762032u, 9656875u, 9552851u, 9449948u,
    9348154u, 9247455u, 9147842u, 9049301u, 8951823u, 8855394u,
    8760003u, 8665641u, 8572295u, 8479954u,
    8388608u,   /* 2^(-64/64) · 2^24: T_next of i = 63 */
};

/* floor(x / 2^s + 1/2), s >= 1. */
static inline int64_t round_shift(int64_t x, int32_t s) {
    return (x + ((int64_t)1 << (s - 1))) >> s;
}

/* Two adjacent int16 as one word, element 0 in the low half (a plain load on little-endian targets). */
static inline uint32_t load_pair(const int16_t *x) {
    uint32_t word;
    __builtin_memcpy(&word, x, sizeof word);
    return word;
}

/* acc + a0*b0 + a1*b1 for two packed pairs, exact. */
static inline int64_t mac_pair(int64_t acc, uint32_t a, uint32_t b) {
#if Q15ATTN_HAVE_DSP
    return __smlald((int16x2_t)a, (int16x2_t)b, acc);
#else
    return acc + (int32_t)(int16_t)a * (int16_t)b + (int32_t)(int16_t)(a >> 16) * (int16_t)(b >> 16);
#endif
}

/* Σ x[c]·y0[c] and Σ x[c]·y1[c], c < n, exact in 64 bits: two dot products sharing the loads of x (a query row
 * against two keys, or a block's probabilities against two columns of Vᵀ). Four elements per step, bottom-tested
 * so that each step ends in one taken branch; on the M4 the step is scheduled by hand (docs/performance.md has the
 * cycle counts). */
static Q15ATTN_ALWAYS_INLINE void dot2(const int16_t *x, const int16_t *y0, const int16_t *y1, int32_t n,
                                       int64_t *s0, int64_t *s1) {
    int64_t a0 = 0, a1 = 0;
    const int16_t *end = x + (n & ~3);
#if Q15ATTN_HAVE_DSP && defined(__GNUC__)
    /* The same step scheduled by hand: the M4 pipelines back-to-back loads (one cycle after the first), so the
     * loads are grouped, with post-increment addressing instead of separate pointer updates; x's words stay in
     * registers for both keys, and the loop bound stays in a register (gcc spilled it at -Os). */
    if (x < end) {
        uint32_t xa, xb, ya, yb;
        __asm__ volatile(
            "1:\n\t"
            "ldr %[xa], [%[x]], #4\n\t"
            "ldr %[xb], [%[x]], #4\n\t"
            "ldr %[ya], [%[y0]], #4\n\t"
            "ldr %[yb], [%[y0]], #4\n\t"
            "smlald %Q[a0], %R[a0], %[xa], %[ya]\n\t"
            "smlald %Q[a0], %R[a0], %[xb], %[yb]\n\t"
            "ldr %[ya], [%[y1]], #4\n\t"
            "ldr %[yb], [%[y1]], #4\n\t"
            "smlald %Q[a1], %R[a1], %[xa], %[ya]\n\t"
            "smlald %Q[a1], %R[a1], %[xb], %[yb]\n\t"
            "cmp %[x], %[end]\n\t"
            "blo 1b\n\t"
            : [a0] "+r"(a0), [a1] "+r"(a1), [x] "+r"(x), [y0] "+r"(y0), [y1] "+r"(y1), [xa] "=&r"(xa),
              [xb] "=&r"(xb), [ya] "=&r"(ya), [yb] "=&r"(yb)
            : [end] "r"(end)
            : "cc", "memory");
    }
#else
    if (x < end) {
        do {
            const uint32_t xa = load_pair(x), xb = load_pair(x + 2);
            a0 = mac_pair(a0, xa, load_pair(y0));
            a1 = mac_pair(a1, xa, load_pair(y1));
            a0 = mac_pair(a0, xb, load_pair(y0 + 2));
            a1 = mac_pair(a1, xb, load_pair(y1 + 2));
            x += 4;
            y0 += 4;
            y1 += 4;
        } while (x < end);
    }
#endif
    for (n &= 3; n > 0; n--) {
        a0 += (int32_t)*x * *y0++;
        a1 += (int32_t)*x++ * *y1++;
    }
    *s0 = a0;
    *s1 = a1;
}

/* EXP2 of docs/q15.md step 5. (y + 2^(n+8)) >> (n+9) is computed as ((y >> (n+8)) + 1) >> 1 (equal: flooring
 * twice is flooring once), and T[64] = 2^23 ends the table so that i = 63 needs no branch. */
static inline int32_t exp2_step(uint32_t delta) {
    if (delta >= (16u << 16)) {
        return 0;
    }
    const uint32_t idx = (delta >> 10) & 63u, rem = delta & 0x3FFu;
    const uint32_t t0 = exp2_table[idx], t1 = exp2_table[idx + 1];
    const uint32_t y = t0 - (((t0 - t1) * rem + 512u) >> 10);   /* Q0.24; (t0 - t1) * rem < 2^28 */
    const uint32_t p = ((y >> ((delta >> 16) + 8)) + 1u) >> 1;
    return p > 32767u ? 32767 : (int32_t)p;
}

int32_t q15attn_exp2(uint32_t delta) {
    return exp2_step(delta);
}

/* A score from its dot product: z = sat32(round(dot * M / 2^r)), Q15.16 in base-2 units. */
static inline int32_t score(int64_t dot, const q15attn_params *p) {
    int64_t z = round_shift(dot * p->score_mult, p->score_shift);
    if (z > 2147483647) {
        return 2147483647;
    }
    return z < INT32_LOWEST ? INT32_LOWEST : (int32_t)z;
}

/* One output row (attention_q15_core.h): the span's keys below nkeys in blocks of Bc, online-rescaled softmax. */
void q15attn_absorb_row(const q15attn_params *p, const int16_t *qi, int32_t nkeys, const q15attn_span *s,
    int64_t *acc, int64_t *l_io, int32_t *m_io) {
    const int32_t dim = p->dim, bc = p->bc, end = nkeys < s->key1 ? nkeys : s->key1;
    int32_t z[Q15ATTN_BC_MAX];      /* this block's scores, Q15.16 */
    int16_t prob[Q15ATTN_BC_MAX];   /* this block's probabilities, Q15 (<= 32767) */
    int32_t m = *m_io;              /* running max of z */
    int64_t l = s->key0 == 0 ? 0 : *l_io;   /* running Σ p */
    for (int32_t j0 = s->key0; j0 < end; j0 += bc) {
        const int32_t nb = end - j0 < bc ? end - j0 : bc;
        const int16_t *kb = s->k + (j0 - s->key0) * dim, *vb = s->vt + (j0 - s->key0);
        int32_t block_max = INT32_LOWEST;
        for (int32_t j = 0; j < nb; j += 2) {  /* keys in pairs; an odd last key is paired with itself */
            const int16_t *k0 = kb + j * dim, *k1 = j + 1 < nb ? k0 + dim : k0;
            int64_t d0, d1;
            dot2(qi, k0, k1, dim, &d0, &d1);
            z[j] = score(d0, p);
            block_max = z[j] > block_max ? z[j] : block_max;
            if (j + 1 < nb) {
                z[j + 1] = score(d1, p);
                block_max = z[j + 1] > block_max ? z[j + 1] : block_max;
            }
        }
        if (j0 == 0) {              /* nothing summed yet: what a rescale of zeros would leave */
            m = block_max;
        } else if (block_max > m) { /* rescale what was summed under the old max */
            int32_t alpha = exp2_step((uint32_t)block_max - (uint32_t)m);
            l = round_shift(l * alpha, 15);
            for (int32_t c = 0; c < dim; c++) {
                acc[c] = round_shift(acc[c] * alpha, 15);
            }
            m = block_max;
        }
        for (int32_t j = 0; j < nb; j++) {
            prob[j] = (int16_t)exp2_step((uint32_t)m - (uint32_t)z[j]);
            l += prob[j];
        }
        for (int32_t c = 0; c < dim; c += 2) {  /* columns in pairs; an odd last column is paired with itself */
            const int16_t *v0 = vb + c * s->stride, *v1 = c + 1 < dim ? v0 + s->stride : v0;
            int64_t s0, s1;
            dot2(prob, v0, v1, nb, &s0, &s1);
            acc[c] = j0 == 0 ? s0 : acc[c] + s0;
            if (c + 1 < dim) {
                acc[c + 1] = j0 == 0 ? s1 : acc[c + 1] + s1;
            }
        }
    }
    *l_io = l;
    *m_io = m;
}

/* The two-row routines (2x2 register blocking): attention_q15_pair.h. */
#include "attention_q15_pair.h"

/* Rows i and i+1 (attention_q15_core.h): acc holds both rows' accumulators (column pair g: A0[2g], A0[2g+1],
 * A1[2g], A1[2g+1]; Q30 of V's scale), l and m their running sums and maxima. */
void q15attn_absorb_pair(const q15attn_params *p, const int16_t *q0, int32_t nkeys0, const q15attn_span *s,
    int64_t *acc, int64_t l[2], int32_t m[2]) {
    const int32_t dim = p->dim, bc = p->bc, groups = (dim + 1) / 2;
    const int32_t nkeys[2] = {nkeys0, p->causal ? nkeys0 + 1 : nkeys0};
    const int32_t end = nkeys[1] < s->key1 ? nkeys[1] : s->key1;   /* row i+1's last key of the span, plus one */
    int32_t z[2 * Q15ATTN_BC_MAX];          /* this block's scores, Q15.16: row 0, then row 1 at BC_MAX */
    int16_t prob[2 * Q15ATTN_BC_MAX];       /* this block's probabilities, Q15, laid out as z */
    qk_job qk = {q0, q0 + dim, s->k, 0, dim, z, 0, 0, 0, 0, 0, 0};
    pv_job pv = {prob, s->vt, s->stride, 0, dim, acc, 1};
    if (s->key0 == 0) {
        l[0] = l[1] = 0;
    }
    pair_score_constants(p, &qk);
    for (int32_t j0 = s->key0; j0 < end; j0 += bc) {
        const int32_t nbj = end - j0 < bc ? end - j0 : bc;   /* keys of this block for row i+1 */
        qk.k = s->k + (j0 - s->key0) * dim;
        qk.nb = nbj;
        qk_pair(p, &qk);
        for (int32_t r = 0; r < 2; r++) {
            const int32_t seen = nkeys[r] - j0, nb = seen < nbj ? (seen > 0 ? seen : 0) : nbj;
            const int32_t *zr = z + r * Q15ATTN_BC_MAX;
            int16_t *pr = prob + r * Q15ATTN_BC_MAX;
            int32_t block_max = r ? qk.max1 : qk.max0;
            if (nb < nbj) {             /* causal row i in its last block: its max leaves out row i+1's extra key */
                block_max = INT32_LOWEST;
                for (int32_t j = 0; j < nb; j++) {
                    block_max = zr[j] > block_max ? zr[j] : block_max;
                }
            }
            if (nb > 0) {
                if (j0 == 0) {          /* nothing summed yet: what a rescale of zeros would leave */
                    m[r] = block_max;
                } else if (block_max > m[r]) {  /* rescale what row r summed under its old max */
                    const int32_t alpha = exp2_step((uint32_t)block_max - (uint32_t)m[r]);
                    l[r] = round_shift(l[r] * alpha, 15);
                    for (int32_t g = 0; g < groups; g++) {
                        int64_t *a = acc + 4 * g + 2 * r;
                        a[0] = round_shift(a[0] * alpha, 15);
                        a[1] = round_shift(a[1] * alpha, 15);
                    }
                    m[r] = block_max;
                }
                l[r] += exp_block(m[r], zr, nb, pr);
            }
            if (nb < nbj) {         /* at most one key: row i+1's extra key in row i's last causal block */
                pr[nb] = 0;
            }
        }
        pv.vt = s->vt + (j0 - s->key0);
        pv.nb = nbj;
        pv.first = j0 == 0;
        pv_pair(&pv);
    }
}

int q15attn_use_pairs(const q15attn_params *p) {
    return p->dim <= PAIR_DIM_MAX && (!Q15ATTN_PAIR_ASM || p->score_shift >= PAIR_SHIFT_MIN);
}

int q15attn_check(const q15attn_params *p, int32_t row0, int32_t nrows) {
    if (p->seq < 1 || p->seq > Q15ATTN_SEQ_MAX) {
        return Q15ATTN_E_SEQ;
    }
    if (p->dim < 1 || p->dim > Q15ATTN_DIM_MAX) {
        return Q15ATTN_E_DIM;
    }
    if (p->causal != 0 && p->causal != 1) {
        return Q15ATTN_E_CAUSAL;
    }
    if (p->bc < 1 || p->bc > Q15ATTN_BC_MAX) {
        return Q15ATTN_E_BC;
    }
    if (p->score_mult < Q15ATTN_MULT_MIN || p->score_mult > Q15ATTN_MULT_MAX) {
        return Q15ATTN_E_MULT;
    }
    if (p->score_shift < Q15ATTN_SHIFT_MIN || p->score_shift > Q15ATTN_SHIFT_MAX) {
        return Q15ATTN_E_SHIFT;
    }
    if (nrows < 1 || row0 < 0 || row0 > p->seq - nrows) {
        return Q15ATTN_E_ROWS;
    }
    return Q15ATTN_OK;
}

int q15attn_check_buffers(const q15attn_params *p, int32_t row0, const q15attn_buffer bufs[5], int32_t *nrows) {
    static const int errors[4] = {Q15ATTN_E_LEN_Q, Q15ATTN_E_LEN_K, Q15ATTN_E_LEN_VT, Q15ATTN_E_LEN_O};
    for (int i = 0; i < 5; i++) {
        if (bufs[i].typecode != (i < 4 ? 'h' : 'B')) {
            return Q15ATTN_E_TYPECODE;
        }
    }
    int32_t status = q15attn_check(p, 0, 1);
    if (status != Q15ATTN_OK) {
        return status;
    }
    const int32_t len_q = bufs[0].nbytes / 2, whole = p->seq * p->dim;
    if (len_q % p->dim != 0 || len_q == 0) {
        return errors[0];
    }
    if (bufs[1].nbytes / 2 != whole) {
        return errors[1];
    }
    if (bufs[2].nbytes / 2 != whole) {
        return errors[2];
    }
    if (bufs[3].nbytes != bufs[0].nbytes) {
        return errors[3];
    }
    *nrows = len_q / p->dim;
    if (bufs[4].nbytes < *nrows) {
        return Q15ATTN_E_LEN_OSHIFT;
    }
    return q15attn_check(p, row0, *nrows);
}

/* Output rows i and i+1 in one pass: their state on the stack. */
static void pair_one_pass(const q15attn_params *p, const int16_t *q0, int32_t nkeys0, const q15attn_span *s,
    int16_t *o0, uint8_t *shift0) {
    int64_t acc[PAIR_DIM_MAX * 2], l[2];
    int32_t m[2];
    q15attn_absorb_pair(p, q0, nkeys0, s, acc, l, m);
    q15attn_divide_row(acc, 4, l[0], p->dim, o0, shift0);
    q15attn_divide_row(acc + 2, 4, l[1], p->dim, o0 + p->dim, shift0 + 1);
}

/* One output row in one pass. */
static void row_one_pass(const q15attn_params *p, const int16_t *qi, int32_t nkeys, const q15attn_span *s,
    int16_t *oi, uint8_t *shift) {
    int64_t acc[p->dim], l;
    int32_t m;
    q15attn_absorb_row(p, qi, nkeys, s, acc, &l, &m);
    q15attn_divide_row(acc, 2, l, p->dim, oi, shift);
}

int q15attn_rows(const q15attn_params *p, int32_t row0, int32_t nrows,
    const int16_t *q, const int16_t *k, const int16_t *vt, int16_t *o, uint8_t *oshift) {
    int status = q15attn_check(p, row0, nrows);
    if (status != Q15ATTN_OK) {
        return status;
    }
    const q15attn_span all = {k, vt, p->seq, 0, p->seq};
    int32_t r = 0;
    if (q15attn_use_pairs(p)) {
        for (; r + 1 < nrows; r += 2) {
            const int32_t i = row0 + r;
            pair_one_pass(p, q + r * p->dim, p->causal ? i + 1 : p->seq, &all, o + r * p->dim, oshift + r);
        }
    }
    for (; r < nrows; r++) {
        const int32_t i = row0 + r;
        row_one_pass(p, q + r * p->dim, p->causal ? i + 1 : p->seq, &all, o + r * p->dim, oshift + r);
    }
    return Q15ATTN_OK;
}

#if defined(__arm__) && defined(__ARM_ARCH_7EM__)
uint32_t q15attn_dwt_start(void) {
    DEMCR |= 1u << 24;              /* TRCENA: power the DWT */
    DWT_CTRL |= 1u;                 /* CYCCNTENA */
    return DWT_CYCCNT;
}

int q15attn_rows_timed(const q15attn_params *p, int32_t row0, int32_t nrows,
    const int16_t *q, const int16_t *k, const int16_t *vt, int16_t *o, uint8_t *oshift, uint32_t *cycles) {
    int status = q15attn_check(p, row0, nrows);
    if (status != Q15ATTN_OK) {
        return status;
    }
    uint32_t start = q15attn_dwt_start();
    q15attn_rows(p, row0, nrows, q, k, vt, o, oshift);
    *cycles = DWT_CYCCNT - start;
    return Q15ATTN_OK;
}
#endif
