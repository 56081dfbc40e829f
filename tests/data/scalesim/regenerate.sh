#!/usr/bin/env bash
# Rebuild scalesim_v2.csv by running SCALE-Sim v2 on every configs/*.cfg with its topologies/<array>.csv.
# Usage: regenerate.sh <scale-sim-v2 checkout> [python with numpy, pandas, tqdm, absl-py, configparser]
# Never run by the tests: they read only the CSV this writes.
set -euo pipefail

scalesim=$(cd "${1:?usage: regenerate.sh <scale-sim-v2 checkout> [python]}" && pwd)
python=${2:-python3}
here=$(cd "$(dirname "$0")" && pwd)
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT

for cfg in "$here"/configs/*.cfg; do
    name=$(basename "$cfg" .cfg)  # r<rows>c<cols>_<dataflow>; its run_name is the same
    (cd "$scalesim" && PYTHONPATH="$scalesim" "$python" scalesim/scale.py -c "$cfg" \
        -t "$here/topologies/${name%_*}.csv" -p "$runs" -i gemm >"$runs/$name.log")
done

"$python" - "$here" "$runs" <<'EOF'
"""Join each run's COMPUTE_REPORT and DETAILED_ACCESS_REPORT rows with the GEMM they ran, text kept as printed."""
import configparser
import csv
import sys
from pathlib import Path

here, runs = Path(sys.argv[1]), Path(sys.argv[2])
COLUMNS = ["array_rows", "array_cols", "dataflow", "M", "N", "K", "total_cycles", "stall_cycles",
           "overall_util_pct", "mapping_efficiency_pct", "compute_util_pct",
           "sram_ifmap_reads", "sram_filter_reads", "sram_ofmap_writes"]


def rows(path):
    with open(path, newline="") as f:
        return [{k.strip(): v.strip() for k, v in row.items() if k and k.strip()}
                for row in csv.DictReader(f, skipinitialspace=True)]


with open(here / "scalesim_v2.csv", "w", newline="") as out:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for cfg in sorted(here.glob("configs/*.cfg")):
        conf = configparser.ConfigParser()
        conf.read(cfg)
        arch = conf["architecture_presets"]
        gemms = rows(here / "topologies" / f"{cfg.stem.rsplit('_', 1)[0]}.csv")
        compute = rows(runs / cfg.stem / "COMPUTE_REPORT.csv")
        access = rows(runs / cfg.stem / "DETAILED_ACCESS_REPORT.csv")
        assert len(gemms) == len(compute) == len(access), cfg
        for gemm, c, a in zip(gemms, compute, access):
            writer.writerow([arch["ArrayHeight"], arch["ArrayWidth"], arch["Dataflow"], gemm["M"], gemm["N"],
                             gemm["K"], c["Total Cycles"], c["Stall Cycles"], c["Overall Util %"],
                             c["Mapping Efficiency %"], c["Compute Util %"], a["SRAM IFMAP Reads"],
                             a["SRAM Filter Reads"], a["SRAM OFMAP Writes"]])
EOF
echo "wrote $here/scalesim_v2.csv"
