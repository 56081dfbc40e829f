// The read floor of a decode launch (kernels/inference_bench.py): every 16-byte word of two device buffers (the K and
// V caches) read once, coalesced, four independent loads in flight per thread, folded into one word that is written
// only if it equals a value the caller never passes (so the loads cannot be optimised away and nothing is written).
// Its time is what one launch that only streams the KV cache's bytes takes on this device: the practical floor of a
// decode kernel at that size, launch and ramp included, beside the bandwidth floor (bytes / measured copy rate).
// Plain loads, not streaming ones (__ldcs): kernels/cuda.py event_times(clean_flush=True) flushes the L2 with this
// kernel, and ld.global.cs allocates its lines evict-first, so a streaming read twice the L2's size displaces little
// of what the L2 held (the timed call's K and V from its last run) instead of all of it.
extern "C" __global__ void __launch_bounds__(256)
stream_read(const uint4 *__restrict__ a, const uint4 *__restrict__ b, long long words, unsigned never,
            unsigned *__restrict__ sink) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    unsigned fold = 0;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < words; i += 4 * stride) {
        uint4 x[8];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            x[2 * u] = a[i + u * stride];
            x[2 * u + 1] = b[i + u * stride];
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) fold ^= x[u].x ^ x[u].y ^ x[u].z ^ x[u].w;
    }
    for (; i < words; i += stride) {
        const uint4 x = a[i], y = b[i];
        fold ^= x.x ^ x.y ^ x.z ^ x.w ^ y.x ^ y.y ^ y.z ^ y.w;
    }
    if (fold == never) sink[0] = fold;
}
