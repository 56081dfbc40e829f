#!/usr/bin/env bash
# Nsight Compute over the naive and flash kernels: DRAM bytes read and written, L2 bytes and achieved occupancy of
# one call (after one warm-up call) per N, folded by `python -m kernels.nsight fold` into OUTDIR/nsight.csv and
# OUTDIR/hbm_traffic.png beside kernels.target.model_bytes. Clocks are left as they are (--clock-control none).
#
# Usage: scripts/run_nsight.sh OUTDIR
# Environment: NCU (path to ncu; default: PATH, then /usr/local/cuda*/bin, then /opt/nvidia/nsight-compute/*),
#   PYTHON (default python3), NSIGHT_KERNELS (default "naive flash"), NSIGHT_SEQ (default "512 1024 2048 4096"),
#   NSIGHT_DIM (64), NSIGHT_HEADS (16), NSIGHT_RUN_TIMEOUT (seconds one ncu run may take, default 150),
#   NSIGHT_RESULTS (a host.compare results.csv whose gpu rows get measured_bytes).
# Per run: OUTDIR/raw/<kernel>_N<seq>.ncu-rep (the report), .csv (its --page raw export), .log (ncu's and the
# driver's output). Exit status: 0 all runs folded; 1 some run failed (the rest are folded); 2 usage (a kernel
# NSIGHT_KERNELS does not know, refused before any run); 3 no ncu; 4 no GPU (said once, at the first run that needs
# one; nothing else is tried).
set -uo pipefail

if [ $# -ne 1 ]; then
    echo "kbench: error: usage: scripts/run_nsight.sh OUTDIR" >&2
    exit 2
fi
out=$(realpath -m -- "$1")  # the caller's relative paths, resolved before the cd
if [ -n "${NSIGHT_RESULTS:-}" ]; then NSIGHT_RESULTS=$(realpath -m -- "$NSIGHT_RESULTS"); fi
cd "$(dirname "$0")/.." || exit 1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

find_ncu() {
    if [ -n "${NCU:-}" ]; then echo "$NCU"; return; fi
    command -v ncu && return
    local candidate
    for candidate in /usr/local/cuda/bin/ncu /usr/local/cuda-*/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
        if [ -x "$candidate" ]; then echo "$candidate"; return; fi
    done
}
ncu=$(find_ncu)
if [ -z "$ncu" ] || [ ! -x "$ncu" ]; then
    echo "kbench: error: Nsight Compute's ncu not found (searched PATH, /usr/local/cuda*/bin," \
         "/opt/nvidia/nsight-compute/*); install Nsight Compute or set NCU=/path/to/ncu" >&2
    exit 3
fi

python=${PYTHON:-python3}
kernels=${NSIGHT_KERNELS:-naive flash}
seqs=${NSIGHT_SEQ:-512 1024 2048 4096}
dim=${NSIGHT_DIM:-64}
heads=${NSIGHT_HEADS:-16}
run_timeout=${NSIGHT_RUN_TIMEOUT:-150}
metrics=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,sm__warps_active.avg.pct_of_peak_sustained_active
raw=$out/raw
mkdir -p "$raw"
echo "ncu: $ncu ($("$ncu" --version | tail -1))"

declare -A filters  # every kernel's ncu selection first: a bad NSIGHT_KERNELS is refused before any run
for kernel in $kernels; do
    filters[$kernel]=$("$python" -m kernels.nsight filter --kernel "$kernel") || exit 2
done

failed=0
csvs=()
for kernel in $kernels; do
    read -r -a filter <<< "${filters[$kernel]}"
    for n in $seqs; do
        base=$raw/${kernel}_N$n
        rm -f "$base.ncu-rep" "$base.csv"
        start=$SECONDS
        timeout "$run_timeout" "$ncu" --clock-control none --target-processes all --metrics "$metrics" \
            "${filter[@]}" -f -o "$base" \
            "$python" -m kernels.nsight drive --kernel "$kernel" --seq "$n" --dim "$dim" --heads "$heads" \
            > "$base.log" 2>&1
        status=$?
        no_gpu=$(grep -m 1 "nsight drive needs a GPU" "$base.log")
        if [ -n "$no_gpu" ]; then  # no run after this one can profile anything: one line, not a block a run
            echo "$no_gpu; stopped after the first ncu run" >&2
            exit 4
        fi
        if [ $status -ne 0 ] || [ ! -s "$base.ncu-rep" ]; then
            echo "kbench: ncu run $kernel N=$n failed (exit $status; 124: over ${run_timeout} s; report" \
                 "$base.ncu-rep missing or empty);" \
                 "last lines of $base.log:" >&2
            tail -n 8 "$base.log" >&2
            failed=1
            continue
        fi
        if ! "$ncu" --import "$base.ncu-rep" --csv --page raw --print-units base > "$base.csv" 2>> "$base.log"; then
            echo "kbench: ncu --import of $base.ncu-rep failed; see $base.log" >&2
            failed=1
            continue
        fi
        echo "$kernel N=$n: profiled in $((SECONDS - start)) s"
        csvs+=(--csv "$base.csv")
    done
done

if [ ${#csvs[@]} -eq 0 ]; then
    echo "kbench: no ncu run succeeded; nothing to fold (logs under $raw)" >&2
    exit 1
fi
"$python" -m kernels.nsight fold "${csvs[@]}" --out "$out" --dim "$dim" --heads "$heads" || exit 1
if [ -n "${NSIGHT_RESULTS:-}" ]; then  # fold the measured bytes into a host.compare results.csv
    "$python" -m kernels.nsight merge --summary "$out/nsight.csv" --results "$NSIGHT_RESULTS" || exit 1
fi
exit $failed
