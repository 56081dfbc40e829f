"""Development check of kernels/flash_tf32.cu (fp32 flash on the tensor cores by 3xTF32) on a GPU (run on the lent
H200): build each launch variant, check it against a float64 golden and against torch SDPA EFFICIENT's fp32 error at
awkward N, then time it beside torch EFFICIENT and the FFMA flash kernel (kernels/flash.cu at its default tile) at
B 1, H 16, N 4096, causal and not. Writes OUT/tf32_bench.csv and prints a short table last.

    python3 scripts/gpu_tf32_bench.py OUT [--quick]
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from pathlib import Path

import cupy
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_tc_bench import LOG2E, golden, rel_l2, time_ms, write_rows  # noqa: E402
from host.problem import AttentionProblem  # noqa: E402
from kernels import target  # noqa: E402
from kernels.budget import flash_smem_bytes, flash_tf32_smem_bytes  # noqa: E402

#: (warps, Bc, m-tiles, Q in registers) per d, as kernels/budget.py TF32_CONFIGS. (Runs before P·V was always staged
#: also swept it unstaged: 40x torch's error, reports/gpu-tf32/steps.)
VARIANTS = {64: [(4, 32, 2, False), (4, 32, 1, True), (4, 64, 1, True), (8, 64, 1, True)],
            128: [(8, 64, 1, False), (8, 32, 1, False), (4, 32, 1, False)]}


def build(source: str, expression: str, smem: int):
    module = cupy.RawModule(code=(ROOT / "kernels" / source).read_text(),
                            options=("-std=c++17", "-arch=sm_90", f"-I{ROOT / 'kernels'}"),
                            name_expressions=[expression])
    fn = module.get_function(expression)
    fn.max_dynamic_shared_size_bytes = smem
    return fn


def tf32_kernel(d: int, warps: int, bc: int, mt: int, qregs: bool):
    br = 16 * mt * warps
    smem = flash_tf32_smem_bytes(br, bc, d)
    expression = f"flash_tf32_fwd<{d},{warps},{bc},{mt},{str(qregs).lower()}>"
    return build("flash_tf32.cu", expression, smem), smem, br, 32 * warps


def simt_kernel(d: int, n: int):
    br, bc = target.default_tile(AttentionProblem(heads=16, seq=n, dim=d))
    smem = flash_smem_bytes(br, bc, d)
    return build("flash.cu", f"flash_fwd<{br},{bc},{d}>", smem), smem, br, 128


def launch(kernel, q, k, v, o, causal):
    fn, smem, br, threads = kernel
    bh, n, d = q.shape
    fn(((n + br - 1) // br, bh), (threads,), (*(cupy.asarray(x) for x in (q, k, v, o)), cupy.int32(n),
                                              cupy.float32(LOG2E / math.sqrt(d)), cupy.int32(causal)),
       shared_mem=smem)


def check(kernel, d, n, causal, bh=3):
    q, k, v = (torch.randn(bh, n, d, device="cuda", dtype=torch.float32) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    launch(kernel, q, k, v, o, causal)
    torch.cuda.synchronize()
    ref = golden(q, k, v, causal)
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        theirs = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=bool(causal))[0]
    return rel_l2(o, ref), rel_l2(theirs, ref), bool(torch.isnan(o).any())


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    variants = {d: v[:1] for d, v in VARIANTS.items()} if "--quick" in sys.argv else VARIANTS
    heads, n_time = 16, 4096
    rows = []
    for d in variants:
        q, k, v = (torch.randn(1, heads, n_time, d, device="cuda", dtype=torch.float32) for _ in range(3))
        qh, kh, vh = (x[0] for x in (q, k, v))
        o = torch.empty_like(qh)
        anchors = {}
        simt = simt_kernel(d, n_time)
        for causal in (0, 1):
            with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
                anchors["efficient", causal] = time_ms(
                    lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)))
            anchors["simt", causal] = time_ms(lambda: launch(simt, qh, kh, vh, o, causal))
        for warps, bc, mt, qregs in variants[d]:
            if flash_tf32_smem_bytes(16 * mt * warps, bc, d) > 227 * 1024:
                continue
            start = time.time()
            try:
                kernel = tf32_kernel(d, warps, bc, mt, qregs)
            except Exception as exc:  # noqa: BLE001 - report the build error and go on
                print(f"build d{d} w{warps} bc{bc} mt{mt} q{int(qregs)}: {exc}", file=sys.stderr)
                continue
            build_s = time.time() - start
            worst, bad = 0.0, []
            for n, causal in itertools.product((1, 17, 1000, 4097), (0, 1)):
                ours, theirs, nan = check(kernel, d, n, causal)
                worst = max(worst, ours / theirs if theirs > 0 else 0)
                if nan or ours > 2 * theirs:
                    bad.append(f"N{n}c{causal}: {ours:.2e} vs torch {theirs:.2e}{' NaN' if nan else ''}")
            for causal in (0, 1):
                ms = time_ms(lambda: launch(kernel, qh, kh, vh, o, causal))
                flops = 4 * heads * n_time * n_time * d / (2 if causal else 1)
                rows.append({"d": d, "warps": warps, "bc": bc, "mt": mt, "qregs": int(qregs), "causal": causal, "ms": ms,
                             "tflops": flops / ms / 1e9, "efficient_tflops": flops / anchors["efficient", causal] / 1e9,
                             "simt_tflops": flops / anchors["simt", causal] / 1e9,
                             "vs_efficient": anchors["efficient", causal] / ms, "vs_simt": anchors["simt", causal] / ms,
                             "worst_err_ratio": worst, "bad": "; ".join(bad), "build_s": build_s})
    write_rows(out / "tf32_bench.csv", rows)
    print(f"{'d':>4} {'W':>2} {'BC':>4} {'MT':>2} {'Q':>1} {'c':>2} {'ms':>8} {'TF/s':>7} {'EFFIC':>7} {'FFMA':>7} "
          f"{'xEFFIC':>7} {'xFFMA':>7} {'err/torch':>9} bad")
    for r in rows:
        print(f"{r['d']:>4} {r['warps']:>2} {r['bc']:>4} {r['mt']:>2} {r['qregs']:>1} {r['causal']:>2} {r['ms']:8.3f} "
              f"{r['tflops']:7.1f} {r['efficient_tflops']:7.1f} {r['simt_tflops']:7.1f} {r['vs_efficient']:7.2f} "
              f"{r['vs_simt']:7.2f} {r['worst_err_ratio']:9.2f} {r['bad'][:80]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
