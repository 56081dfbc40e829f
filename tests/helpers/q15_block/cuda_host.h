// The CUDA that kernels/q15.cu uses, emulated on the host (tests/helpers/q15_block.py): a block runs as 32·WARPS
// fibers (ucontext), one at a time; __syncthreads is a barrier of the block's threads, a warp's shuffle and each
// mma.sync a barrier of its 32 lanes. The MMA computes D = A·B + C from the lanes' registers by the PTX ISA's
// fragment layouts for m16n8k32 .s8/.u8 (independently of the kernel's addressing) and fails on an int32 overflow.
// A pass of the scheduler in which no thread moves is a deadlock (a divergent barrier); it aborts.
#pragma once
#include <ucontext.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __constant__
#define __align__(n) alignas(n)

struct EmuDim3 {
    unsigned x, y, z;
};
static EmuDim3 threadIdx, blockIdx;
using std::max;
using std::min;

struct EmuFiber {
    ucontext_t ctx;
    bool done = false, counted = false;
    std::vector<char> stack;
};
struct EmuBarrier {
    int count = 0, size = 0;
    unsigned gen = 0;
};
static std::vector<EmuFiber> emu_fibers;
static std::vector<EmuBarrier> emu_barriers;  // 0: the block's, 1 + w: warp w's
static ucontext_t emu_scheduler;
static int emu_current = -1;
static long emu_events = 0;  // barrier arrivals and finished threads: progress
static unsigned char *emu_smem;
static uint64_t emu_exchange[32][32][8];  // (warp, lane, register)

static void emu_wait(int b) {
    const unsigned gen = emu_barriers[b].gen;
    emu_events++;
    if (++emu_barriers[b].count == emu_barriers[b].size) {
        emu_barriers[b].count = 0;
        emu_barriers[b].gen++;
        return;
    }
    while (emu_barriers[b].gen == gen) swapcontext(&emu_fibers[emu_current].ctx, &emu_scheduler);
}
static void __syncthreads() { emu_wait(0); }

template <class T>
static T __shfl_xor_sync(unsigned mask, T x, int lane_mask) {
    if (mask != 0xffffffffu) abort();
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    uint64_t bits = 0, other = 0;
    memcpy(&bits, &x, sizeof(T));
    emu_wait(1 + w);
    emu_exchange[w][lane][0] = bits;
    emu_wait(1 + w);
    other = emu_exchange[w][lane ^ lane_mask][0];
    emu_wait(1 + w);
    T y;
    memcpy(&y, &other, sizeof(T));
    return y;
}

static void emu_mma(int *c, const unsigned *a, const unsigned *b, bool a_signed, bool b_signed) {
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    emu_wait(1 + w);
    for (int i = 0; i < 4; ++i) emu_exchange[w][lane][i] = a[i];
    for (int i = 0; i < 2; ++i) emu_exchange[w][lane][4 + i] = b[i];
    emu_wait(1 + w);
    long long A[16][32], B[32][8];
    for (int l = 0; l < 32; ++l) {
        const int g = l >> 2, t = l & 3;
        for (int r = 0; r < 4; ++r)  // a_i: register i/4, row g (+8 for registers 1, 3), column 4t + i%4 (+16: 2, 3)
            for (int i = 0; i < 4; ++i) {
                int x = (int)((emu_exchange[w][l][r] >> (8 * i)) & 0xFF);
                A[g + 8 * (r & 1)][4 * t + i + 16 * (r >> 1)] = a_signed && x > 127 ? x - 256 : x;
            }
        for (int r = 0; r < 2; ++r)  // b_i: row 4t + i%4 (+16 for register 1), column g
            for (int i = 0; i < 4; ++i) {
                int x = (int)((emu_exchange[w][l][4 + r] >> (8 * i)) & 0xFF);
                B[4 * t + i + 16 * r][g] = b_signed && x > 127 ? x - 256 : x;
            }
    }
    const int g = lane >> 2, t = lane & 3;
    for (int e = 0; e < 4; ++e) {  // c_i: row g (+8 for i >= 2), column 2t + i%2
        long long s = c[e];
        for (int k = 0; k < 32; ++k) s += A[g + 8 * (e >> 1)][k] * B[k][2 * t + (e & 1)];
        if (s > 2147483647LL || s < -2147483648LL) {
            fprintf(stderr, "an int32 MMA accumulator overflowed\n");
            abort();
        }
        c[e] = (int)s;
    }
    emu_wait(1 + w);
}
#define Q15_EMU_MMA(NAME, A_SIGNED, B_SIGNED) \
    static void NAME(int *c, const unsigned *a, const unsigned *b) { emu_mma(c, a, b, A_SIGNED, B_SIGNED); }
