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
 *   o       nrows x dim   output rows: row i stands for o_i · 2^(s_V - 15 - g_i) (docs/q15.md §6)
 *   oshift  nrows         uint8: each output row's shift g_i, 0 .. Q15ATTN_OUT_SHIFT_MAX
 *
 * A streamed head (q15attn_stream, docs/q15.md §7) takes K and Vᵀ one key chunk at a time instead: k is that chunk's
 * nkeys x dim keys, vt its dim x nkeys columns of Vᵀ, and state (q15attn_state_bytes) carries the rows' online softmax
 * from one chunk to the next.
 */
#ifndef KBENCH_ATTENTION_Q15_H
#define KBENCH_ATTENTION_Q15_H

#include <stdint.h>

/* 1: q15attn_rows; 2: + q15attn_stream; 3: + the frame server's crc16, cobs_encode; 4: contract v2, every output
 * row with its own shift (the oshift output of rows and stream) */
#define Q15ATTN_VERSION 4
#define Q15ATTN_SEQ_MAX 32768   /* l = sum of p < seq * 2^15 fits 32 bits with room for rounding */
#define Q15ATTN_DIM_MAX 256     /* |sum of dim products| <= 256 * 2^30 = 2^38: exact in int64 */
#define Q15ATTN_BC_MAX 64       /* key block: Bc scores and probabilities live on the stack */
#define Q15ATTN_MULT_MIN 16384  /* score multiplier M is a normalised 15-bit mantissa: 2^14 <= M < 2^15 */
#define Q15ATTN_MULT_MAX 32767
#define Q15ATTN_SHIFT_MIN 1     /* score shift r: z = round(acc * M / 2^r) */
#define Q15ATTN_SHIFT_MAX 62
#define Q15ATTN_OUT_SHIFT_MAX 31  /* an output row's shift g: 0 .. 31 */

typedef struct {
    int32_t seq;         /* keys N, 1 .. Q15ATTN_SEQ_MAX */
    int32_t dim;         /* head dimension d, 1 .. Q15ATTN_DIM_MAX */
    int32_t causal;      /* 0: every key; 1: key j only for query i >= j */
    int32_t bc;          /* keys per online-softmax block, 1 .. Q15ATTN_BC_MAX */
    int32_t score_mult;  /* M of the score scale (host/q15.py score_scale) */
    int32_t score_shift; /* r of the score scale */
} q15attn_params;

/* A caller's buffer as the binding sees it: element typecode ('h' for int16, 'B' for uint8) and length in bytes. */
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
    Q15ATTN_E_LEN_O = -12,     /* o is not the size of q */
    Q15ATTN_E_KEYS = -13,      /* a streamed chunk off the Bc grid, empty, or past the rows' last key */
    Q15ATTN_E_LEN_STATE = -14, /* the state buffer is not q15attn_state_bytes(dim, nrows) */
    Q15ATTN_E_STATE = -15,     /* the state does not hold these rows, parameters and keys 0 .. key0-1 */
    Q15ATTN_E_LEN_OSHIFT = -16 /* oshift is missing (empty) or shorter than one byte per row */
};

/* Check the parameters and a block of rows; Q15ATTN_OK or the first error. */
int q15attn_check(const q15attn_params *p, int32_t row0, int32_t nrows);

/* Check the five buffers (q, k, vt, o: 'h'; oshift: 'B', at least one byte per row; in that order) against the
 * parameters; on success *nrows = rows in q. */
int q15attn_check_buffers(const q15attn_params *p, int32_t row0, const q15attn_buffer bufs[5], int32_t *nrows);

/* Compute output rows row0 .. row0+nrows-1 into o and their shifts into oshift[0 .. nrows-1]; returns Q15ATTN_OK
 * or the q15attn_check error (o and oshift untouched). */
int q15attn_rows(const q15attn_params *p, int32_t row0, int32_t nrows,
    const int16_t *q, const int16_t *k, const int16_t *vt, int16_t *o, uint8_t *oshift);

