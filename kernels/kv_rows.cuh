// Which keys a query row sees, and which keys a block reads, for every flash kernel (kernels/flash*.cu):
//
// Rows. A launch's "head" holds NQ query rows: a query head's q_len queries, or, packed (the split-KV decode path,
// kernels/target.py), the G query heads of one K/V head one after another (G·q_len rows: Q's memory order, so the
// packing is only a view). Row r is query r mod QLEN of its head, at position r mod QLEN + N − QLEN of the N keys:
// the causal mask aligned to the bottom right, as a KV cache is (FlashAttention ≥ 2.1; with QLEN = N, key j for
// query i when j <= i). K and V of launch head h are K/V head h / GROUP (GROUP = heads / kv_heads unpacked, 1
// packed).
//
// Keys. With SPLITS > 1 the keys are cut into SPLITS ranges of whole BC-key blocks, one per blockIdx.y; each block
// writes its rows' partial state (O normalised by its own sum, and the sum's log2 plus the max: kernels/
// split_combine.cu merges them).
#pragma once

struct KvRows {
    int nq;     // query rows of a launch head
    int qlen;   // queries per query head: row r is query r % qlen
    int n;      // keys (the KV cache's length)
    int group;  // launch heads per K/V head
};

// The last key row `row` sees (causal), or n − 1.
__device__ __forceinline__ int last_key(const KvRows &rows, int row, int causal) {
    return causal ? row % rows.qlen + rows.n - rows.qlen : rows.n - 1;
}

// The least and the greatest last key over rows first .. first + count − 1 (count >= 1): the block-level bounds of
// the causal mask (a key block past the greatest is skipped; one at or before the least needs no mask).
__device__ __forceinline__ int2 last_key_bounds(const KvRows &rows, int first, int count, int causal) {
    if (!causal) return make_int2(rows.n - 1, rows.n - 1);
    const int offset = rows.n - rows.qlen, i = first % rows.qlen;
    if (i + count - 1 < rows.qlen) return make_int2(i + offset, i + count - 1 + offset);  // no wrap to query 0
    return make_int2(offset, rows.n - 1);
}

// This block's keys: [x, y) of whole BC-key blocks, split blockIdx.y of `splits` (all keys when splits is 1).
template <int BC>
__device__ __forceinline__ int2 split_keys(int n, int splits) {
    const int blocks = (n + BC - 1) / BC, per = (blocks + splits - 1) / splits;
    const int begin = min(n, (int)blockIdx.y * per * BC);
    return make_int2(begin, min(n, begin + per * BC));
}

// A split's partial state for one row: O / l as float32 into o_part[split][row][:], and log2 of the sum in base-2
// score units (m·scale_log2 + log2 l) into lse[split][row]; −inf and zeros for a row that saw no key of this split.
__device__ __forceinline__ float split_lse(float m, float l, float scale_log2) {
    return l > 0.0f ? m * scale_log2 + __log2f(l) : -__int_as_float(0x7f800000);
}
