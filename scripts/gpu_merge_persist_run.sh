#!/usr/bin/env bash
# On a lent Hopper GPU, in one call (issues 32, 33, 34; 2026-12-07): the GPU shape tests (every split-KV kernel,
# both in-place merges, forced block counts), the Llama 3 8B decode row in fp16 with NVML energy (issue 33), the
# decode benchmark (kernels/inference_bench.py: the in-place merge and the Hopper split kernel by default), and the
# persistent Hopper prefill launch beside the launch now (--set persist). Each step has its own limit and its output
# is packed as soon as it ends, so a call cut short keeps what finished. Output under ${OUT:-reports/latest/merge}:
# log.txt (nvidia-smi, the tests' tail, each step's exit), decode.tgz, bench.tgz, variants.tgz. A step whose limit
# (SHAPES_S, DECODE_S, BENCH_S, VARIANTS_S, NCU_S, LAUNCH_S, seconds) is 0 is left out; VARIANT_SET names the headline set
# (persist); NCU_CASES, the cases of scripts/ncu_vs_torch.py profiled (ncu.tgz; NCU_S defaults to 0: left out);
# LAUNCH_S, `kernels.inference_bench --launch-sweep` (launch.tgz; default 0: left out).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-reports/latest/merge}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
log="$out/log.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$log"
step() {  # step LIMIT_VAR: true when the step's limit is not 0
    [ "${!1}" != 0 ] || { echo "$1=0: step left out" >> "$log"; return 1; }
}
: "${SHAPES_S:=90}" "${DECODE_S:=60}" "${BENCH_S:=200}" "${VARIANTS_S:=120}" "${NCU_S:=0}" "${LAUNCH_S:=0}"
pack() {  # pack() NAME: $out/NAME/ into $out/NAME.tgz
    tar czf "$out/$1.tgz" -C "$out" "$1" && rm -rf "${out:?}/$1"
}
step SHAPES_S && { timeout "$SHAPES_S" python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/kernels/test_gpu_shapes.py 2>&1 \
    | tail -6 >> "$log"
echo "shape tests: exit ${PIPESTATUS[0]}" >> "$log"; }
step NCU_S && { mkdir -p "$out/ncu"
# shellcheck disable=SC2086  # the case names are words
timeout "$NCU_S" python3 scripts/ncu_vs_torch.py profile "$out/ncu" ${NCU_CASES:-} >> "$log" 2>&1
echo "ncu: exit $?" >> "$log"
pack ncu; }
step LAUNCH_S && { mkdir -p "$out/launch"
timeout "$LAUNCH_S" python3 -m kernels.inference_bench --launch-sweep --iters "${ITERS:-10}" --out "$out/launch" \
    > "$out/launch/launch.txt" 2>&1
echo "launch sweep: exit $?" >> "$log"
pack launch; }
step DECODE_S && { mkdir -p "$out/decode"
timeout "$DECODE_S" python3 -m host.compare --workload llama3-8b-decode --targets gpu --kernels flash \
    --gpu-dtype fp16 --out "$out/decode/gpu-decode" > "$out/decode/stdout.txt" 2>&1
echo "decode row: exit $?" >> "$log"
pack decode; }
step BENCH_S && { mkdir -p "$out/bench"
timeout "$BENCH_S" python3 -m kernels.inference_bench --iters "${ITERS:-10}" --out "$out/bench" \
    > "$out/bench/bench.txt" 2>&1
echo "inference bench: exit $?" >> "$log"
pack bench; }
step VARIANTS_S && { mkdir -p "$out/variants"
timeout "$VARIANTS_S" python3 -m kernels.headline --variants wgmma --set "${VARIANT_SET:-persist}" --iters "${ITERS:-10}" \
    --seqs "${VARIANT_SEQS:-4096,16384,1024}" --out "$out/variants" > "$out/variants/variants.txt" 2>&1
echo "${VARIANT_SET:-persist} variants: exit $?" >> "$log"
pack variants; }
cat "$log"
