"""Nsight Compute beside torch's kernels (issues 32 and 34): what cuDNN's and FlashAttention-2's kernels do at the
shapes where ours trails them, read off the same counters as ours (grid, block, registers, shared memory, duration,
tensor-pipe and issue activity, DRAM throughput, the warp stall reasons).

    python3 scripts/ncu_vs_torch.py drive CASE      # ours and torch's backends at CASE, once each (ncu's target)
    python3 scripts/ncu_vs_torch.py profile OUTDIR [CASE ...]   # ncu over each CASE: OUTDIR/CASE.txt

CASE is one of CASES below. `profile` runs `ncu --clock-control none --set full` (the clocks as found) over every
kernel the driver launches (the inputs' random draws too: their names tell them apart) and writes the details page
(OUTDIR/CASE.txt, written whole when the case ends: an earlier file stays until then, and Ctrl-C keeps it); a case
ncu cannot run is reported and the next one goes on, except a machine without a GPU, said once.
Exit status: 0 every case profiled; 1 some case failed, or no GPU or ncu; 2 usage; 130 interrupted.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: name -> (batch, heads, kv_heads, kv_len, q_len, dim): Llama 3 8B decode points where ours trailed cuDNN in
#: reports/issue-32/gpu/run9_merge_h100 (batch 1), and the non-causal prefill of issue 34 (d 128, N 4096, 16 heads).
CASES = {
    "decode_b1_4k": (1, 32, 8, 4096, 1, 128),
    "decode_b1_16k": (1, 32, 8, 16384, 1, 128),
    "prefill_d128_4k": (1, 16, 16, 4096, 4096, 128),
    "prefill_d64_1k": (4, 16, 16, 1024, 1024, 64),
}
BACKENDS = ("CUDNN_ATTENTION", "FLASH_ATTENTION")


def drive(case: str) -> int:
    """Ours (the target's plan) and each torch backend at `case`, one call each, synchronised (ncu replays each
    kernel with the caches flushed, so a warm-up call would only double the profile)."""
    from host.problem import AttentionProblem
    from kernels import target

    ok, why = target.available()
    if not ok:
        print(f"kbench: ncu_vs_torch drive needs a GPU: {why}", file=sys.stderr)
        return 1
    import cupy

    from kernels.decode_timing import device_tensors, torch_call, torch_view

    b, h, hkv, n, m, d = CASES[case]
    problem = AttentionProblem(batch=b, heads=h, kv_heads=hkv, seq=n, q_len=m, dim=d, dtype="float16")
    settings = target.Settings(dtypes=("float16",))
    dev = target.backend(settings)
    tensors = device_tensors(problem, seed=7)
    plan = target.launch_plan(problem, settings, dev)
    launch = target.launcher("flash", problem, tensors, plan.br, plan.bc, dev, plan.path, plan.parts)
    print(f"{case}: ours {plan.path}, Br {plan.br}, Bc {plan.bc}, parts {plan.parts}, "
          f"{len(launch.calls)} launch(es) a call", file=sys.stderr)
    launch.launch()
    cupy.cuda.Device().synchronize()
    q, k, v = torch_view(problem, tensors)
    for backend in BACKENDS:
        call = torch_call(backend, q, k, v)
        if call is None:
            print(f"{case}: torch {backend} refuses the shape", file=sys.stderr)
            continue
        call()
    cupy.cuda.Device().synchronize()
    return 0


def profile(out: Path, cases: list[str]) -> int:
    ncu = shutil.which("ncu") or next((str(p) for p in sorted(Path("/opt/nvidia").glob("nsight-compute/*/ncu"))),
                                      None)
    if ncu is None:
        print("kbench: error: Nsight Compute's ncu not found (PATH, /opt/nvidia/nsight-compute/*)", file=sys.stderr)
        return 1
    if out.exists() and not out.is_dir():
        print(f"kbench: error: OUTDIR {out} is not a folder; allowed: a folder (new or existing)", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for case in cases:
        command = [ncu, "--clock-control", "none", "--set", "full", "--import-source", "no", "--page", "details",
                   sys.executable, __file__, "drive", case]
        partial = out / f".{case}.txt.partial"
        try:
            with open(partial, "w", encoding="utf-8") as log:
                try:
                    status = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=240).returncode
                except subprocess.TimeoutExpired:
                    status = "timed out after 240 s"
        except KeyboardInterrupt:
            partial.unlink(missing_ok=True)
            print(f"kbench: interrupted in {case}; the cases before it are in {out}", file=sys.stderr)
            return 130
        text = partial.read_text(encoding="utf-8", errors="replace")
        partial.replace(out / f"{case}.txt")
        no_gpu = next((line for line in text.splitlines() if "drive needs a GPU" in line), None)
        if no_gpu:  # every case would say the same: once, and stop
            print(f"{no_gpu}; no case profiled", file=sys.stderr)
            return 1
        print(f"{case}: ncu exit {status}", flush=True)
        failed += status != 0
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if len(argv) == 2 and argv[0] == "drive" and argv[1] in CASES:
        return drive(argv[1])
    if len(argv) >= 2 and argv[0] == "profile" and all(c in CASES for c in argv[2:]):
        return profile(Path(argv[1]), argv[2:] or list(CASES))
    print(f"kbench: error: usage: ncu_vs_torch.py drive CASE | profile OUTDIR [CASE ...]; CASE from "
          f"{', '.join(CASES)}; got {' '.join(argv) or 'nothing'}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
