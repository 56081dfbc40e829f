/*
 * The two-row routines of attention_q15.c (2x2 register blocking): the job records, the Cortex-M4 Thumb-2 routines
 * and their portable C twins. A private part of attention_q15.c, included once by it after the helpers it uses
 * (round_shift, the EXP2 table, the score constants); not a public header: the API is attention_q15.h.
 */
#ifndef ATTENTION_Q15_PAIR_H
#define ATTENTION_Q15_PAIR_H

/* ---- two query rows at a time: 2x2 register blocking ----
 *
 * Rows i and i+1 share every load of K and Vᵀ: in QKᵀ a step loads one word (two elements) of each query row and of
 * each of two keys and issues four SMLALD (2 query rows x 2 keys); in P·V it loads one word of each probability row
 * and of each of two columns of Vᵀ and issues four SMLALD (2 rows x 2 columns). Each row keeps its own online-softmax
 * state (m, l, A) and its own block partition: causal row i+1 sees one key more than row i, so in the block where
 * row i ends its extra score is computed, left out of its max, and given probability 0 (an exact zero in every sum).
 * Used for dim <= PAIR_DIM_MAX (both rows' accumulators live on the stack; the Cortex-M4 routines unroll 32 steps)
 * and, on the Cortex-M4, score shifts r >= PAIR_SHIFT_MIN (the routine's score step needs no saturation there);
 * other calls, and the last row of an odd count, take q15attn_absorb_row. */
#define PAIR_DIM_MAX 64
#define PAIR_SHIFT_MIN 22   /* |dot·M| < 2^38 · 2^15 = 2^53, so RSH(dot·M, r) fits 32 bits for r >= 22 */

/* The QKᵀ of one key block for two query rows. In: q0, q1 (dim elements each), k (the block's first key), nb >= 1
 * keys, z (row 0's scores go to z[0..nb), row 1's to z[Q15ATTN_BC_MAX..]), the score constants of
 * pair_score_constants. Out: the scores, and each row's max over all nb of them. Keys go in pairs; an odd last key
 * is paired with itself (its score is written twice, at nb - 1 and nb). Offsets are the Cortex-M4 routine's. */
typedef struct {
    const int16_t *q0;      /* offset 0 */
    const int16_t *q1;      /* 4 */
    const int16_t *k;       /* 8 */
    int32_t nb;             /* 12 */
    int32_t dim;            /* 16 */
    int32_t *z;             /* 20 */
    uint32_t ms;            /* 24 */
    uint32_t chi;           /* 28 */
    uint32_t t;             /* 32 */
    uint32_t wide;          /* 36: r > 32 */
    int32_t max0, max1;     /* 40, 44 */
} qk_job;

/* The P·V of one key block for two probability rows: acc[4g .. 4g+3] += (row 0 · column 2g, row 0 · column 2g+1,
 * row 1 · column 2g, row 1 · column 2g+1) over nb keys, for g < ceil(dim / 2) (set, not added to, in the first
 * block); an odd last column is paired with itself, its second copy in a slot no output reads. p: row 0's nb
 * probabilities, row 1's at p + Q15ATTN_BC_MAX; vt: Vᵀ at column 0 and the block's first key. */
typedef struct {
    const int16_t *p;       /* offset 0 */
    const int16_t *vt;      /* 4 */
    int32_t seq;            /* 8 */
    int32_t nb;             /* 12 */
    int32_t dim;            /* 16 */
    int64_t *acc;           /* 20 */
    int32_t first;          /* 24 */
} pv_job;

/* z = RSH(dot·M, r) for r >= PAIR_SHIFT_MIN without a 64-bit shift. For r <= 32: z = hi32(dot·ms + 2^31) with
 * ms = M·2^(32-r) (< 2^25), since flooring (dot·M + 2^(r-1))·2^(32-r) by 2^32 is flooring dot·M + 2^(r-1) by 2^r.
 * For r > 32: z = (hi32(dot·M) + chi) >> t with chi = 2^(r-33) and t = r - 32: 2^(r-1) is a multiple of 2^32, so
 * flooring by 2^32 first loses nothing. dot·ms stays below 2^63 and every result fits 32 bits (r >= 22). */
