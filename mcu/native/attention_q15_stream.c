/*
 * Streamed heads: q15attn_stream takes K and Vᵀ one key chunk at a time and keeps each query row's online-softmax
 * state (m, l, A) in the caller's buffer between calls, so a head whose K and Vᵀ do not fit in memory still runs,
 * bit-identical to q15attn_rows at the same Bc (docs/q15.md §7 says why; API in attention_q15.h).
 *
 * The state buffer: a header of eight int32 (a mark, the rows, the next key, the parameters), then per query row
 * q15attn_row_words(dim) int64 words. Rows go as in q15attn_rows, two at a time from the first when pairs are used
 * (a pair's words: both rows' interleaved accumulators, l0, l1, then m0 and m1 in one word) and one at a time
 * otherwise (accumulators, l, then m); only this file reads the layout. A call checks the header against its own
 * rows, parameters and key0 before it touches anything, so a state is never carried into other rows or a chunk out
 * of order.
 */
#include "attention_q15.h"
#include "attention_q15_core.h"

#define STATE_MARK 0x53353151   /* "Q15S" little-endian: the header was written by a key0 = 0 call */

enum { H_MARK, H_ROW0, H_NROWS, H_NEXT, H_SEQ, H_DIM, H_MODE, H_SCALE, HEADER_INT32 };
#define HEADER_WORDS (HEADER_INT32 / 2)   /* int64 words before the first row's */

int32_t q15attn_state_bytes(int32_t dim, int32_t nrows) {
    if (dim < 1 || dim > Q15ATTN_DIM_MAX || nrows < 1 || nrows > Q15ATTN_SEQ_MAX) {
        return -1;   /* within the limits the size is below 2^26: no overflow */
    }
    return 8 * (HEADER_WORDS + nrows * q15attn_row_words(dim));
}

int32_t q15attn_key_end(const q15attn_params *p, int32_t row0, int32_t nrows) {
    return p->causal ? row0 + nrows : p->seq;
}

int q15attn_check_stream(const q15attn_params *p, int32_t row0, int32_t nrows, int32_t key0, int32_t nkeys) {
    const int status = q15attn_check(p, row0, nrows);
    if (status != Q15ATTN_OK) {
        return status;
    }
    const int32_t end = q15attn_key_end(p, row0, nrows);
    if (key0 < 0 || key0 >= end || key0 % p->bc != 0 || nkeys < 1 || nkeys > end - key0
        || (key0 + nkeys < end && nkeys % p->bc != 0)) {
        return Q15ATTN_E_KEYS;
    }
    return Q15ATTN_OK;
}

int q15attn_check_stream_buffers(const q15attn_params *p, int32_t row0, int32_t key0, const q15attn_buffer bufs[6],
    int32_t *nrows, int32_t *nkeys) {
    for (int i = 0; i < 6; i++) {
        if (bufs[i].typecode != (i == 4 ? 'B' : 'h')) {   /* oshift is uint8; the state is raw storage ('h') */
            return Q15ATTN_E_TYPECODE;
        }
    }
    const int status = q15attn_check(p, 0, 1);
    if (status != Q15ATTN_OK) {
        return status;
    }
    const int32_t len_q = bufs[0].nbytes / 2, len_k = bufs[1].nbytes / 2;
    if (len_q == 0 || len_q % p->dim != 0) {
        return Q15ATTN_E_LEN_Q;
    }
    if (len_k == 0 || len_k % p->dim != 0) {
        return Q15ATTN_E_LEN_K;
    }
    if (bufs[2].nbytes != bufs[1].nbytes) {
        return Q15ATTN_E_LEN_VT;
    }
    if (bufs[3].nbytes != bufs[0].nbytes) {
        return Q15ATTN_E_LEN_O;
    }
    *nrows = len_q / p->dim;
    *nkeys = len_k / p->dim;
    if (bufs[4].nbytes < *nrows) {
        return Q15ATTN_E_LEN_OSHIFT;
    }
    if (*nrows > Q15ATTN_SEQ_MAX || bufs[5].nbytes != q15attn_state_bytes(p->dim, *nrows)) {
        return *nrows > Q15ATTN_SEQ_MAX ? Q15ATTN_E_ROWS : Q15ATTN_E_LEN_STATE;
    }
    return q15attn_check_stream(p, row0, *nrows, key0, *nkeys);
}

