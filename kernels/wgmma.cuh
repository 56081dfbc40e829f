// Warpgroup matrix-multiply-accumulate (Hopper `wgmma`, sm_90a) wrappers for kernels/flash_wgmma.cu.
//
// wgmma_ss<N, KIND>: D(64×N, fp32) (+)= A(64×16) · B(16×N), both operands read from shared memory through matrix
// descriptors, both K-major (A row-major, B's rows are its columns: Kᵀ of a row-major K).
// wgmma_rs<N, KIND>: the same with A from registers (four 32-bit registers per thread, the mma.sync m16n8k16 A
// fragment of the thread's warp's 16 rows) and B MN-major (transposed: a row-major V, keys × d).
// KIND 0 is fp16, 1 is bf16. `accumulate` 0 ignores D's old contents (scale-d false). Each thread of the warpgroup
// holds N/2 accumulators: d[4i + e] is row 16·(warp mod 4) + lane/4 + 8·(e/2), column 8i + 2·(lane mod 4) + (e mod 2),
// the mma.sync C layout repeated over the N/8 column groups. Issue only between wgmma_fence() and wgmma_commit();
// the results are there after wgmma_wait<0>() and fence_operands() on them (kernels/flash_wgmma.cu).
// An instruction's accumulator list is part of its text, so each shape is its own specialisation: the lists are
// generated (WGMMA_TEXT_*, WGMMA_OUT_*), and each shape is instantiated for both types at the end of this file.
// wgmma_ss exists for N 64, 96, 128, 160, 176 and 192 (S = Q·Kᵀ, N = Bc), wgmma_rs for N 64 and 128 (O += P·V,
// N = d); kernels/launch_configs.py WGMMA_BCS lists the former for the launchers, and wgmma_ss_shape<N> tells a
// kernel's static_assert which exist.

#pragma once

typedef unsigned long long u64;

template <int N, int KIND>
__device__ __forceinline__ void wgmma_ss(float *d, u64 a, u64 b, int accumulate);

template <int N, int KIND>
__device__ __forceinline__ void wgmma_rs(float *d, const unsigned *a, u64 b, int accumulate);

// wgmma_ss_shape<N>::built: whether wgmma_ss<N, KIND> is specialised below (for a kernel's static_assert).
template <int N>
struct wgmma_ss_shape {
    static constexpr bool built = false;
};

// Operand tu of an instruction, t its tens digit (empty below 10) and u its units digit: "%tu" in the asm text,
// and the accumulator d[tu] as the asm output it names.
#define WGMMA_TEXT(t, u) "%" #t #u
#define WGMMA_OUT(t, u) "+f"(d[t##u])

// The first 2, 4, .., 10 operands of decade t, as text (joined by ", ") and as outputs.
#define WGMMA_TEXT2(t) WGMMA_TEXT(t, 0) ", " WGMMA_TEXT(t, 1)
#define WGMMA_TEXT4(t) WGMMA_TEXT2(t) ", " WGMMA_TEXT(t, 2) ", " WGMMA_TEXT(t, 3)
#define WGMMA_TEXT6(t) WGMMA_TEXT4(t) ", " WGMMA_TEXT(t, 4) ", " WGMMA_TEXT(t, 5)
#define WGMMA_TEXT8(t) WGMMA_TEXT6(t) ", " WGMMA_TEXT(t, 6) ", " WGMMA_TEXT(t, 7)
#define WGMMA_TEXT10(t) WGMMA_TEXT8(t) ", " WGMMA_TEXT(t, 8) ", " WGMMA_TEXT(t, 9)
#define WGMMA_OUT2(t) WGMMA_OUT(t, 0), WGMMA_OUT(t, 1)
#define WGMMA_OUT4(t) WGMMA_OUT2(t), WGMMA_OUT(t, 2), WGMMA_OUT(t, 3)
#define WGMMA_OUT6(t) WGMMA_OUT4(t), WGMMA_OUT(t, 4), WGMMA_OUT(t, 5)
#define WGMMA_OUT8(t) WGMMA_OUT6(t), WGMMA_OUT(t, 6), WGMMA_OUT(t, 7)
#define WGMMA_OUT10(t) WGMMA_OUT8(t), WGMMA_OUT(t, 8), WGMMA_OUT(t, 9)

