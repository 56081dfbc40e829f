"""Timing helpers of the decode benchmark and its sweeps (kernels/inference_bench.py, kernels/decode_sweeps.py): seeded
fp16 inputs drawn on the device, torch SDPA calls on the same buffers, CUDA-graph capture of either side, medians
under the device's event timer, and the agreement check that guards every forced launch."""

from __future__ import annotations

import numpy as np

from host.errors import TargetError
from host.problem import AttentionProblem

#: Llama 3 8B's attention (host/workloads.toml): the decode shape the benchmark and its sweeps time.
HEADS, KV_HEADS, DIM = 32, 8, 128
#: Ours against torch at a timed point: both fp16 with fp32 sums, so rel-L2 far under this; above it, a bug.
AGREE = 1e-2


def device_tensors(problem: AttentionProblem, seed: int):
    """Seeded standard-normal fp16 Q (B·H, q_len, d) and K, V (B·Hkv, N, d) drawn on the device, as uint16 bit
    patterns (the launcher's 16-bit storage), a batch element at a time (no float32 copy of the whole cache)."""
    import cupy

    from kernels.cuda import DeviceInputs

    rng = cupy.random.default_rng(seed)
    b, h, hkv, m, n, d = problem.batch, problem.heads, problem.kv_head_count, problem.queries, problem.seq, problem.dim

    def draw(rows: int, length: int):
        x = cupy.empty((b * rows, length, d), dtype=cupy.uint16)
        for i in range(b):
            x[i * rows:(i + 1) * rows] = rng.standard_normal((rows, length, d), dtype=cupy.float32) \
                .astype(cupy.float16).view(cupy.uint16)
        return x

    return DeviceInputs(draw(h, m), draw(hkv, n), draw(hkv, n))


def torch_view(problem: AttentionProblem, tensors):
    """The device buffers as torch fp16 tensors (B, H, q_len, d) and (B, Hkv, N, d), sharing their memory."""
    import torch

    q, k, v = (torch.from_dlpack(x).view(torch.float16) for x in tensors)
    return (q.view(problem.batch, problem.heads, problem.queries, problem.dim),
            k.view(problem.batch, problem.kv_head_count, problem.seq, problem.dim),
            v.view(problem.batch, problem.kv_head_count, problem.seq, problem.dim))


def torch_call(backend: str, q, k, v):
    """A call of torch SDPA with one backend, grouped heads, no mask; None where the backend refuses the shape."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def call():
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    try:
        call()
    except RuntimeError:
        return None
    return call


def graphed(side: str, call):
    """`call` captured once in a CUDA graph (ours through CuPy, torch's through torch.cuda.graph): a call that replays
    it on the default stream, where the timer's events are recorded; None where the capture fails (the reason is
    printed). Decode servers replay graphs: the replay leaves the host's launch cost out of the time."""
    import cupy

    try:
        if side in ("ours", "read"):
            stream = cupy.cuda.Stream(non_blocking=True)
            with stream:
                stream.begin_capture()
                try:
                    call()
                finally:  # a call that raised leaves no stream capturing behind it
                    graph = stream.end_capture()
            return lambda: graph.launch(cupy.cuda.Stream.null)
        import torch

        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call()
        return graph.replay
    except Exception as exc:  # noqa: BLE001 - a backend that cannot be captured is reported, not fatal
        print(f"  {side}: no CUDA graph ({type(exc).__name__}: {str(exc)[:120]})", flush=True)
        return None


def rel_l2(ours, theirs) -> float:
    import cupy

    a = cupy.asarray(ours).astype(cupy.float32).ravel()
    b = cupy.asarray(theirs).astype(cupy.float32).ravel()
    return float(cupy.linalg.norm(a - b) / cupy.linalg.norm(b))


def median_us(dev, call, iters: int, clean_flush: bool = False) -> float:
    """Median µs of `iters` timed calls after three warm-ups (the device's CUDA-event timer, L2 flushed: by writing,
    or by reading with clean_flush; kernels/cuda.py event_times)."""
    return 1e3 * float(np.median(dev.event_times(call, warmup=3, iters=iters, clean_flush=clean_flush)))


def agreeing_us(dev, launch, reference, what: str, iters: int) -> float:
    """`launch` run once and its output held to `reference`'s (both 16-bit launchers' O) within AGREE, then timed:
    median µs; TargetError (wrong) naming `what` where they differ."""
    launch.launch()
    differs = rel_l2(launch.out.view(np.float16), reference.out.view(np.float16))
    if not differs <= AGREE:
        raise TargetError(f"{what} differs by rel-L2 {differs} (allowed: {AGREE})", status="wrong")
    return median_us(dev, launch.launch, iters)




def replay_us(dev, side: str, call, iters: int) -> float | None:
    """Median µs of `call` replayed from a CUDA graph (graphed; freed on return), the L2 flushed by reading; None
    where it cannot be captured."""
    replay = graphed(side, call)
    return median_us(dev, replay, iters, clean_flush=True) if replay else None