static void pair_score_constants(const q15attn_params *p, qk_job *job) {
    const int32_t r = p->score_shift;
    job->wide = r > 32;
    job->ms = job->wide ? (uint32_t)p->score_mult : (uint32_t)p->score_mult << (32 - r);
    job->chi = job->wide ? 1u << (r - 33) : 0u;
    job->t = job->wide ? (uint32_t)(r - 32) : 0u;
}

#if Q15ATTN_PAIR_ASM
/* What the routines below hard-code: the job fields' offsets, 32 unrolled steps of two elements (PAIR_DIM_MAX and
 * Q15ATTN_BC_MAX = 64), and the second row of z and prob at Q15ATTN_BC_MAX elements (256 and 128 bytes). A mismatch
 * is a negative array size. */
typedef char pair_layout_check[(__builtin_offsetof(qk_job, nb) == 12 && __builtin_offsetof(qk_job, z) == 20
    && __builtin_offsetof(qk_job, wide) == 36 && __builtin_offsetof(qk_job, max1) == 44
    && __builtin_offsetof(pv_job, nb) == 12 && __builtin_offsetof(pv_job, first) == 24
    && PAIR_DIM_MAX == 64 && Q15ATTN_BC_MAX == 64) ? 1 : -1];

/* Copy r2 words of each of two rows (r6, r7) into the frame at sp + r5 (the first row) and 128 bytes above it (the
 * second), so the unrolled steps read both rows from SP with immediate offsets; shared by the QKᵀ and P·V routines. */
#define PAIR_COPY_WORDS \
        "add r8, sp, r5\n\t" \
        "cbz r2, 2f\n" \
        "1:\n\t" \
        "ldr r9, [r6], #4\n\t" \
        "ldr r10, [r7], #4\n\t" \
        "str r10, [r8, #" PAIR_X1 "]\n\t" \
        "str r9, [r8], #4\n\t" \
        "subs r2, r2, #1\n\t" \
        "bne 1b\n" \
        "2:\n\t"

/* The step shared by both kernels: words s of the two frame rows (r8, r9) and of the two streams (r10, r11), four
 * SMLALD into r0:r1 (x0·y0), r2:r3 (x0·y1), r4:r5 (x1·y0), r6:r7 (x1·y1). */
#define PAIR_X1 "128"         /* frame offset of the second row's words */
#define PAIR_P1_BYTES "128"   /* Q15ATTN_BC_MAX int16: the second probability row in q15attn_absorb_pair's prob */
#define PAIR_STEP(s) \
    "ldr.w r8, [sp, #4*" #s "]\n\t" \
    "ldr.w r9, [sp, #" PAIR_X1 "+4*" #s "]\n\t" \
    "ldr.w r10, [r12, #4*" #s "]\n\t" \
    "ldr.w r11, [lr, #4*" #s "]\n\t" \
    "smlald r0, r1, r8, r10\n\t" \
    "smlald r2, r3, r8, r11\n\t" \
    "smlald r4, r5, r9, r10\n\t" \
    "smlald r6, r7, r9, r11\n\t"
#define PAIR_STEPS8(a, b, c, d, e, f, g, h) \
    PAIR_STEP(a) PAIR_STEP(b) PAIR_STEP(c) PAIR_STEP(d) PAIR_STEP(e) PAIR_STEP(f) PAIR_STEP(g) PAIR_STEP(h)
#define PAIR_STEPS \
    PAIR_STEPS8(0, 1, 2, 3, 4, 5, 6, 7) PAIR_STEPS8(8, 9, 10, 11, 12, 13, 14, 15) \
    PAIR_STEPS8(16, 17, 18, 19, 20, 21, 22, 23) PAIR_STEPS8(24, 25, 26, 27, 28, 29, 30, 31)
