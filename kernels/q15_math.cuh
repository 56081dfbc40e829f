// The Q15 contract's per-thread integer arithmetic (docs/q15.md, host/q15.py), for the GPU kernel kernels/q15.cu
// and, unchanged, for a host program: every function is __host__ __device__ under nvcc and plain inline C++ under
// any other compiler, so tests/kernels/test_q15_math.py builds it with g++ (and nvcc) and holds each function to
// host/q15.py's (exp2_q15, round_shift, divide_q15) on random and extreme values.
//
// Right shifts of negative values are arithmetic (gcc, clang and nvcc define them so; docs/q15.md §7 pins it).
// No standard headers: NVRTC (CuPy's compiler) builds this file as it is.
#pragma once

#ifdef __CUDACC__
#define Q15_HD __host__ __device__ __forceinline__
#else
#define Q15_HD inline
#endif

// The contract's key block (host/q15.py BC).
#define Q15_BC 64
#define Q15_INT32_MIN (-2147483647 - 1)
#define Q15_INT32_MAX 2147483647
#define Q15_ONE_CAP 32767
#define Q15_OUT_SHIFT_MAX 31
// 2^(-64/64) in Q0.24: where the table's last entry interpolates to (host/q15.py EXP2_HALF).
#define Q15_EXP2_HALF (1u << 23)
// T[i] = round(2^(-i/64) · 2^24), i = 0..63 (host/q15.py EXP2_TABLE; tests/kernels/test_q15_math.py compares them).
#define Q15_EXP2_TABLE_VALUES                                                                           \
    16777216u, 16596492u, 16417715u, 16240863u, 16065917u, 15892855u, 15721658u, 15552304u,             \
    15384775u, 15219050u, 15055111u, 14892937u, 14732511u, 14573813u, 14416824u, 14261526u,             \
    14107901u, 13955931u, 13805598u, 13656884u, 13509772u, 13364245u, 13220286u, 13077877u,             \
    12937002u, 12797645u, 12659789u, 12523418u, 12388516u, 12255067u, 12123055u, 11992466u,             \
    11863283u, 11735492u, 11609078u, 11484025u, 11360319u, 11237946u, 11116891u, 10997140u,             \
    10878679u, 10761494u, 10645571u, 10530897u, 10417458u, 10305242u, 10194234u, 10084422u,             \
    9975792u, 9868333u, 9762032u, 9656875u, 9552851u, 9449948u, 9348154u, 9247455u,                     \
    9147842u, 9049301u, 8951823u, 8855394u, 8760003u, 8665641u, 8572295u, 8479954u

// RSH(x, r) = floor(x / 2^r + 1/2) for r >= 1 (add half, arithmetic shift: round half up), x for r = 0.
Q15_HD long long q15_round_shift(long long x, int r) { return r > 0 ? (x + (1LL << (r - 1))) >> r : x; }

// The score in base-2 units, Q15.16: sat_32(RSH(acc · M, r)); |acc · M| < 2^53.
Q15_HD int q15_score(long long acc, int mult, int shift) {
    const long long z = q15_round_shift(acc * mult, shift);
    return z > Q15_INT32_MAX ? Q15_INT32_MAX : z < Q15_INT32_MIN ? Q15_INT32_MIN : (int)z;
}

// EXP2(δ) = 2^(-δ/2^16) in Q15 for δ >= 0 (Q.16, below 2^32): δ = n·2^16 + f, f's top 6 bits pick T[i], its low 10
// bits interpolate linearly to T[i+1] (2^23 after the last), the Q0.24 result shifted right by 9 + n with rounding;
// n >= 16 gives 0 and 1.0 is held to 32767. `table` holds Q15_EXP2_TABLE_VALUES (shared memory in the kernel).
Q15_HD int q15_exp2(long long delta, const unsigned *table) {
    const long long n = delta >> 16;
    if (n >= 16) return 0;
    const unsigned f = (unsigned)(delta & 0xFFFF), i = f >> 10, t = f & 0x3FF;
    const unsigned t0 = table[i], t1 = i == 63 ? Q15_EXP2_HALF : table[i + 1];
    const unsigned y = t0 - (((t0 - t1) * t + 512u) >> 10);  // Q0.24; (t0 - t1)·t < 2^28
    const int shift = (int)n + 9;
    const unsigned p = (y + (1u << (shift - 1))) >> shift;
    return p < Q15_ONE_CAP ? (int)p : Q15_ONE_CAP;
}