/* ---- streamed heads ----
 * Calls for one set of rows come with key0 = 0, then each next chunk in key order; every chunk starts on a multiple
 * of Bc and holds whole blocks of Bc, except the one that reaches the rows' last key (seq, or row0 + nrows when
 * causal), which may hold the rest. That last call divides and writes o and oshift; the others leave them untouched.
 * The state records the rows, the parameters and the next key, so a chunk out of order or for other rows is refused
 * (Q15ATTN_E_STATE), never mixed in; key0 = 0 starts it afresh. Bit-identical to q15attn_rows (docs/q15.md §7). */

/* Bytes of state for nrows query rows of dim (a 32-byte header, then 2·ceil(dim/2) + 2 int64 per row); -1 for a dim
 * or nrows outside 1 .. Q15ATTN_DIM_MAX or 1 .. Q15ATTN_SEQ_MAX. */
int32_t q15attn_state_bytes(int32_t dim, int32_t nrows);

/* The key after the rows' last: seq, or row0 + nrows when causal (keys beyond it change nothing). */
int32_t q15attn_key_end(const q15attn_params *p, int32_t row0, int32_t nrows);

/* Check parameters, rows and a key chunk; Q15ATTN_OK or the first error. */
int q15attn_check_stream(const q15attn_params *p, int32_t row0, int32_t nrows, int32_t key0, int32_t nkeys);

/* Check the six buffers (q, k, vt, o, oshift, state) of a streamed call; on success *nrows and *nkeys. */
int q15attn_check_stream_buffers(const q15attn_params *p, int32_t row0, int32_t key0, const q15attn_buffer bufs[6],
    int32_t *nrows, int32_t *nkeys);

/* Take keys key0 .. key0+nkeys-1 into the state of rows row0 .. row0+nrows-1 (state 8-byte aligned); the call that
 * reaches the rows' last key writes o and oshift. Q15ATTN_OK or the error (state, o and oshift untouched on an
 * error). */
int q15attn_stream(const q15attn_params *p, int32_t row0, int32_t nrows, int32_t key0, int32_t nkeys,
    const int16_t *q, const int16_t *k, const int16_t *vt, int64_t *state, int16_t *o, uint8_t *oshift);

/* The one-line message of a streamed call's status (the statuses above, and those of q15attn_describe). */
int32_t q15attn_describe_stream(int status, const q15attn_params *p, int32_t row0, int32_t key0,
    const q15attn_buffer bufs[6], char *buf, int32_t size);

/* The contract's exp step: 2^(-delta / 2^16) in Q15 (held to 32767), delta >= 0 in Q.16. */
int32_t q15attn_exp2(uint32_t delta);

/* Write a one-line message for a status into buf (NUL-terminated, at most size bytes); returns its length. The
 * message names the bad value and the allowed range, e.g. "dim=300 is out of range; allowed: 1..256". */
int32_t q15attn_describe(int status, const q15attn_params *p, int32_t row0, const q15attn_buffer bufs[5],
    char *buf, int32_t size);

#if defined(__arm__) && defined(__ARM_ARCH_7EM__)
/* q15attn_rows bracketed by the DWT cycle counter (enabled here if it is off); *cycles = CYCCNT difference. */
int q15attn_rows_timed(const q15attn_params *p, int32_t row0, int32_t nrows,
    const int16_t *q, const int16_t *k, const int16_t *vt, int16_t *o, uint8_t *oshift, uint32_t *cycles);

/* q15attn_stream bracketed by the DWT cycle counter. */
int q15attn_stream_timed(const q15attn_params *p, int32_t row0, int32_t nrows, int32_t key0, int32_t nkeys,
    const int16_t *q, const int16_t *k, const int16_t *vt, int64_t *state, int16_t *o, uint8_t *oshift,
    uint32_t *cycles);
#endif

#endif
