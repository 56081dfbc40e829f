// Asynchronous copies from device to shared memory (cp.async, sm_80+) for the flash kernels that stage K and V
// tiles themselves (kernels/flash_tc.cu, kernels/flash_tf32.cu): 16 bytes per copy, grouped and waited for by group.
#pragma once

__device__ __forceinline__ unsigned smem_address(const void *p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes from device to shared memory, asynchronously; `valid` false writes 16 zero bytes (a row past N).
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }

template <int PENDING>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING)); }
