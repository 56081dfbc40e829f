// The second launch of a split-KV flash call (kernels/kv_rows.cuh): the `parts` blocks of the first shared the
// (tile, key block) units among them; a tile whose keys one block held whole has its O written already, and each
// other tile's segments left their rows' partial state, O_s normalised by its own sum and lse_s = log2 of that sum in
// base-2 score units (plus the max), in the slots kv_rows.cuh's segment_slot names. This launch merges each row of a
// split tile (kernels/split_merge.cuh, merge_row): one warp per row, four rows a 128-thread block. The split kernels
// that merge in place (kernels/flash_tc.cu's MERGE instances) have no second launch.
#include "merge_kind.cuh"

template <typename T, int D, int BR, int BC>
__global__ void __launch_bounds__(128)
split_combine(const float *__restrict__ o_part, const float *__restrict__ lse, T *__restrict__ o, int rows, int nq,
              int n, int heads, int parts) {
    const int row = blockIdx.x * 4 + (threadIdx.x >> 5);
    if (row >= rows) return;
    merge_row<MergeKind<T>::value, D, BR, BC>(o_part, lse, o, row, nq, n, heads, parts, threadIdx.x & 31);
}
