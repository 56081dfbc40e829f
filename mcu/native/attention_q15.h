/*
 * Q15 attention for one head: the C implementation of the contract in docs/q15.md.
 *
 * Pure C99: no MicroPython headers, no libc calls, no initialised .data and no static BSS (MicroPython native
 * module rules), so the same file builds for the STM32F407 (arm-none-eabi-gcc, Cortex-M4 DSP instructions) and for
 * the host (any C99 compiler, portable fallbacks), and both give the same bits as host/q15.py.
 *
 * Layouts (int16 Q15, row-major):
 *   q   nrows x dim   query rows row0 .. row0+nrows-1 (Q is streamed to the kernel in chunks of rows)
 *   k   seq x dim     all keys, resident
 *   vt  dim x seq     V transposed: row c holds v[0][c] .. v[seq-1][c], resident
 *   o   nrows x dim   output rows, same scale as V
 */
#ifndef KBENCH_ATTENTION_Q15_H
#define KBENCH_ATTENTION_Q15_H

#include <stdint.h>

#define Q15ATTN_VERSION 1
#define Q15ATTN_SEQ_MAX 32768   /* l = sum of p < seq * 2^15 fits 32 bits with room for rounding */
#define Q15ATTN_DIM_MAX 256     /* |sum of dim products| <= 256 * 2^30 = 2^38: exact in int64 */
#define Q15ATTN_BC_MAX 64       /* key block: Bc scores and probabilities live on the stack */
#define Q15ATTN_MULT_MIN 16384  /* score multiplier M is a normalised 15-bit mantissa: 2^14 <= M < 2^15 */
#define Q15ATTN_MULT_MAX 32767
#define Q15ATTN_SHIFT_MIN 1     /* score shift r: z = round(acc * M / 2^r) */
#define Q15ATTN_SHIFT_MAX 62

typedef struct {
    int32_t seq;         /* keys N, 1 .. Q15ATTN_SEQ_MAX */
    int32_t dim;         /* head dimension d, 1 .. Q15ATTN_DIM_MAX */
    int32_t causal;      /* 0: every key; 1: key j only for query i >= j */
    int32_t bc;          /* keys per online-softmax block, 1 .. Q15ATTN_BC_MAX */
    int32_t score_mult;  /* M of the score scale (host/q15.py score_scale) */
    int32_t score_shift; /* r of the score scale */
} q15attn_params;

/* A caller's buffer as the binding sees it: element typecode ('h' for int16) and length in bytes. */
typedef struct {
    int32_t typecode;
    int32_t nbytes;
} q15attn_buffer;

enum {
    Q15ATTN_OK = 0,
    Q15ATTN_E_SEQ = -1,
    Q15ATTN_E_DIM = -2,
    Q15ATTN_E_CAUSAL = -3,
    Q15ATTN_E_BC = -4,
    Q15ATTN_E_MULT = -5,
    Q15ATTN_E_SHIFT = -6,
    Q15ATTN_E_ROWS = -7,       /* row0 / nrows outside 0 .. seq */
    Q15ATTN_E_TYPECODE = -8,   /* a buffer is not int16 ('h') */
    Q15ATTN_E_LEN_Q = -9,      /* q is not a whole number of rows of dim */
    Q15ATTN_E_LEN_K = -10,     /* k is not seq * dim */
    Q15ATTN_E_LEN_VT = -11,    /* vt is not dim * seq */
    Q15ATTN_E_LEN_O = -12      /* o is not the size of q */
};

/* Check the parameters and a block of rows; Q15ATTN_OK or the first error. */
int q15attn_check(const q15attn_params *p, int32_t row0, int32_t nrows);

/* Check the four buffers (q, k, vt, o in that order) against the parameters; on success *nrows = rows in q. */
int q15attn_check_buffers(const q15attn_params *p, int32_t row0, const q15attn_buffer bufs[4], int32_t *nrows);

/* Compute output rows row0 .. row0+nrows-1; returns Q15ATTN_OK or the q15attn_check error (o untouched). */
int q15attn_rows(const q15attn_params *p, int32_t row0, int32_t nrows,
    const int16_t *q, const int16_t *k, const int16_t *vt, int16_t *o);

/* The contract's exp step: 2^(-delta / 2^16) in Q15 (held to 32767), delta >= 0 in Q.16. */
int32_t q15attn_exp2(uint32_t delta);

/* Write a one-line message for a status into buf (NUL-terminated, at most size bytes); returns its length. The
 * message names the bad value and the allowed range, e.g. "dim=300 is out of range; allowed: 1..256". */
int32_t q15attn_describe(int status, const q15attn_params *p, int32_t row0, const q15attn_buffer bufs[4],
    char *buf, int32_t size);

#if defined(__arm__) && defined(__ARM_ARCH_7EM__)
/* q15attn_rows bracketed by the DWT cycle counter (enabled here if it is off); *cycles = CYCCNT difference. */
int q15attn_rows_timed(const q15attn_params *p, int32_t row0, int32_t nrows,
    const int16_t *q, const int16_t *k, const int16_t *vt, int16_t *o, uint32_t *cycles);
#endif

#endif
