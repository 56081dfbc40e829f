"""Development check of kernels/flash_wgmma.cu on the lent H200: build each variant for sm_90a, check it against a
float64 golden and against torch SDPA's error in the same dtype at awkward N, then time it beside torch's FLASH and
cuDNN backends and the mma.sync kernel (kernels/flash_tc.cu) at B 1, H 16, N 4096. Writes OUT/wgmma_bench.csv and
prints a short table last.

    python3 scripts/gpu_wgmma_bench.py OUT [--quick | --stages]
"""

from __future__ import annotations

import itertools
import math
import sys
import time
import traceback
from pathlib import Path

import cupy
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_tc_bench import build as build_tc, golden, launch as launch_tc, rel_l2, time_ms, write_rows  # noqa: E402
from kernels import hopper  # noqa: E402
from kernels.budget import TC_CONFIGS, flash_wgmma_smem_bytes, flash_wgmma_threads  # noqa: E402

LOG2E = 1.4426950408889634
DTYPES = {"fp16": (torch.float16, 0, "__half"), "bf16": (torch.bfloat16, 1, "__nv_bfloat16")}


def build(kind: int, d: int, bc: int, consumers: int, stages: int, schedule: int):
    expression = f"flash_wgmma_fwd<{kind},{d},{bc},{consumers},{stages},{schedule}>"
    smem = flash_wgmma_smem_bytes(d, bc, consumers, stages)
    fn = hopper.kernel(expression, smem)
    return fn, smem, 64 * consumers, flash_wgmma_threads(consumers), bc


def prepare(kernel, q, k, v, o, causal):
    """The launch as a closure, tensor maps encoded once (outside any timing)."""
    fn, smem, br, threads, bc = kernel
    bh, n, d = q.shape
    qc, kc, vc, oc = (cupy.asarray(x.view(torch.int16)) for x in (q, k, v, o))
    maps = (hopper.tensor_map(qc, br), hopper.tensor_map(kc, bc), hopper.tensor_map(vc, bc))
    args = (*maps, oc, cupy.int32(n), cupy.float32(LOG2E / math.sqrt(d)), cupy.int32(causal))
    return lambda: fn(((n + br - 1) // br, bh), (threads,), args, shared_mem=smem)


def check(kernel, dtype, d, n, causal, bh=3):
    q, k, v = (torch.randn(bh, n, d, device="cuda", dtype=dtype) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    prepare(kernel, q, k, v, o, causal)()
    torch.cuda.synchronize()
    ref = golden(q, k, v, causal)
    ours = rel_l2(o, ref)
    theirs = rel_l2(F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=bool(causal))[0], ref)
    return ours, theirs, bool(torch.isnan(o).any())


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    variants = {64: [(128, c, 2, s) for c in (2, 3) for s in (0, 1, 2)] + [(128, 2, 3, 2), (128, 3, 3, 2)],
                128: [(128, 2, 2, s) for s in (0, 1, 2)] + [(128, 2, 3, 2)]}
    if "--quick" in sys.argv:
        variants = {64: [(128, 2, 3, 2)], 128: [(128, 2, 3, 2)]}
    if "--stages" in sys.argv:  # which of three stages and the schedule buys what
        variants = {64: [(128, 2, 3, s) for s in (0, 1, 2)] + [(128, 2, 4, 2)],
                    128: [(128, 2, 3, s) for s in (0, 1, 2)]}
    heads, n_time = 16, 4096
    rows = []
    for (name, (dtype, kind, type_name)), d in itertools.product(DTYPES.items(), tuple(variants)):
        q, k, v = (torch.randn(1, heads, n_time, d, device="cuda", dtype=dtype) for _ in range(3))
        qh, kh, vh = (x[0] for x in (q, k, v))
        o = torch.empty_like(qh)
        anchors = {}
        for causal in (0, 1):
            for backend, label in ((SDPBackend.FLASH_ATTENTION, "flash"), (SDPBackend.CUDNN_ATTENTION, "cudnn")):
                with sdpa_kernel([backend]):
                    anchors[label, causal] = time_ms(
                        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)))
            warps, bc, mt = TC_CONFIGS[d, bool(causal)]
            tc = build_tc(type_name, d, warps, bc, mt)
            anchors["mma", causal] = time_ms(lambda: launch_tc(tc, qh, kh, vh, o, causal))
        for bc, consumers, stages, schedule in variants[d]:
            label = f"{name} d{d} bc{bc} c{consumers} s{stages} sched{schedule}"
            start = time.time()
            try:
                kernel = build(kind, d, bc, consumers, stages, schedule)
            except Exception:  # noqa: BLE001 - report the build error and go on
                print(f"build {label}:\n{traceback.format_exc()[-3000:]}", file=sys.stderr)
                continue
            build_s = time.time() - start
            worst, bad = 0.0, []
            for n, causal in itertools.product((1, 17, 64, 130, 1000, 4097), (0, 1)):
                ours, theirs, nan = check(kernel, dtype, d, n, causal)
                worst = max(worst, ours / theirs if theirs > 0 else 0)
                if nan or ours > 2 * theirs:
                    bad.append(f"N{n}c{causal}:{ours:.1e}/{theirs:.1e}{' NaN' if nan else ''}")
            for causal in (0, 1):
                ms = time_ms(prepare(kernel, qh, kh, vh, o, causal))
                flops = 4 * heads * n_time * n_time * d / (2 if causal else 1)
                rows.append({"dtype": name, "d": d, "bc": bc, "consumers": consumers, "stages": stages,
                             "schedule": schedule,
                             "causal": causal, "ms": ms, "tflops": flops / ms / 1e9,
                             "flash_tflops": flops / anchors["flash", causal] / 1e9,
                             "cudnn_tflops": flops / anchors["cudnn", causal] / 1e9,
                             "mma_tflops": flops / anchors["mma", causal] / 1e9,
                             "vs_flash": anchors["flash", causal] / ms, "vs_cudnn": anchors["cudnn", causal] / ms,
                             "vs_mma": anchors["mma", causal] / ms, "worst_err_ratio": worst, "bad": " ".join(bad),
                             "build_s": build_s})
    write_rows(out / "wgmma_bench.csv", rows)
    print(f"{'dtype':5} {'d':>4} {'BC':>4} {'C':>2} {'S':>2} {'sch':>3} {'c':>2} {'TF/s':>7} {'FLASH':>7} {'cuDNN':>7} "
          f"{'mma':>7} {'xFLASH':>7} {'xcuDNN':>7} {'err/torch':>9} bad")
    for r in rows:
        print(f"{r['dtype']:5} {r['d']:>4} {r['bc']:>4} {r['consumers']:>2} {r['stages']:>2} {r['schedule']:>3} "
              f"{r['causal']:>2} "
              f"{r['tflops']:7.1f} {r['flash_tflops']:7.1f} {r['cudnn_tflops']:7.1f} {r['mma_tflops']:7.1f} "
              f"{r['vs_flash']:7.2f} {r['vs_cudnn']:7.2f} {r['worst_err_ratio']:9.2f} {r['bad'][:70]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
