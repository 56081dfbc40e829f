#!/usr/bin/env bash
# Decode against the GPU at equal cost, once the H200's decode rows exist (issue 33): the explorer over
# space-decode.toml for the llama3-8b-decode workload with those rows as --results, then the summary tables that
# docs/codesign.md's answer quotes. Usage, from anywhere:
#   reports/issue-33/iso/decode_vs_gpu.sh [RESULTS_DIR]     (default reports/issue-33/iso/gpu-decode)
# RESULTS_DIR is a host.compare --out folder holding rows of the workload with NVML energy, e.g. from the H200:
#   python -m host.compare --workload llama3-8b-decode --targets gpu --kernels flash --out reports/issue-33/iso/gpu-decode
set -euo pipefail
cd "$(dirname "$0")/../../.."
python=${PYTHON:-.venv/bin/python}
results=${1:-reports/issue-33/iso/gpu-decode}
if [ ! -f "$results/results.csv" ]; then
  echo "decode_vs_gpu.sh: no $results/results.csv; run host.compare --workload llama3-8b-decode on the H200 first" >&2
  exit 2
fi
here=reports/issue-33/iso
"$python" -m codesign explore --workload llama3-8b-decode --space "$here/space-decode.toml" --results "$results" \
  --out "$here/llama3-8b-decode" > "$here/llama3-8b-decode.txt"
GPU_DECODE_RESULTS="$results" "$python" "$here/summary.py" > "$here/summary.md"
cat "$here/llama3-8b-decode/iso.md"
echo "wrote $here/llama3-8b-decode.txt, $here/llama3-8b-decode/, $here/summary.md"
