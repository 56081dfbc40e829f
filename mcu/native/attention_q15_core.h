/*
 * The kernel's inner routines shared by its two entry points, one-pass (attention_q15.c, q15attn_rows) and streamed
 * (attention_q15_stream.c, q15attn_stream): a private header of those files and of the division's
 * (attention_q15_divide.c), not part of the API (attention_q15.h). Each routine takes a span of keys into the
 * online-softmax state of one or two query rows (m, l and the accumulators A of docs/q15.md step 4); the division
 * (step 6) is separate, so the state can wait in memory between key chunks.
 */
#ifndef ATTENTION_Q15_CORE_H
#define ATTENTION_Q15_CORE_H

#include "attention_q15.h"

/* dot2 and the divisions are inlined into their callers: a call's register saves and restores cost about a tenth of a
 * short dot product, and more than a division. */
#if defined(__GNUC__)
#define Q15ATTN_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define Q15ATTN_ALWAYS_INLINE inline
#endif

/* Keys key0 .. key1-1 of a head, as a call holds them: k points at key key0's row, vt at Vᵀ's column 0 for key
 * key0, and a row of Vᵀ is `stride` elements long (seq in one pass, the chunk's length when streamed). */
typedef struct {
    const int16_t *k;
    const int16_t *vt;
    int32_t stride;
    int32_t key0, key1;
} q15attn_span;

/* int64 words of state per query row: the accumulators (2·ceil(dim/2): a pair's are interleaved by column pair),
 * then l, then m (one word). */
static inline int32_t q15attn_row_words(int32_t dim) {
    return 2 * ((dim + 1) / 2) + 2;
}

/* Whether rows go two at a time (q15attn_absorb_pair) for these parameters. */
int q15attn_use_pairs(const q15attn_params *p);

/* One row that sees keys 0 .. nkeys-1: takes the span's keys below nkeys into acc (dim words), *l and *m. A span
 * starting at key 0 starts the state; one holding none of the row's keys leaves it as it was. */
void q15attn_absorb_row(const q15attn_params *p, const int16_t *qi, int32_t nkeys, const q15attn_span *s,
    int64_t *acc, int64_t *l, int32_t *m);

/* Rows i and i+1 (q0 and q0 + dim), row i seeing keys 0 .. nkeys0-1 and row i+1 one more when causal: acc holds
 * 4·ceil(dim/2) words (column pair g: A0[2g], A0[2g+1], A1[2g], A1[2g+1]), l and m two each. */
void q15attn_absorb_pair(const q15attn_params *p, const int16_t *q0, int32_t nkeys0, const q15attn_span *s,
    int64_t *acc, int64_t l[2], int32_t m[2]);

/* O = A · 2^g / l for one row (docs/q15.md §6), its shift g chosen from the row's largest |A| and written to *shift:
 * column 2j at acc[j·stride], 2j+1 next to it (stride 2 for a row's own accumulators, 4 for a row of a pair). */
void q15attn_divide_row(const int64_t *acc, int32_t stride, int64_t l, int32_t dim, int16_t *o, uint8_t *shift);

#if defined(__arm__) && defined(__ARM_ARCH_7EM__)
#define DEMCR (*(volatile uint32_t *)0xE000EDFCu)
#define DWT_CTRL (*(volatile uint32_t *)0xE0001000u)
#define DWT_CYCCNT (*(volatile uint32_t *)0xE0001004u)

/* Turn the DWT cycle counter on (if it is off) and read it: the start of a timed call; end - start = cycles. */
uint32_t q15attn_dwt_start(void);
#endif

#endif