/* The header a state of these rows and parameters carries, with `next` the key its next chunk starts at. */
static void header(const q15attn_params *p, int32_t row0, int32_t nrows, int32_t next, int32_t h[HEADER_INT32]) {
    h[H_MARK] = STATE_MARK;
    h[H_ROW0] = row0;
    h[H_NROWS] = nrows;
    h[H_NEXT] = next;
    h[H_SEQ] = p->seq;
    h[H_DIM] = p->dim;
    h[H_MODE] = p->causal | p->bc << 8;
    h[H_SCALE] = p->score_mult | p->score_shift << 16;
}

/* Row r's state: the pair or the single row starting there. */
static int64_t *row_state(int64_t *state, int32_t r, int32_t dim) {
    return state + HEADER_WORDS + r * q15attn_row_words(dim);
}

int q15attn_stream(const q15attn_params *p, int32_t row0, int32_t nrows, int32_t key0, int32_t nkeys,
    const int16_t *q, const int16_t *k, const int16_t *vt, int64_t *state, int16_t *o, uint8_t *oshift) {
    int status = q15attn_check_stream(p, row0, nrows, key0, nkeys);
    if (status != Q15ATTN_OK) {
        return status;
    }
    int32_t *h = (int32_t *)state, want[HEADER_INT32];
    header(p, row0, nrows, key0, want);
    if (key0 > 0) {
        for (int i = 0; i < HEADER_INT32; i++) {
            if (h[i] != want[i]) {
                return Q15ATTN_E_STATE;
            }
        }
    }
    const int32_t dim = p->dim, groups = (dim + 1) / 2, end = key0 + nkeys;
    const q15attn_span span = {k, vt, nkeys, key0, end};
    const int pairs = q15attn_use_pairs(p);
    int32_t r = 0;
    if (pairs) {
        for (; r + 1 < nrows; r += 2) {
            int64_t *u = row_state(state, r, dim);
            const int32_t i = row0 + r;
            q15attn_absorb_pair(p, q + r * dim, p->causal ? i + 1 : p->seq, &span, u, u + 4 * groups,
                                (int32_t *)(u + 4 * groups + 2));
        }
    }
    for (; r < nrows; r++) {
        int64_t *u = row_state(state, r, dim);
        const int32_t i = row0 + r;
        q15attn_absorb_row(p, q + r * dim, p->causal ? i + 1 : p->seq, &span, u, u + 2 * groups,
                           (int32_t *)(u + 2 * groups + 1));
    }
    header(p, row0, nrows, end, h);
    if (end < q15attn_key_end(p, row0, nrows)) {
        return Q15ATTN_OK;
    }
    r = 0;  /* the last chunk: O = A · 2^g / l, row by row as the state holds them */
    if (pairs) {
        for (; r + 1 < nrows; r += 2) {
            const int64_t *u = row_state(state, r, dim);
            q15attn_divide_row(u, 4, u[4 * groups], dim, o + r * dim, oshift + r);
            q15attn_divide_row(u + 2, 4, u[4 * groups + 1], dim, o + (r + 1) * dim, oshift + r + 1);
        }
    }
    for (; r < nrows; r++) {
        const int64_t *u = row_state(state, r, dim);
        q15attn_divide_row(u, 2, u[2 * groups], dim, o + r * dim, oshift + r);
    }
    return Q15ATTN_OK;
}

#if defined(__arm__) && defined(__ARM_ARCH_7EM__)
int q15attn_stream_timed(const q15attn_params *p, int32_t row0, int32_t nrows, int32_t key0, int32_t nkeys,
    const int16_t *q, const int16_t *k, const int16_t *vt, int64_t *state, int16_t *o, uint8_t *oshift,
    uint32_t *cycles) {
    const int checked = q15attn_check_stream(p, row0, nrows, key0, nkeys);
    if (checked != Q15ATTN_OK) {
        return checked;
    }
    const uint32_t start = q15attn_dwt_start();
    const int status = q15attn_stream(p, row0, nrows, key0, nkeys, q, k, vt, state, o, oshift);
    *cycles = DWT_CYCCNT - start;
    return status;
}
#endif
