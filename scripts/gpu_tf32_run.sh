#!/usr/bin/env bash
# On the lent H200: the GPU tests (the 3xTF32 fp32 kernel, the tensor-core kernels, the fp32 kernels, the energy
# meter), the launch-variant sweep of kernels/flash_tf32.cu (kernels.headline --variants tf32), fp32 flash rows through host.compare (with NVML energy)
# and the headline (every ratio of docs/performance.md from one run). Output under ${OUT:-reports/latest/gpu-tf32}.
# NVML's Python bindings (nvidia-ml-py) are not on the lent machine's image: carry the wheel (.whl, see the device
# notes) and put it on PYTHONPATH first.
set -uo pipefail
if [ -n "${OUT:-}" ]; then OUT=$(realpath -m -- "$OUT"); fi  # a relative OUT is the caller's, not the checkout's
cd "$(dirname "$0")/.."
out=${OUT:-reports/latest/gpu-tf32}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/log.txt"
timeout 420 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_gpu_tf32.py \
    tests/kernels/test_gpu_tc.py tests/kernels/test_gpu.py tests/kernels/test_gpu_energy.py 2>&1 | tail -6 | tee -a "$out/log.txt"
timeout 200 python3 -m kernels.headline --variants tf32 --out "$out/variants" 2>&1 | tail -24 > "$out/tf32_bench.txt"
timeout 200 python3 -m host.compare --targets gpu --kernels flash --seq 4096 --heads 16 --dim 64,128 \
    --causal both --out "$out/compare" 2>&1 | tail -8 | tee -a "$out/log.txt"
timeout 300 python3 -m kernels.headline 2>&1 | tee "$out/headline.txt" | tee -a "$out/log.txt"