/* The odd element after the steps: halfwords of the frame (tail0, tail1) and of the streams at 128 bytes past the
 * lowered pointers, four SMLALBB. */
#define PAIR_TAIL(tail0, tail1) \
    "ldr.w r8, [sp, #" tail0 "]\n\t" \
    "ldr.w r9, [sp, #" tail1 "]\n\t" \
    "ldrh.w r10, [r12, #128]\n\t" \
    "ldrh.w r11, [lr, #128]\n\t" \
    "smlalbb r0, r1, r8, r10\n\t" \
    "smlalbb r2, r3, r8, r11\n\t" \
    "smlalbb r4, r5, r9, r10\n\t" \
    "smlalbb r6, r7, r9, r11\n\t"

/* QKᵀ for two rows on the Cortex-M4, scheduled by hand (gcc -Os spills the four accumulators). The two query rows
 * are copied into this function's frame so that the step addresses them from SP with immediate offsets, which
 * leaves r0-r12 and lr for four 64-bit accumulators (r0-r7), the four words of a step (r8-r11) and the two keys
 * (r12, lr). The step is unrolled 32 times (dim <= 64) and entered part way for shorter rows (Duff's device): every
 * step is 32 bytes (.w encodings), so the entry is the body's end minus 32 bytes per step, and the key pointers
 * are lowered by 4 bytes per step not run so that step s reads at 4s. An odd dim ends with one halfword step
 * (SMLALBB). The flags set before the steps (no step instruction writes them) say what follows them: N an odd dim,
 * C a score shift above 32. Frame, from SP: q0's words at 4s and q1's at 128 + 4s for the steps that run, then the
 * loop state. */
#define QK_TAIL0 "256"
#define QK_TAIL1 "260"
#define QK_K0 "264"      /* next pair's first key, lowered */
#define QK_KLAST "268"   /* the block's last key, lowered: a second key beyond it is the first again */
#define QK_DIMB "272"    /* bytes per key row */
#define QK_ENTRY "276"   /* where the unrolled steps are entered (Thumb bit set) */
#define QK_Z "280"       /* where this pair's scores go */
#define QK_MAX0 "284"
#define QK_MAX1 "288"
#define QK_FLAGS "292"   /* dim & 1 | (r > 32) << 1 */
#define QK_JOB "296"
#define QK_MS "300"
#define QK_CHI "304"
#define QK_T "308"
#define QK_FRAME "316"   /* + 36 bytes of saved registers: SP stays 8-byte aligned */

/* z into lo from the accumulator lo:hi, r8 = ms. r <= 32: hi32(acc·ms + 2^31) = hi·ms + hi32(lo·ms) + bit 31 of
 * lo32(lo·ms). r > 32 (r11 = chi, r12 = t): (hi·ms + hi32(lo·ms) + chi) >> t. r9, r10 scratch. */
#define QK_SCORE(lo, hi) \
    "umull r9, r10, " lo ", r8\n\t" \
    "add r10, r10, r9, lsr #31\n\t" \
    "mla " lo ", " hi ", r8, r10\n\t"
#define QK_SCORE_WIDE(lo, hi) \
    "umull r9, r10, " lo ", r8\n\t" \
    "mla r10, " hi ", r8, r10\n\t" \
    "add r10, r10, r11\n\t" \
    "asr " lo ", r10, r12\n\t"