// Operands 0 .. 10·T + k − 1 (WGMMA_TEXT_T(k), WGMMA_OUT_T(k); k even, 2 .. 10): T full decades, then k of the next.
#define WGMMA_TEXT_0(k) WGMMA_TEXT##k()
#define WGMMA_TEXT_1(k) WGMMA_TEXT10() ", " WGMMA_TEXT##k(1)
#define WGMMA_TEXT_2(k) WGMMA_TEXT_1(10) ", " WGMMA_TEXT##k(2)
#define WGMMA_TEXT_3(k) WGMMA_TEXT_2(10) ", " WGMMA_TEXT##k(3)
#define WGMMA_TEXT_4(k) WGMMA_TEXT_3(10) ", " WGMMA_TEXT##k(4)
#define WGMMA_TEXT_5(k) WGMMA_TEXT_4(10) ", " WGMMA_TEXT##k(5)
#define WGMMA_TEXT_6(k) WGMMA_TEXT_5(10) ", " WGMMA_TEXT##k(6)
#define WGMMA_TEXT_7(k) WGMMA_TEXT_6(10) ", " WGMMA_TEXT##k(7)
#define WGMMA_TEXT_8(k) WGMMA_TEXT_7(10) ", " WGMMA_TEXT##k(8)
#define WGMMA_TEXT_9(k) WGMMA_TEXT_8(10) ", " WGMMA_TEXT##k(9)
#define WGMMA_OUT_0(k) WGMMA_OUT##k()
#define WGMMA_OUT_1(k) WGMMA_OUT10(), WGMMA_OUT##k(1)
#define WGMMA_OUT_2(k) WGMMA_OUT_1(10), WGMMA_OUT##k(2)
#define WGMMA_OUT_3(k) WGMMA_OUT_2(10), WGMMA_OUT##k(3)
#define WGMMA_OUT_4(k) WGMMA_OUT_3(10), WGMMA_OUT##k(4)
#define WGMMA_OUT_5(k) WGMMA_OUT_4(10), WGMMA_OUT##k(5)
#define WGMMA_OUT_6(k) WGMMA_OUT_5(10), WGMMA_OUT##k(6)
#define WGMMA_OUT_7(k) WGMMA_OUT_6(10), WGMMA_OUT##k(7)
#define WGMMA_OUT_8(k) WGMMA_OUT_7(10), WGMMA_OUT##k(8)
#define WGMMA_OUT_9(k) WGMMA_OUT_8(10), WGMMA_OUT##k(9)

// wgmma_ss<N, KIND>: the N/2 = 10·T + K accumulators are operands 0 .. N/2 − 1, then the descriptors a and b and
// the scale-d flag are operands A, B and P (written out: the preprocessor cannot add; the assertion checks them).
#define WGMMA_SS(KIND, TYPE, N, T, K, A, B, P) \
    template <> \
    __device__ __forceinline__ void wgmma_ss<N, KIND>(float *d, u64 a, u64 b, int accumulate) { \
        static_assert(10 * T + K == N / 2 && A == N / 2 && B == A + 1 && P == A + 2, "wgmma_ss operand numbers"); \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n" \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" WGMMA_TEXT_##T(K) "}, %" #A \
                     ", %" #B ", p, 1, 1, 0, 0;\n}\n" \
                     : WGMMA_OUT_##T(K) \
                     : "l"(a), "l"(b), "r"(accumulate)); \
    }

// wgmma_rs<N, KIND>: the accumulators as above, then A's four registers, b and the scale-d flag are operands
// A0 .. A0 + 3, B and P.
#define WGMMA_RS(KIND, TYPE, N, T, K, A0, A1, A2, A3, B, P) \
    template <> \
    __device__ __forceinline__ void wgmma_rs<N, KIND>(float *d, const unsigned *a, u64 b, int accumulate) { \
        static_assert(10 * T + K == N / 2 && A0 == N / 2 && A1 == A0 + 1 && A2 == A0 + 2 && A3 == A0 + 3 && \
                          B == A0 + 4 && P == A0 + 5, \
                      "wgmma_rs operand numbers"); \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n" \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" WGMMA_TEXT_##T(K) "}, " \
                     "{%" #A0 ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #B ", p, 1, 1, 1;\n}\n" \
                     : WGMMA_OUT_##T(K) \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate)); \
    }

// Each shape in both types: N, N/2 as T decades and K more, then the input operands' numbers.
#define WGMMA_SS_SHAPE(N, T, K, A, B, P) \
    template <> \
    struct wgmma_ss_shape<N> { \
        static constexpr bool built = true; \
    }; \
    WGMMA_SS(0, "f16", N, T, K, A, B, P) WGMMA_SS(1, "bf16", N, T, K, A, B, P)
#define WGMMA_RS_SHAPE(N, T, K, A0, A1, A2, A3, B, P) \
    WGMMA_RS(0, "f16", N, T, K, A0, A1, A2, A3, B, P) WGMMA_RS(1, "bf16", N, T, K, A0, A1, A2, A3, B, P)

WGMMA_SS_SHAPE(64, 3, 2, 32, 33, 34)
WGMMA_SS_SHAPE(96, 4, 8, 48, 49, 50)
WGMMA_SS_SHAPE(128, 6, 4, 64, 65, 66)
WGMMA_SS_SHAPE(160, 7, 10, 80, 81, 82)
WGMMA_SS_SHAPE(176, 8, 8, 88, 89, 90)
WGMMA_SS_SHAPE(192, 9, 6, 96, 97, 98)
WGMMA_RS_SHAPE(64, 3, 2, 32, 33, 34, 35, 36, 37)
WGMMA_RS_SHAPE(128, 6, 4, 64, 65, 66, 67, 68, 69)
