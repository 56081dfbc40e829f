#!/usr/bin/env bash
# On a GPU machine (the lent H200): the gpu tests, the acceptance sweep of host.compare, a short tile sweep and the
# headline ratios. Uses the machine's python3 (CuPy, torch, numpy, scipy, pandas, matplotlib, tqdm, pytest are
# there); results go under ${OUT:-reports/latest/gpu}, each step's console output in gpu_log.txt.
set -uo pipefail
if [ -n "${OUT:-}" ]; then OUT=$(realpath -m -- "$OUT"); fi  # a relative OUT is the caller's, not the checkout's
cd "$(dirname "$0")/.."
out=${OUT:-reports/latest/gpu}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv | tee "$out/gpu_log.txt"
timeout 400 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_gpu.py tests/kernels/test_budget.py 2>&1 | tail -15 \
    | tee "$out/pytest.txt" | tee -a "$out/gpu_log.txt"
timeout 300 python3 -m host.compare --targets gpu,cpu --seq 512,1024,2048,4096 --heads 16 --dim 64 \
    --out "$out/compare" 2>&1 | tail -30 | tee -a "$out/gpu_log.txt"
timeout 300 python3 -m kernels.sweep --br 32,64,128 --bc 32,64 --seq 1024,4096 --out "$out/sweep" 2>&1 | tail -12 \
    | tee -a "$out/gpu_log.txt"
timeout 300 python3 -m kernels.headline 2>&1 | tee "$out/headline.txt" | tee -a "$out/gpu_log.txt"
