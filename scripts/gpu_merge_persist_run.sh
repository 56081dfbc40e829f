#!/usr/bin/env bash
# On a lent Hopper GPU, in one call (issues 32, 33, 34; 2026-12-07): the steps named in STEPS, in that order, each
# with its own limit in seconds and its output packed as soon as it ends, so a call cut short keeps what finished:
#   shapes    the GPU shape tests (every split-KV kernel, both in-place merges, forced block counts)   SHAPES_S (90)
#   ncu       scripts/ncu_vs_torch.py over NCU_CASES (default: all), ours beside torch's kernels     NCU_S (150)
#   launch    kernels.inference_bench --launch-sweep (the Hopper split kernel's stages, Bc, merge)   LAUNCH_S (110)
#   decode    the Llama 3 8B decode row in fp16 with NVML energy (issue 33)                          DECODE_S (60)
#   bench     kernels.inference_bench (the decode benchmark)                                         BENCH_S (200)
#   variants  kernels.headline --variants wgmma --set VARIANT_SET (persist) at VARIANT_SEQS          VARIANTS_S (120)
# STEPS defaults to "shapes decode bench variants"; ITERS (10) is each timing's repeat count. Output under
# ${OUT:-reports/latest/merge}: log.txt (nvidia-smi, the tests' tail, each step's exit) and STEP.tgz for the others.
set -uo pipefail
if [ -n "${OUT:-}" ]; then OUT=$(realpath -m -- "$OUT"); fi  # a relative OUT is the caller's, not the checkout's
cd "$(dirname "$0")/.."
out=${OUT:-reports/latest/merge}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
log="$out/log.txt"
iters=${ITERS:-10}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$log"
pack() {  # pack NAME: $out/NAME/ into $out/NAME.tgz
    tar czf "$out/$1.tgz" -C "$out" "$1" && rm -rf "${out:?}/$1"
}
for step in ${STEPS:-shapes decode bench variants}; do
    dir="$out/$step"
    mkdir -p "$dir"
    case $step in
    shapes)
        timeout "${SHAPES_S:-90}" python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/kernels/test_gpu_shapes.py \
            2>&1 | tail -6 >> "$log"
        status=${PIPESTATUS[0]} ;;
    ncu)
        # shellcheck disable=SC2086  # the case names are words
        timeout "${NCU_S:-150}" python3 scripts/ncu_vs_torch.py profile "$dir" ${NCU_CASES:-} >> "$log" 2>&1
        status=$? ;;
    launch)
        timeout "${LAUNCH_S:-110}" python3 -m kernels.inference_bench --launch-sweep --iters "$iters" --out "$dir" \
            > "$dir/launch.txt" 2>&1
        status=$? ;;
    decode)
        timeout "${DECODE_S:-60}" python3 -m host.compare --workload llama3-8b-decode --targets gpu --kernels flash \
            --gpu-dtype fp16 --out "$dir/gpu-decode" > "$dir/stdout.txt" 2>&1
        status=$? ;;
    bench)
        timeout "${BENCH_S:-200}" python3 -m kernels.inference_bench --iters "$iters" --out "$dir" > "$dir/bench.txt" 2>&1
        status=$? ;;
    variants)
        timeout "${VARIANTS_S:-120}" python3 -m kernels.headline --variants wgmma --set "${VARIANT_SET:-persist}" \
            --iters "$iters" --seqs "${VARIANT_SEQS:-4096,16384,1024}" --out "$dir" > "$dir/variants.txt" 2>&1
        status=$? ;;
    *)
        echo "unknown step $step (allowed: shapes ncu launch decode bench variants)" >> "$log"
        status=2 ;;
    esac
    echo "$step: exit $status" >> "$log"
    if [ "$step" = shapes ]; then rm -rf "$dir"; else pack "$step"; fi
done
cat "$log"
