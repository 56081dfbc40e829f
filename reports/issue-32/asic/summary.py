"""The table of reports/issue-32/asic/summary.md: each workload's cpu and asic rows (host.compare --workload NAME
--targets cpu,asic, one folder per workload beside this file) and the run's wall time from its NAME.txt.

Run from the repository root: .venv/bin/python reports/issue-32/asic/summary.py > reports/issue-32/asic/summary.md
"""

import re
from pathlib import Path

from host.results_file import ResultsFile
from host.workloads import load

HERE = Path(__file__).parent


def main() -> None:
    print("| workload | shape | cpu p50 | asic latency (modelled, 1 GHz) | asic cycles | DRAM bytes (model) | "
          "array use | bit-exact | asic rel-L2 | wall time of the run |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, workload in load().items():
        folder = HERE / name
        if not (folder / "results.csv").is_file():
            print(f"| {name} | not run | | | | | | | | |")
            continue
        rows = {row.target: row for row in ResultsFile(folder / "results.csv").read()}
        cpu, asic = rows.get("cpu"), rows.get("asic")
        log = (HERE / f"{name}.txt").read_text(encoding="utf-8")
        wall = re.search(r"wall time ([0-9.]+) s", log)
        if cpu is None or asic is None or wall is None:
            print(f"| {name} | still running | | | | | | | | |")
            continue
        use = re.search(r"overall ([0-9.]+%) of the array's MACs", asic.message or "")
        p = workload.problem
        shape = (f"B{p.batch} H{p.heads}/{p.kv_head_count} N{p.seq} q_len {p.queries} d{p.dim}"
                 f"{' causal' if p.causal else ''}")
        print(f"| {name} | {shape} | {cpu.p50_ms:.4g} ms ({cpu.status}) | {asic.p50_ms:.4g} ms ({asic.status}) | "
              f"{asic.cycles:,} | {asic.model_bytes:,} | {use[1] if use else '?'} | "
              f"{'yes' if asic.bit_exact else 'no'} | {asic.rel_l2:.2e} | {float(wall[1]):.0f} s |")

if __name__ == "__main__":
    main()
