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
# ${OUT:-reports/latest/merge}: log.txt (nvidia-smi, the tests' tail, each step's exit) and STEP.tgz for the others
# (an earlier call's log.txt and STEP.tgz there go aside as .prev.TIME). Exit status: 0 every step passed; 1 some
# step failed (its exit is in log.txt); 2 an unknown step or an OUT that is a file; 3 no NVIDIA GPU.
set -uo pipefail
if [ -n "${OUT:-}" ]; then OUT=$(realpath -m -- "$OUT"); fi  # a relative OUT is the caller's, not the checkout's
cd "$(dirname "$0")/.."
out=${OUT:-reports/latest/merge}
steps=${STEPS:-shapes decode bench variants}
for step in $steps; do  # every step known before any runs: a typo costs no device time
    case $step in
    shapes|ncu|launch|decode|bench|variants) ;;
    *) echo "kbench: error: STEPS: unknown step '$step'; allowed: shapes ncu launch decode bench variants" >&2
       exit 2 ;;
    esac
done
if [ -e "$out" ] && [ ! -d "$out" ]; then
    echo "kbench: error: OUT $out is not a folder; allowed: a folder (new or existing)" >&2
    exit 2
fi
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "kbench: no NVIDIA GPU here (nvidia-smi is missing or sees none); these steps need one" >&2
    exit 3
fi
mkdir -p "$out" || exit 2
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
log="$out/log.txt"
iters=${ITERS:-10}
for kept in "$log" $(for step in $steps; do echo "$out/$step.tgz"; done); do  # an earlier call's output stays
    if [ -e "$kept" ]; then mv -- "$kept" "$kept.prev.$(date +%s)"; fi
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$log"
pack() {  # pack NAME: $out/NAME/ into $out/NAME.tgz
    tar czf "$out/$1.tgz" -C "$out" "$1" && rm -rf "${out:?}/$1"
}
failed=0
for step in $steps; do
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
    esac
    echo "$step: exit $status" >> "$log"
    [ "$status" = 0 ] || failed=1
    if [ "$step" = shapes ]; then rm -rf "$dir"; else pack "$step"; fi
done
cat "$log"
exit $failed