__attribute__((naked, noinline)) static void qk_pair_m4(qk_job *job) {
    __asm__ volatile(
        "push {r4-r11, lr}\n\t"
        "sub sp, sp, #" QK_FRAME "\n\t"
        "str r0, [sp, #" QK_JOB "]\n\t"
        "ldr r1, [r0, #16]\n\t"            /* dim */
        "lsrs r2, r1, #1\n\t"              /* steps = dim / 2 */
        "and r3, r1, #1\n\t"
        "ldr r4, [r0, #36]\n\t"            /* wide: r > 32 */
        "orr r3, r3, r4, lsl #1\n\t"
        "str r3, [sp, #" QK_FLAGS "]\n\t"
        "lsls r4, r1, #1\n\t"
        "str r4, [sp, #" QK_DIMB "]\n\t"
        "rsb r5, r2, #32\n\t"
        "lsls r5, r5, #2\n\t"              /* 4 · (32 - steps): how far the key pointers are lowered */
        "adr.w r6, 7f\n\t"
        "sub r6, r6, r2, lsl #5\n\t"
        "orr r6, r6, #1\n\t"
        "str r6, [sp, #" QK_ENTRY "]\n\t"
        "ldr r6, [r0, #0]\n\t"             /* copy q0, q1 into the frame */
        "ldr r7, [r0, #4]\n\t"
        PAIR_COPY_WORDS
        "tst r3, #1\n\t"
        "beq 3f\n\t"
        "ldrh r9, [r6]\n\t"                /* odd dim: the last element of each row */
        "ldrh r10, [r7]\n\t"
        "str r9, [sp, #" QK_TAIL0 "]\n\t"
        "str r10, [sp, #" QK_TAIL1 "]\n"
        "3:\n\t"
        "ldr r1, [r0, #24]\n\t"
        "ldr r2, [r0, #28]\n\t"
        "ldr r3, [r0, #32]\n\t"
        "str r1, [sp, #" QK_MS "]\n\t"
        "str r2, [sp, #" QK_CHI "]\n\t"
        "str r3, [sp, #" QK_T "]\n\t"
        "ldr r1, [r0, #8]\n\t"             /* k */
        "ldr r2, [r0, #12]\n\t"            /* nb */
        "subs r3, r2, #1\n\t"
        "mla r3, r3, r4, r1\n\t"           /* the last key */
        "sub r1, r1, r5\n\t"
        "sub r3, r3, r5\n\t"
        "str r1, [sp, #" QK_K0 "]\n\t"
        "str r3, [sp, #" QK_KLAST "]\n\t"
        "ldr r1, [r0, #20]\n\t"
        "str r1, [sp, #" QK_Z "]\n\t"
        "mov r1, #0x80000000\n\t"
        "str r1, [sp, #" QK_MAX0 "]\n\t"
        "str r1, [sp, #" QK_MAX1 "]\n"
        "4:\n\t"                           /* one pair of keys */
        "ldr r12, [sp, #" QK_K0 "]\n\t"
        "ldr r8, [sp, #" QK_KLAST "]\n\t"
        "ldr r9, [sp, #" QK_DIMB "]\n\t"
        "ldr r11, [sp, #" QK_ENTRY "]\n\t"
        "ldr r10, [sp, #" QK_FLAGS "]\n\t"
        "cmp r12, r8\n\t"
        "bhi 9f\n\t"                       /* past the block's last key */
        "add lr, r12, r9\n\t"
        "cmp lr, r8\n\t"
        "it hi\n\t"
        "movhi lr, r8\n\t"
        "add r9, lr, r9\n\t"
        "str r9, [sp, #" QK_K0 "]\n\t"
        "mov r0, #0\n\t"
        "mov r1, #0\n\t"
        "umull r2, r3, r0, r0\n\t"
        "umull r4, r5, r0, r0\n\t"
        "umull r6, r7, r0, r0\n\t"
        "lsls r10, r10, #31\n\t"           /* N: odd dim; C: r > 32 */
        "bx r11\n\t"
        PAIR_STEPS
        "7:\n\t"
        "bmi 5f\n"
        "6:\n\t"
        "bcs 8f\n\t"
        "ldr r8, [sp, #" QK_MS "]\n\t"
        QK_SCORE("r0", "r1")
        QK_SCORE("r2", "r3")
        QK_SCORE("r4", "r5")
        QK_SCORE("r6", "r7")
        "10:\n\t"
        "ldr r8, [sp, #" QK_Z "]\n\t"
        "ldr r9, [sp, #" QK_MAX0 "]\n\t"
        "ldr r10, [sp, #" QK_MAX1 "]\n\t"
        "str r2, [r8, #4]\n\t"
        "str r4, [r8, #256]\n\t"
        "str r6, [r8, #260]\n\t"
        "str r0, [r8], #8\n\t"
        "str r8, [sp, #" QK_Z "]\n\t"
        "cmp r0, r9\n\t"
        "it gt\n\t"
        "movgt r9, r0\n\t"
        "cmp r2, r9\n\t"
        "it gt\n\t"
        "movgt r9, r2\n\t"
        "cmp r4, r10\n\t"
        "it gt\n\t"
        "movgt r10, r4\n\t"
        "cmp r6, r10\n\t"
        "it gt\n\t"
        "movgt r10, r6\n\t"
        "str r9, [sp, #" QK_MAX0 "]\n\t"
        "str r10, [sp, #" QK_MAX1 "]\n\t"
        "b 4b\n"
        "9:\n\t"
        "ldr r0, [sp, #" QK_JOB "]\n\t"
        "ldr r1, [sp, #" QK_MAX0 "]\n\t"
        "ldr r2, [sp, #" QK_MAX1 "]\n\t"
        "str r1, [r0, #40]\n\t"
        "str r2, [r0, #44]\n\t"
        "add sp, sp, #" QK_FRAME "\n\t"
        "pop {r4-r11, pc}\n"
        "8:\n\t"                           /* r > 32 */
        "ldr r8, [sp, #" QK_MS "]\n\t"
        "ldr r11, [sp, #" QK_CHI "]\n\t"
        "ldr r12, [sp, #" QK_T "]\n\t"
        QK_SCORE_WIDE("r0", "r1")
        QK_SCORE_WIDE("r2", "r3")
        QK_SCORE_WIDE("r4", "r5")
        QK_SCORE_WIDE("r6", "r7")
        "b 10b\n"
        "5:\n\t"                           /* odd dim: element dim-1, at 128 bytes past the lowered key pointers */
        PAIR_TAIL(QK_TAIL0, QK_TAIL1)
        "b 6b\n\t");
}

