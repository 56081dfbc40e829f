/*
 * The final division of the Q15 contract (docs/q15.md §6): each output row's shift g, chosen from the row's largest
 * |A| against its l, and O = A · 2^g / l rounded to int16. q15attn_divide_row is shared by the one-pass and streamed
 * entries (attention_q15.c, attention_q15_stream.c; attention_q15_core.h declares it); bit-exact with host/q15.py
 * divide_q15. Pure C99 with the GNU CLZ builtins (CLZ on the Cortex-M4), SSAT through ACLE where the core has it.
 */
#include "attention_q15.h"
#include "attention_q15_core.h"

#if defined(__ARM_FEATURE_SAT) && __ARM_FEATURE_SAT
#include <arm_acle.h>
#endif

/* sat16 of a quotient (<= 2^17) with its sign put back: SSAT where the core has it. */
static Q15ATTN_ALWAYS_INLINE int16_t signed_sat16(uint32_t quotient, int negative) {
    const int32_t o = negative ? -(int32_t)quotient : (int32_t)quotient;
#if defined(__ARM_FEATURE_SAT) && __ARM_FEATURE_SAT
    return (int16_t)__ssat(o, 16);
#else
    return (int16_t)(o > 32767 ? 32767 : o < -32768 ? -32768 : o);
#endif
}

/* |x| for |x| < 2^63, without a branch: x ^ m - m with m = 0 or all ones, the sign spread. */
static inline uint64_t magnitude64(int64_t x) {
    const uint64_t m = (uint64_t)(x >> 63);
    return ((uint64_t)x ^ m) - m;
}

/* One output whose A is shifted right, t = s - g >= 0: A' = RSH(acc, t) (acc itself when t = 0; half = 2^(t-1) or
 * 0), then (|A'| + ln/2) / ln on magnitudes, the sign put back, saturated to int16. |A'| < 2^32 (docs/q15.md §6), so
 * A' is its low word and the sign of the 64-bit sum: RSH in 32-bit halves, without a 64-bit shift by a variable
 * amount (t <= 15). */
static Q15ATTN_ALWAYS_INLINE int16_t divide_right(int64_t acc, int32_t t, uint32_t half, uint32_t ln) {
    const uint64_t u = (uint64_t)acc + half;
    const uint32_t hi = (uint32_t)(u >> 32);
    const uint32_t low = ((uint32_t)u >> t) | ((hi << (31 - t)) << 1);   /* A' mod 2^32 */
    const int negative = (int32_t)hi < 0;
    return signed_sat16(((negative ? 0u - low : low) + (ln >> 1)) / ln, negative);   /* quotient <= 2^17 */
}

/* One output whose A is shifted left, by u = g - s >= 1: exact. Then |A| < 2^30 (|A|·2^g < 2^(bits(l)+14), and
 * g > s), so A is its low word and |A'| = |A|·2^u < 2^30. */
static Q15ATTN_ALWAYS_INLINE int16_t divide_left(int64_t acc, int32_t u, uint32_t ln) {
    const int32_t a = (int32_t)acc;
    const uint32_t magnitude = (a < 0 ? 0u - (uint32_t)a : (uint32_t)a) << u;
    return signed_sat16((magnitude + (ln >> 1)) / ln, a < 0);
}

/* The bit length of a non-zero 32-bit value (CLZ). */
static inline int32_t bits32(uint32_t x) {
    return 32 - __builtin_clz(x);
}

/* O = A · 2^g / l for one row (docs/q15.md §6). The row's shift: g = clamp(bits(l) - bits(max |A|) + 14, 0, 31), 0
 * when every A is 0; bits(max |A|) is the bit length of the OR of the magnitudes (the highest bit set in any). Then
 * l normalised once to 16 significant bits, RSH(l, s) with s = max(0, bits(l) - 16) (0..15, as l < 2^31), and each
 * column's A shifted by t = s - g: right with rounding (t >= 0) or left, exactly. Column 2j is at acc[j·stride],
 * 2j+1 next to it. */
void q15attn_divide_row(const int64_t *acc, int32_t stride, int64_t l, int32_t dim, int16_t *o, uint8_t *shift) {
    uint32_t any_hi = 0, any_lo = 0;   /* the OR of every |A|, in halves */
    const int64_t *a = acc;
    int32_t c = 0;
    for (; c + 1 < dim; c += 2, a += stride) {
        const uint64_t m0 = magnitude64(a[0]), m1 = magnitude64(a[1]);
        any_hi |= (uint32_t)(m0 >> 32) | (uint32_t)(m1 >> 32);
        any_lo |= (uint32_t)m0 | (uint32_t)m1;
    }
    if (c < dim) {
        const uint64_t m0 = magnitude64(a[0]);
        any_hi |= (uint32_t)(m0 >> 32);
        any_lo |= (uint32_t)m0;
    }
    const int32_t bits = bits32((uint32_t)l);   /* l >= 1: the block holding the running max gives 32767 */
    const int32_t peak_bits = any_hi ? 32 + bits32(any_hi) : any_lo ? bits32(any_lo) : 0;
    const int32_t wanted = bits - peak_bits + 14;
    const int32_t g = peak_bits == 0 || wanted < 0 ? 0
                      : wanted > Q15ATTN_OUT_SHIFT_MAX ? Q15ATTN_OUT_SHIFT_MAX : wanted;
    const int32_t s = bits > 16 ? bits - 16 : 0;
    const uint32_t ln = (uint32_t)(s > 0 ? (l + ((int64_t)1 << (s - 1))) >> s : l);   /* RSH(l, s) */
    const int32_t t = s - g;
    *shift = (uint8_t)g;
    c = 0;
    if (t >= 0) {
        const uint32_t half = t > 0 ? 1u << (t - 1) : 0u;
        for (; c + 1 < dim; c += 2, acc += stride) {
            o[c] = divide_right(acc[0], t, half, ln);
            o[c + 1] = divide_right(acc[1], t, half, ln);
        }
        if (c < dim) {
            o[c] = divide_right(acc[0], t, half, ln);
        }
    } else {
        for (; c + 1 < dim; c += 2, acc += stride) {
            o[c] = divide_left(acc[0], -t, ln);
            o[c + 1] = divide_left(acc[1], -t, ln);
        }
        if (c < dim) {
            o[c] = divide_left(acc[0], -t, ln);
        }
    }
}
