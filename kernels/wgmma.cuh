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
// One macro per shape and operand source (an instruction's accumulator list is part of its text), instantiated
// for both types; the accumulator lists are written once (WGMMA_D*, WGMMA_ACC*).

#pragma once

typedef unsigned long long u64;

template <int N, int KIND>
__device__ __forceinline__ void wgmma_ss(float *d, u64 a, u64 b, int accumulate);

template <int N, int KIND>
__device__ __forceinline__ void wgmma_rs(float *d, const unsigned *a, u64 b, int accumulate);

// An instruction's accumulator operands: N/2 fp32 registers per thread, as the asm outputs and as their names.
#define WGMMA_D32 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define WGMMA_D64 WGMMA_D32, \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define WGMMA_ACC32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WGMMA_ACC64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

#define WGMMA_SS_64(KIND, TYPE) \
    template <> \
    __device__ __forceinline__ void wgmma_ss<64, KIND>(float *d, u64 a, u64 b, int accumulate) { \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " " WGMMA_ACC32 ", %32, %33, p, 1, 1, 0, 0;\n}\n" \
                     : WGMMA_D32 \
                     : "l"(a), "l"(b), "r"(accumulate)); \
    }

#define WGMMA_RS_64(KIND, TYPE) \
    template <> \
    __device__ __forceinline__ void wgmma_rs<64, KIND>(float *d, const unsigned *a, u64 b, int accumulate) { \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" \
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " " WGMMA_ACC32 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n" \
                     : WGMMA_D32 \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate)); \
    }

#define WGMMA_SS_128(KIND, TYPE) \
    template <> \
    __device__ __forceinline__ void wgmma_ss<128, KIND>(float *d, u64 a, u64 b, int accumulate) { \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " WGMMA_ACC64 ", %64, %65, p, 1, 1, 0, 0;\n}\n" \
                     : WGMMA_D64 \
                     : "l"(a), "l"(b), "r"(accumulate)); \
    }

#define WGMMA_RS_128(KIND, TYPE) \
    template <> \
    __device__ __forceinline__ void wgmma_rs<128, KIND>(float *d, const unsigned *a, u64 b, int accumulate) { \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n" \
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " WGMMA_ACC64 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n" \
                     : WGMMA_D64 \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate)); \
    }

WGMMA_SS_64(0, "f16")
WGMMA_RS_64(0, "f16")
WGMMA_SS_128(0, "f16")
WGMMA_RS_128(0, "f16")
WGMMA_SS_64(1, "bf16")
WGMMA_RS_64(1, "bf16")
WGMMA_SS_128(1, "bf16")
WGMMA_RS_128(1, "bf16")
