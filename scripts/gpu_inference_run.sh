#!/usr/bin/env bash
# On the lent H200 (issue 32): the Hopper split-KV kernel's tests (a short limit), the GPU tests of every kernel on
# inference shapes and the existing gpu tests of the
# kernels (all against the float64 golden), then kernels/inference_bench.py (decode against torch SDPA and the copy
# floor; grouped against ungrouped prefill). Output under ${OUT:-reports/latest/gpu-inference}.
set -uo pipefail
if [ -n "${OUT:-}" ]; then OUT=$(realpath -m -- "$OUT"); fi  # a relative OUT is the caller's, not the checkout's
cd "$(dirname "$0")/.."
out=${OUT:-reports/latest/gpu-inference}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/log.txt"
# the Hopper split-KV kernel's tests first, under a short limit: if they fail or hang, the benchmark leaves its
# column out (--no-other) instead of hanging in it
timeout "${WGMMA_S:-90}" python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/kernels/test_gpu_shapes.py \
    -k split-wgmma 2>&1 | tail -8 | tee -a "$out/log.txt"
wgmma_rc=${PIPESTATUS[0]}
echo "split-wgmma tests: exit $wgmma_rc" | tee -a "$out/log.txt"
other=""
[ "$wgmma_rc" = 0 ] || other="--no-other"
timeout "${TEST_S:-300}" python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/kernels/test_gpu_shapes.py \
    tests/kernels/test_gpu_tc.py tests/kernels/test_gpu_tf32.py tests/kernels/test_gpu.py -k "not split-wgmma" 2>&1 \
    | tail -15 | tee -a "$out/log.txt"
timeout "${BENCH_S:-240}" python3 -m kernels.inference_bench $other ${BENCH_ARGS:-} --out "$out" 2>&1 \
    | tee "$out/bench.txt"
