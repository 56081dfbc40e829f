// The merge's output kind (kernels/split_merge.cuh) of each CUDA output type, for the kernels CuPy builds with CUDA's
// headers (kernels/flash_tc.cu, kernels/split_combine.cu); the Hopper sources name their kind directly.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "split_merge.cuh"

template <typename T>
struct MergeKind;
template <>
struct MergeKind<__half> {
    static constexpr int value = MERGE_FP16;
};
template <>
struct MergeKind<__nv_bfloat16> {
    static constexpr int value = MERGE_BF16;
};
template <>
struct MergeKind<float> {
    static constexpr int value = MERGE_FP32;
};