/* P·V for two rows on the Cortex-M4, the same step as qk_pair_m4's: the two probability rows are copied into the
 * frame (words at 4s and 128 + 4s, s = 32 - nb/2 .. 31), r12 and lr walk two columns of Vᵀ, r0-r7 hold the column
 * pair's four accumulators (loaded from acc and stored back around the steps, or started at zero in the first
 * block). An odd nb ends with one halfword step. */
#define PV_TAIL0 "256"
#define PV_TAIL1 "260"
#define PV_V0 "264"      /* next column pair's first column, lowered by the bias */
#define PV_VLAST "268"   /* the last column, lowered: a second column beyond it is the first again */
#define PV_SEQB "272"    /* bytes per row of Vᵀ */
#define PV_ENTRY "276"
#define PV_ACC "280"     /* this column pair's four accumulators */
#define PV_LEFT "284"    /* column pairs still to do */
#define PV_ODD "288"     /* nb & 1 */
#define PV_FIRST "292"
#define PV_FRAME "300"   /* + 36 bytes of saved registers: SP stays 8-byte aligned */

__attribute__((naked, noinline)) static void pv_pair_m4(pv_job *job) {
    __asm__ volatile(
        "push {r4-r11, lr}\n\t"
        "sub sp, sp, #" PV_FRAME "\n\t"
        "ldr r1, [r0, #12]\n\t"            /* nb */
        "lsrs r2, r1, #1\n\t"              /* steps = nb / 2 */
        "and r3, r1, #1\n\t"
        "str r3, [sp, #" PV_ODD "]\n\t"
        "rsb r5, r2, #32\n\t"
        "lsls r5, r5, #2\n\t"              /* bias = 4 (32 - steps) */
        "adr.w r6, 7f\n\t"
        "sub r6, r6, r2, lsl #5\n\t"
        "orr r6, r6, #1\n\t"
        "str r6, [sp, #" PV_ENTRY "]\n\t"
        "ldr r6, [r0, #0]\n\t"             /* copy p0, p1 into the frame */
        "add r7, r6, #" PAIR_P1_BYTES "\n\t"
        PAIR_COPY_WORDS
        "cbz r3, 3f\n\t"
        "ldrh r9, [r6]\n\t"                /* odd nb: the last probability of each row */
        "ldrh r10, [r7]\n\t"
        "str r9, [sp, #" PV_TAIL0 "]\n\t"
        "str r10, [sp, #" PV_TAIL1 "]\n"
        "3:\n\t"
        "ldr r1, [r0, #8]\n\t"             /* seq */
        "lsls r1, r1, #1\n\t"
        "str r1, [sp, #" PV_SEQB "]\n\t"
        "ldr r2, [r0, #4]\n\t"             /* vt */
        "sub r2, r2, r5\n\t"
        "str r2, [sp, #" PV_V0 "]\n\t"
        "ldr r3, [r0, #16]\n\t"            /* dim */
        "subs r4, r3, #1\n\t"
        "mla r4, r4, r1, r2\n\t"
        "str r4, [sp, #" PV_VLAST "]\n\t"
        "adds r3, r3, #1\n\t"
        "lsrs r3, r3, #1\n\t"
        "str r3, [sp, #" PV_LEFT "]\n\t"
        "ldr r1, [r0, #20]\n\t"
        "str r1, [sp, #" PV_ACC "]\n\t"
        "ldr r1, [r0, #24]\n\t"
        "str r1, [sp, #" PV_FIRST "]\n"
        "4:\n\t"                           /* one pair of columns */
        "ldr r8, [sp, #" PV_ACC "]\n\t"
        "ldr r0, [sp, #" PV_FIRST "]\n\t"
        "cmp r0, #0\n\t"
        "bne 8f\n\t"
        "ldr r0, [r8]\n\t"
        "ldr r1, [r8, #4]\n\t"
        "ldr r2, [r8, #8]\n\t"
        "ldr r3, [r8, #12]\n\t"
        "ldr r4, [r8, #16]\n\t"
        "ldr r5, [r8, #20]\n\t"
        "ldr r6, [r8, #24]\n\t"
        "ldr r7, [r8, #28]\n"
        "9:\n\t"
        "ldr r12, [sp, #" PV_V0 "]\n\t"
        "ldr r9, [sp, #" PV_SEQB "]\n\t"
        "ldr r10, [sp, #" PV_VLAST "]\n\t"
        "ldr r11, [sp, #" PV_ENTRY "]\n\t"
        "ldr r8, [sp, #" PV_ODD "]\n\t"
        "add lr, r12, r9\n\t"
        "cmp lr, r10\n\t"
        "it hi\n\t"
        "movhi lr, r10\n\t"
        "add r9, r12, r9, lsl #1\n\t"
        "str r9, [sp, #" PV_V0 "]\n\t"
        "cmp r8, #0\n\t"                   /* Z clear: an odd nb, whose last key follows the steps */
        "bx r11\n\t"
        PAIR_STEPS
        "7:\n\t"
        "bne 5f\n"
        "6:\n\t"
        "ldr r8, [sp, #" PV_ACC "]\n\t"
        "str r0, [r8]\n\t"
        "str r1, [r8, #4]\n\t"
        "str r2, [r8, #8]\n\t"
        "str r3, [r8, #12]\n\t"
        "str r4, [r8, #16]\n\t"
        "str r5, [r8, #20]\n\t"
        "str r6, [r8, #24]\n\t"
        "str r7, [r8, #28]\n\t"
        "add r8, r8, #32\n\t"
        "str r8, [sp, #" PV_ACC "]\n\t"
        "ldr r9, [sp, #" PV_LEFT "]\n\t"
        "subs r9, r9, #1\n\t"
        "str r9, [sp, #" PV_LEFT "]\n\t"
        "bne 4b\n\t"
        "add sp, sp, #" PV_FRAME "\n\t"
        "pop {r4-r11, pc}\n"
        "8:\n\t"                           /* first block: the accumulators start at zero */
        "mov r0, #0\n\t"
        "mov r1, #0\n\t"
        "mov r2, #0\n\t"
        "mov r3, #0\n\t"
        "mov r4, #0\n\t"
        "mov r5, #0\n\t"
        "mov r6, #0\n\t"
        "mov r7, #0\n\t"
        "b 9b\n"
        "5:\n\t"                           /* odd nb: key nb-1, at 128 bytes past the lowered column pointers */
        PAIR_TAIL(PV_TAIL0, PV_TAIL1)
        "b 6b\n\t");
}

