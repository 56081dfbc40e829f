#!/usr/bin/env bash
# On a lent Hopper GPU (issue 34): the q15 kernel's GPU tests (bit-exact with host/q15.py on awkward shapes), then
# `python -m kernels.headline` (fp32 ratios; 16-bit flash against torch FLASH and cuDNN at N 1024, 4096 and 16384
# with each row's share of the fp16 matmul rate; q15 beside float16 with NVML energy), then, if VARIANTS=1, the
# launch-variant sweep of the Hopper kernel (--set i34) at the same lengths. Output under ${OUT:-reports/latest/issue34}:
# log.txt (tests), headline.txt, variants.txt and variants/results.csv.
set -uo pipefail
if [ -n "${OUT:-}" ]; then OUT=$(realpath -m -- "$OUT"); fi  # a relative OUT is the caller's, not the checkout's
cd "$(dirname "$0")/.."
out=${OUT:-reports/latest/issue34}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/log.txt"
timeout "${Q15_S:-150}" python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/kernels/test_q15_gpu.py 2>&1 \
    | tail -12 | tee -a "$out/log.txt"
echo "q15 gpu tests: exit ${PIPESTATUS[0]}" | tee -a "$out/log.txt"
timeout "${HEADLINE_S:-300}" python3 -m kernels.headline ${HEADLINE_ARGS:-} 2>&1 | tee "$out/headline.txt"
if [ "${VARIANTS:-0}" = 1 ]; then
    timeout "${VARIANTS_S:-400}" python3 -m kernels.headline --variants wgmma --set i34 --seqs 1024,4096,16384 \
        --out "$out/variants" 2>&1 | grep -v "^  check" | tee "$out/variants.txt"
fi