// The byte split of a 16-bit operand, x = hi·256 + lo: hi the signed high byte (-128..127), lo the unsigned low byte
// (0..255). A product x·y is then hi·hi'·2^16 + (hi·lo' + lo·hi')·2^8 + lo·lo', four int8 products.
Q15_HD int q15_hi(int x) { return x >> 8; }
Q15_HD int q15_lo(int x) { return x & 0xFF; }

// Four bytes in one 32-bit register, b0 in the lowest byte: the k-order of an int8 MMA fragment register.
Q15_HD unsigned q15_pack4(int b0, int b1, int b2, int b3) {
    return (unsigned)(b0 & 0xFF) | (unsigned)(b1 & 0xFF) << 8 | (unsigned)(b2 & 0xFF) << 16 |
           (unsigned)(b3 & 0xFF) << 24;
}

// The exact sum of 16-bit products from its three int32 partial sums: Σhi·hi'·2^16 + Σ(hi·lo' + lo·hi')·2^8 +
// Σlo·lo' (multiplications, where a left shift of a negative partial sum would be undefined).
Q15_HD long long q15_join(int hh, int mid, int ll) { return (long long)hh * 65536 + (long long)mid * 256 + ll; }

// A rescale of l or an accumulator A by α when the running max grows: RSH(x·α, 15) (x·α < 2^60).
Q15_HD long long q15_rescale(long long x, int alpha) { return q15_round_shift(x * alpha, 15); }

// The bit length of x (0 for 0).
Q15_HD int q15_bitlen(unsigned long long x) {
#ifdef __CUDA_ARCH__
    return 64 - __clzll((long long)x);
#else
    return x ? 64 - __builtin_clzll(x) : 0;
#endif
}

// An output row's shift g (docs/q15.md §6): clamp(bitlen(l) - bitlen(peak) + 14, 0, 31), 0 where peak = max|A| is 0.
Q15_HD int q15_out_shift(unsigned long long peak, long long l) {
    if (peak == 0) return 0;
    const int g = q15_bitlen((unsigned long long)l) - q15_bitlen(peak) + 14;
    return g < 0 ? 0 : g > Q15_OUT_SHIFT_MAX ? Q15_OUT_SHIFT_MAX : g;
}

// A row's divisor: l normalised to 16 significant bits (l' = RSH(l, s), s = max(0, bitlen(l) - 16)) and A's net
// right shift t = s - g.
struct Q15Divisor {
    long long l;
    int t;
};

Q15_HD Q15Divisor q15_divisor(long long l, int g) {
    const int bits = q15_bitlen((unsigned long long)l), s = bits > 16 ? bits - 16 : 0;
    Q15Divisor divisor;
    divisor.l = q15_round_shift(l, s);
    divisor.t = s - g;
    return divisor;
}

// One output value: A' = RSH(A, t) (t > 0), A (t = 0) or A·2^-t (t < 0, exact); q = (|A'| + l'/2) / l' (unsigned
// division, round half up on magnitudes); sat_16(sign(A')·q).
Q15_HD int q15_divide(long long acc, Q15Divisor divisor) {
    const long long a = divisor.t >= 0 ? q15_round_shift(acc, divisor.t) : acc * (1LL << -divisor.t);
    const unsigned long long mag = (unsigned long long)(a < 0 ? -a : a);
    const unsigned long long q = (mag + (unsigned long long)(divisor.l >> 1)) / (unsigned long long)divisor.l;
    const long long o = a < 0 ? -(long long)q : (long long)q;
    return o > 32767 ? 32767 : o < -32768 ? -32768 : (int)o;
}
