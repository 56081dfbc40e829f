"""Development check of kernels/flash_tc.cu on a GPU (run on the lent H200): build each variant, check it against a
float64 golden and against torch SDPA's error in the same dtype at awkward N, then time it beside torch's FLASH and
cuDNN backends at B 1, H 16, N 4096. Writes OUT/tc_bench.csv and prints a short table last.

    python3 scripts/gpu_tc_bench.py OUT [--quick] [--d128]
"""

from __future__ import annotations

import csv
import itertools
import math
import statistics
import sys
import time
from pathlib import Path

import cupy
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the project's own timer

from kernels.cuda import event_times  # noqa: E402
LOG2E = 1.4426950408889634
DTYPES = {"fp16": (torch.float16, "__half"), "bf16": (torch.bfloat16, "__nv_bfloat16")}


def build(type_name: str, d: int, warps: int, bc: int, mt: int):
    expression = f"flash_tc_fwd<{type_name},{d},{warps},{bc},{mt}>"
    module = cupy.RawModule(code=(ROOT / "kernels/flash_tc.cu").read_text(),
                            options=("-std=c++17", "-arch=sm_90", f"-I{ROOT / 'kernels'}"),
                            name_expressions=[expression])
    fn = module.get_function(expression)
    smem = (16 * mt * warps + 4 * bc) * d * 2
    fn.max_dynamic_shared_size_bytes = smem
    try:
        fn.preferred_shared_memory_carveout = 100  # as much shared memory as the SM has: blocks by registers only
    except AttributeError:
        pass
    return fn, smem, 16 * mt * warps, 32 * warps


def launch(kernel, q, k, v, o, causal):
    fn, smem, br, threads = kernel
    bh, n, d = q.shape
    args = tuple(cupy.asarray(x.view(torch.int16)) for x in (q, k, v, o))
    fn(((n + br - 1) // br, bh), (threads,), (*args, cupy.int32(n), cupy.float32(LOG2E / math.sqrt(d)),
                                                 cupy.int32(causal)), shared_mem=smem)


def golden(q, k, v, causal):
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=bool(causal))


def rel_l2(x, ref):
    return float(torch.linalg.norm((x.double() - ref).flatten()) / torch.linalg.norm(ref.flatten()))


def check(kernel, dtype, d, n, causal, bh=3):
    q, k, v = (torch.randn(bh, n, d, device="cuda", dtype=dtype) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    launch(kernel, q, k, v, o, causal)
    torch.cuda.synchronize()
    ref = golden(q, k, v, causal)
    ours = rel_l2(o, ref)
    theirs = rel_l2(F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=bool(causal))[0], ref)
    return ours, theirs, bool(torch.isnan(o).any())


def write_rows(path: Path, rows: list[dict]) -> None:
    """The sweep's rows (dicts with the same keys) as CSV; nothing when there are none."""
    if not rows:
        return
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def time_ms(fn, warmup=5, iters=30):
    """Median ms of `iters` calls: the project's CUDA-event timer, L2 overwritten before each call."""
    return statistics.median(event_times(fn, warmup, iters))


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    quick = "--quick" in sys.argv
    rows = []
    variants = {64: [(4, 64, 2), (8, 64, 2), (4, 128, 1), (4, 128, 2)],
                128: [(8, 128, 1), (4, 32, 2), (8, 32, 2), (4, 64, 2), (8, 64, 2)]}
    if "--d128" in sys.argv:
        variants = {128: variants[128]}
    if quick:
        variants = {64: [(4, 64, 1)], 128: [(4, 64, 1)]}
    heads, n_time = 16, 4096
    for (name, (dtype, type_name)), d in itertools.product(DTYPES.items(), tuple(variants)):
        anchors = {}
        q, k, v = (torch.randn(1, heads, n_time, d, device="cuda", dtype=dtype) for _ in range(3))
        for causal in (0, 1):
            for backend, label in ((SDPBackend.FLASH_ATTENTION, "flash"), (SDPBackend.CUDNN_ATTENTION, "cudnn")):
                try:
                    with sdpa_kernel([backend]):
                        anchors[label, causal] = time_ms(
                            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)))
                except RuntimeError as exc:
                    anchors[label, causal] = float("nan")
                    print(f"{name} d{d} {label}: {exc}", file=sys.stderr)
        for warps, bc, mt in variants[d]:
            if (16 * mt * warps + 4 * bc) * d * 2 > 227 * 1024:
                continue
            start = time.time()
            try:
                kernel = build(type_name, d, warps, bc, mt)
            except Exception as exc:  # noqa: BLE001 - report the build error and go on
                print(f"build {name} d{d} w{warps} bc{bc} mt{mt}: {exc}", file=sys.stderr)
                continue
            build_s = time.time() - start
            worst = 0.0
            bad = []
            for n, causal in itertools.product((1, 17, 1000, 4097), (0, 1)):
                ours, theirs, nan = check(kernel, dtype, d, n, causal)
                worst = max(worst, ours / theirs if theirs > 0 else 0)
                if nan or ours > 2 * theirs:
                    bad.append(f"N{n}c{causal}: {ours:.2e} vs torch {theirs:.2e}{' NaN' if nan else ''}")
            qh, kh, vh = (x[0] for x in (q, k, v))
            o = torch.empty_like(qh)
            for causal in (0, 1):
                ms = time_ms(lambda: launch(kernel, qh, kh, vh, o, causal))
                flops = 4 * heads * n_time * n_time * d / (2 if causal else 1)
                row = {"dtype": name, "d": d, "warps": warps, "bc": bc, "mt": mt, "causal": causal, "ms": ms,
                       "tflops": flops / ms / 1e9, "flash_tflops": flops / anchors["flash", causal] / 1e9,
                       "cudnn_tflops": flops / anchors["cudnn", causal] / 1e9,
                       "vs_flash": anchors["flash", causal] / ms, "vs_cudnn": anchors["cudnn", causal] / ms,
                       "worst_err_ratio": worst, "bad": "; ".join(bad), "build_s": build_s}
                rows.append(row)
    write_rows(out / "tc_bench.csv", rows)
    print(f"{'dtype':5} {'d':>4} {'W':>2} {'BC':>4} {'MT':>2} {'c':>2} {'ms':>8} {'TF/s':>7} {'FLASH':>7} {'cuDNN':>7} "
          f"{'xFLASH':>7} {'xcuDNN':>7} {'err/torch':>9} bad")
    for r in rows:
        print(f"{r['dtype']:5} {r['d']:>4} {r['warps']:>2} {r['bc']:>4} {r['mt']:>2} {r['causal']:>2} {r['ms']:8.3f} "
              f"{r['tflops']:7.1f} {r['flash_tflops']:7.1f} {r['cudnn_tflops']:7.1f} {r['vs_flash']:7.2f} "
              f"{r['vs_cudnn']:7.2f} {r['worst_err_ratio']:9.2f} {r['bad'][:80]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
