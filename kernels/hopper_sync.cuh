// The Hopper (sm_90a) building blocks kernels/flash_wgmma.cu (prefill) and kernels/decode_wgmma.cu (split-KV decode)
// share: mbarriers, the bulk tensor copy (TMA) into shared memory, named barriers, wgmma's fence / commit / wait and
// operand fences, the 128-byte-swizzle shared-memory descriptor, and fp32 pairs packed to fp16 or bf16.
#pragma once

#include "wgmma.cuh"

__device__ __forceinline__ unsigned smem_u32(const void *p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// --- mbarriers and the copy engine ---

__device__ __forceinline__ void mbar_init(u64 *bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(u64 *bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(u64 *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}

// Wait until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(u64 *bar, unsigned parity) {
    unsigned done = 0;
    while (!done) {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(smem_u32(bar)), "r"(parity)
                     : "memory");
    }
}

// One box of the 3-D tensor (x: column, y: row, z: batch·head) into shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load(void *dst, const void *map, int x, int y, int z, u64 *bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
                 "%4}], [%5];\n" ::"r"(smem_u32(dst)),
                 "l"(reinterpret_cast<u64>(map)), "r"(x), "r"(y), "r"(z), "r"(smem_u32(bar))
                 : "memory");
}

// Named barrier `id` among `count` threads: wait for them, or only count this warp in.
__device__ __forceinline__ void named_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// --- wgmma bookkeeping ---

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
}

// Registers an asynchronous MMA reads or writes must not be touched by code the compiler moves across its wait:
// this empty statement makes each of them an input and output at this point.
template <int COUNT>
__device__ __forceinline__ void fence_operands(float *r) {
#pragma unroll
    for (int i = 0; i < COUNT; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int COUNT>
__device__ __forceinline__ void fence_operands(unsigned *r) {
#pragma unroll
    for (int i = 0; i < COUNT; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// Shared-memory matrix descriptor in the 128-byte swizzle: start address, leading and stride byte offsets.
__device__ __forceinline__ u64 descriptor(unsigned address, unsigned leading, unsigned stride) {
    return (u64)((address & 0x3FFFF) >> 4) | ((u64)(leading >> 4) << 16) | ((u64)(stride >> 4) << 32) |
           ((u64)1 << 62);
}

// Two floats rounded to fp16 (KIND 0) or bf16 (KIND 1), packed low half first.
template <int KIND>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned r;
    if (KIND == 0)
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// After a key block's online softmax: the O accumulator rows (the wgmma accumulator layout, OTILES column groups of 8)
// scaled by alpha (rows g and g+8), and the probabilities in sc (BC / 8 column groups) packed to 16 bits as wgmma's
// A operand, one k16 step of keys per entry of p.
template <int OTILES, int BC, int KIND>
__device__ __forceinline__ void rescale_and_pack(float *acc, unsigned (*p)[4], const float *sc, const float *alpha) {
#pragma unroll
    for (int i = 0; i < OTILES; ++i) {
        acc[4 * i] *= alpha[0];
        acc[4 * i + 1] *= alpha[0];
        acc[4 * i + 2] *= alpha[1];
        acc[4 * i + 3] *= alpha[1];
    }
#pragma unroll
    for (int ks = 0; ks < BC / 16; ++ks) {
        p[ks][0] = pack2<KIND>(sc[8 * ks], sc[8 * ks + 1]);
        p[ks][1] = pack2<KIND>(sc[8 * ks + 2], sc[8 * ks + 3]);
        p[ks][2] = pack2<KIND>(sc[8 * ks + 4], sc[8 * ks + 5]);
        p[ks][3] = pack2<KIND>(sc[8 * ks + 6], sc[8 * ks + 7]);
    }
}