/* The exp pass of one row's block on the Cortex-M4: p_j = EXP2(m - z_j) into prob for j < nb, Σ p_j returned;
 * two scores per loop step. The same arithmetic as exp2_step: δ >= 16·2^16 is replaced by 31·2^16, whose shift of
 * 39 leaves 0 as EXP2 must; the final ((y >> (n+8)) + 1) >> 1 and the 32767 cap are one USAT with ASR #1. */
typedef struct {
    const int32_t *z;           /* offset 0 */
    int16_t *prob;              /* 4 */
    int32_t nb;                 /* 8 */
    int32_t m;                  /* 12 */
    const uint32_t *table;      /* 16: exp2_table */
} exp_job;
typedef char exp_layout_check[(__builtin_offsetof(exp_job, m) == 12 && __builtin_offsetof(exp_job, table) == 16)
    ? 1 : -1];

/* p (register b) = EXP2(d) with r4 = T, r6 = T + 1 word, r7 = 512, r12 = 8; a and c are scratch; d is consumed. */
#define EXP_STEP(d, a, b, c) \
    "cmp " d ", #0x100000\n\t" \
    "it hs\n\t" \
    "movhs " d ", #0x1F0000\n\t" \
    "ubfx " a ", " d ", #10, #6\n\t" \
    "ldr " b ", [r4, " a ", lsl #2]\n\t" \
    "ldr " a ", [r6, " a ", lsl #2]\n\t" \
    "ubfx " c ", " d ", #0, #10\n\t" \
    "sub " a ", " b ", " a "\n\t" \
    "mla " a ", " a ", " c ", r7\n\t" \
    "sub " b ", " b ", " a ", lsr #10\n\t" \
    "add " d ", r12, " d ", lsr #16\n\t" \
    "lsr " b ", " b ", " d "\n\t" \
    "add " b ", " b ", #1\n\t" \
    "usat " b ", #15, " b ", asr #1\n\t"

