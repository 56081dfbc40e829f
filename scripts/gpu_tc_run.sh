#!/usr/bin/env bash
# On the lent H200: the tensor-core kernels' and the energy meter's gpu tests, a sweep of flash in every dtype (rows
# with NVML energy), the headline (16-bit against torch FLASH and cuDNN), and one Nsight Compute profile of the d 64
# fp16 kernel the target dispatches to (stall reasons, occupancy). Output under ${OUT:-reports/latest/gpu-tc}. NVML's Python bindings (nvidia-ml-py) are
# not on the lent machine's image: carry the wheel (.whl, see the device notes) and put it on PYTHONPATH first.
set -uo pipefail
if [ -n "${OUT:-}" ]; then OUT=$(realpath -m -- "$OUT"); fi  # a relative OUT is the caller's, not the checkout's
cd "$(dirname "$0")/.."
out=${OUT:-reports/latest/gpu-tc}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/tc_log.txt"
timeout 400 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_gpu_tc.py tests/kernels/test_gpu_energy.py \
    tests/kernels/test_gpu.py 2>&1 | tail -8 | tee -a "$out/tc_log.txt"
timeout 200 python3 -m host.compare --targets gpu --gpu-dtype fp32,fp16,bf16 --kernels flash --seq 4096 --heads 16 \
    --dim 64,128 --causal both --out "$out/compare" 2>&1 | tail -12 | tee -a "$out/tc_log.txt"
timeout 200 python3 -m kernels.headline 2>&1 | tee "$out/headline.txt" | tee -a "$out/tc_log.txt"
one="$out/ncu_one.py"  # the program ncu profiles, beside the output (no shared /tmp name)
cat > "$one" <<'PY'
from host.problem import AttentionProblem
from host.target_api import Inputs
from kernels import target
p = AttentionProblem(heads=16, seq=4096, dim=64, dtype="float16")
dev = target.backend(target.Settings())
plan = target.launch_plan(p, target.Settings(), dev)
launch = target.launcher("flash", p, Inputs(p), plan.br, plan.bc, dev, plan.path)
launch.launch(); launch.launch()
PY
timeout 200 ncu --clock-control none --kernel-name regex:flash_ --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis python3 "$one" > "$out/ncu_d64.txt" 2>&1
grep -E "Duration|Registers|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Stall|No Eligible|Shared Memory|Compute \(SM\)|Memory Throughput|Block Limit" "$out/ncu_d64.txt" | head -40 | tee -a "$out/tc_log.txt"