__attribute__((naked, noinline)) static int32_t exp_block_m4(const exp_job *job) {
    __asm__ volatile(
        "push {r4-r11, lr}\n\t"
        "ldr r1, [r0, #0]\n\t"
        "ldr r3, [r0, #4]\n\t"
        "ldr r2, [r0, #8]\n\t"
        "ldr r5, [r0, #12]\n\t"
        "ldr r4, [r0, #16]\n\t"
        "add r6, r4, #4\n\t"
        "mov r7, #512\n\t"
        "mov r12, #8\n\t"
        "mov r0, #0\n\t"
        "lsrs r2, r2, #1\n\t"            /* pairs of scores; C: an odd one first */
        "bcc 1f\n\t"
        "ldr r8, [r1], #4\n\t"
        "sub r8, r5, r8\n\t"
        EXP_STEP("r8", "r9", "r10", "lr")
        "strh r10, [r3], #2\n\t"
        "add r0, r0, r10\n"
        "1:\n\t"
        "cmp r2, #0\n\t"
        "beq 3f\n"
        "2:\n\t"
        "ldr r8, [r1], #4\n\t"
        "ldr r11, [r1], #4\n\t"
        "sub r8, r5, r8\n\t"
        "sub r11, r5, r11\n\t"
        EXP_STEP("r8", "r9", "r10", "lr")
        "strh r10, [r3], #2\n\t"
        "add r0, r0, r10\n\t"
        EXP_STEP("r11", "r9", "r10", "lr")
        "strh r10, [r3], #2\n\t"
        "add r0, r0, r10\n\t"
        "subs r2, r2, #1\n\t"
        "bne 2b\n"
        "3:\n\t"
        "pop {r4-r11, pc}\n\t");
}
static void qk_pair(const q15attn_params *p, qk_job *job) {
    (void)p;
    qk_pair_m4(job);
}

static void pv_pair(pv_job *job) {
    pv_pair_m4(job);
}

static int32_t exp_block(int32_t m, const int32_t *z, int32_t nb, int16_t *prob) {
    const exp_job job = {z, prob, nb, m, exp2_table};
    return exp_block_m4(&job);
}
#else
/* A score as qk_pair_m4 computes it for r >= PAIR_SHIFT_MIN (pair_score_constants), the generic step below that:
 * the host build holds the former's arithmetic to host/q15.py too. */
static inline int32_t pair_score(int64_t dot, const q15attn_params *p, const qk_job *job) {
    if (p->score_shift < PAIR_SHIFT_MIN) {
        return score(dot, p);
    }
    if (!job->wide) {
        return (int32_t)((dot * (int64_t)job->ms + 0x80000000LL) >> 32);
    }
    return (int32_t)((((dot * (int64_t)job->ms) >> 32) + job->chi) >> job->t);
}

/* Portable QKᵀ for two rows: two 1x2 dot products per pair of keys. */
static void qk_pair(const q15attn_params *p, qk_job *job) {
    const int32_t dim = job->dim, nb = job->nb;
    int32_t *z0 = job->z, *z1 = job->z + Q15ATTN_BC_MAX;
    int32_t max0 = INT32_LOWEST, max1 = INT32_LOWEST;
    for (int32_t j = 0; j < nb; j += 2) {
        const int16_t *k0 = job->k + j * dim, *k1 = j + 1 < nb ? k0 + dim : k0;
        int64_t d00, d01, d10, d11;
        dot2(job->q0, k0, k1, dim, &d00, &d01);
        dot2(job->q1, k0, k1, dim, &d10, &d11);
        z0[j] = pair_score(d00, p, job);
        z0[j + 1] = pair_score(d01, p, job);
        z1[j] = pair_score(d10, p, job);
        z1[j + 1] = pair_score(d11, p, job);
        max0 = z0[j] > max0 ? z0[j] : max0;
        max0 = z0[j + 1] > max0 ? z0[j + 1] : max0;
        max1 = z1[j] > max1 ? z1[j] : max1;
        max1 = z1[j + 1] > max1 ? z1[j + 1] : max1;
    }
    job->max0 = max0;
    job->max1 = max1;
}

/* Portable P·V for two rows: two 1x2 dot products per pair of columns. */
static void pv_pair(pv_job *job) {
    const int32_t dim = job->dim, seq = job->seq, nb = job->nb;
    const int16_t *p0 = job->p, *p1 = job->p + Q15ATTN_BC_MAX;
    for (int32_t c = 0; c < dim; c += 2) {
        const int16_t *v0 = job->vt + c * seq, *v1 = c + 1 < dim ? v0 + seq : v0;
        int64_t s00, s01, s10, s11, *a = job->acc + 2 * c;
        dot2(p0, v0, v1, nb, &s00, &s01);
        dot2(p1, v0, v1, nb, &s10, &s11);
        a[0] = job->first ? s00 : a[0] + s00;
        a[1] = job->first ? s01 : a[1] + s01;
        a[2] = job->first ? s10 : a[2] + s10;
        a[3] = job->first ? s11 : a[3] + s11;
    }
}

/* p_j = EXP2(m - z_j) into prob for j < nb; returns Σ p_j (< 64 · 2^15). */
static int32_t exp_block(int32_t m, const int32_t *z, int32_t nb, int16_t *prob) {
    int32_t sum = 0;
    for (int32_t j = 0; j < nb; j++) {
        prob[j] = (int16_t)exp2_step((uint32_t)m - (uint32_t)z[j]);
        sum += prob[j];
    }
    return sum;
}
#endif

#endif /* ATTENTION_Q15_PAIR_H */
