"""The equal-cost tables of docs/codesign.md ("The answer") from the explorer runs in this folder: for each run, its
points.csv and the --results rows it was given, codesign/iso.py's comparison again (the same code that wrote the
run's iso.md), with each energy ratio as a band (the reference's energy over the point's high and low ends) and the
chosen point's utilisation, DRAM stall share and largest energy shares. Run from the repository root:

    python reports/issue-33/iso/summary.py > reports/issue-33/iso/summary.md

The prefill runs have a second set of points beside them, the same axes on the schedule the RTL runs and checks
(space-serial.toml: the serial schedule, the iterative divider, one array): each budget row of space.toml's overlap
points is followed by the same budget's row for those, the schedule column saying which is which (the overlap
schedule and the pipelined and reciprocal dividers are the cycle model's alone; codesign_rtl.md).

A run whose folder is missing is listed as such. GPU_DECODE_RESULTS names the folder of the H200's decode rows
(default reports/issue-33/iso/gpu-decode). Until the H200's Llama 3 8B decode rows exist
(reports/issue-33/iso/gpu-decode, decode_vs_gpu.sh), that run is compared at iso-area only with a stand-in named as
such: the H200 split-KV kernel's time on the same 537 MB of K and V (batch 32 × 4,096 keys, 32/8 heads, d 128) from
reports/issue-32/gpu/run7_stream_k/decode.csv, which has no energy.
"""

from __future__ import annotations

import csv
import itertools
import math
import os
import sys
from pathlib import Path

import numpy as np

from codesign import iso
from codesign.measured import DIE_MM2, DRAM_GBPS, MeasuredPoint, load
from host.problem import AttentionProblem

HERE = Path(__file__).resolve().parent
#: run folder → (the problem the explorer ran, the --results folders it was given)
RUNS = {
    "prefill-seq1024": (AttentionProblem(batch=1, heads=16, seq=1024, dim=64, causal=False),
                        ["reports/codesign/explore-gpu", "reports/codesign/explore-mcu",
                         "reports/codesign/explore-mcu-1024"]),
    "prefill-seq128": (AttentionProblem(batch=1, heads=16, seq=128, dim=64, causal=False),
                       ["reports/codesign/explore-gpu", "reports/codesign/explore-mcu",
                        "reports/codesign/explore-mcu-1024"]),
    "decode-2048": (AttentionProblem(batch=1, heads=1, seq=2048, q_len=1, dim=64, causal=True),
                    ["reports/issue-32/mcu/decode"]),
    "llama3-8b-decode": (AttentionProblem(batch=16, heads=32, kv_heads=8, seq=8192, q_len=1, dim=128, causal=True),
                         [os.environ.get("GPU_DECODE_RESULTS", "reports/issue-33/iso/gpu-decode")]),
}
#: The stand-in for the Llama 3 8B decode rows: run 7's split-KV decode at batch 32, 4,096 keys (K and V: 32 × 8 K/V
#: heads × 4,096 × 128 × 2 B × 2 = 537 MB, as batch 16 at 8,192 keys)
#: run folder → the folder of the same problem's points on the RTL's schedule (space-serial.toml)
SERIAL = {"prefill-seq1024": "prefill-seq1024-serial", "prefill-seq128": "prefill-seq128-serial"}
STAND_IN = (Path("reports/issue-32/gpu/run7_stream_k/decode.csv"), {"q_len": "1", "batch": "32", "kv_len": "4096"})
TEXT = ("array", "dataflow", "buffers_kb", "overflow", "dram", "divider", "schedule", "mapping", "bit_exact",
        "skipped", "slower_than")
SHARES = ("array", "buffers", "score", "softmax", "dividers", "idle", "clock", "dram", "leakage")


def columns(path: Path) -> dict[str, np.ndarray]:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    out = {}
    for name in rows[0]:
        values = [row[name] for row in rows]
        if name in TEXT:
            out[name] = np.array(values, dtype=object)
        else:
            out[name] = np.array([float(v) if v else np.nan for v in values])
    out["arrays"] = out["arrays"].astype(int)
    return out


def stand_in() -> MeasuredPoint:
    """Run 7's H200 decode time on the same K/V bytes, latency only (no energy: iso-area alone)."""
    path, match = STAND_IN
    with open(path, newline="", encoding="utf-8") as handle:
        row = next(r for r in csv.DictReader(handle) if all(r[k] == v for k, v in match.items()))
    return MeasuredPoint("gpu", "stand-in: H200 split-KV fp16, run 7, batch 32 × 4,096 keys (537 MB), no energy",
                         float(row["ours_us"]) * 1e-6, math.nan, f"measured: CUDA events ({path})", "none",
                         DIE_MM2["H200"], DRAM_GBPS["H200"])


def shares(c: dict, i: int) -> str:
    top = sorted(SHARES, key=lambda part: -c[f"share_{part}"][i])[:3]
    return ", ".join(f"{part} {c[f'share_{part}'][i]:.0%}" for part in top)


def schedule(c: dict, i: int) -> str:
    """The point's schedule, and whether the RTL runs it (one array, serial, iterative divider: codesign_rtl.md)."""
    if c["schedule"][i] == "serial" and c["divider"][i] == "iterative" and c["arrays"][i] == 1:
        return "serial, iterative divider, one array: RTL-checked"
    return f"{c['schedule'][i]}, {c['divider'][i]} divider: model only"


def table_row(c: dict, row: iso.IsoRow) -> str:
    power = row.reference_energy_j / row.reference_latency_s
    ref = (f"{row.reference_latency_s * 1e6:.3g} µs, {row.reference_energy_j * 1e3:.3g} mJ, {power:.3g} W"
           if math.isfinite(power) else f"{row.reference_latency_s * 1e6:.3g} µs, no energy")
    budget = f"{row.budget}" + (f", DRAM ≤ {row.dram_cap_gbps / 1000:g} TB/s" if row.dram_cap_gbps else "")
    i = row.index
    if i < 0:
        return f"| {row.reference} | {ref} | {budget} | | none fits once | | | | | | | |"
    arrays = f"{c['arrays'][i]} × " if c["arrays"][i] > 1 else ""
    point = (f"{arrays}{c['array'][i]}, {c['divider'][i]} divider, {c['clock_mhz'][i]:g} MHz, "
             f"{c['dram_gbps'][i]:g} GB/s, {c['node_nm'][i]:g} nm, {c['area_mm2'][i]:.3g} mm²")
    gain = (f"{row.energy_gain:.3g} ({row.reference_energy_j / c['energy_j_high'][i]:.3g}–"
            f"{row.reference_energy_j / c['energy_j_low'][i]:.3g})" if math.isfinite(row.energy_gain)
            else f"(the point: {c['energy_j'][i] * 1e3:.3g} mJ)")
    return (f"| {row.reference} | {ref} | {budget} | {schedule(c, i)} | {point} | {row.copies} ({row.fit}) | "
            f"{row.latency_s * 1e6:.3g} µs | {row.speedup:.3g} | {gain} | {c['rel_l2'][i]:.2e} | "
            f"{c['utilisation'][i]:.1%}, {c['dram_stall_share'][i]:.0%} | {shares(c, i)} |")


def extremes(c: dict, label: str) -> list[str]:
    """The space's fastest and least-energy runnable, bit-exact point at each node."""
    lines = []
    ok = (c["skipped"] == "") & (c["bit_exact"] == "all inputs")
    nodes = sorted(set(c["node_nm"][ok].tolist()), reverse=True)
    for (what, metric), node in itertools.product((("fastest", "latency_s"), ("least energy", "energy_j")), nodes):
        here = ok & (c["node_nm"] == node)
        i = int(np.argmin(np.where(here, c[metric], np.inf)))
        arrays = f"{c['arrays'][i]} × " if c["arrays"][i] > 1 else ""
        lines.append(f"\n{label} {what} point at {node:g} nm ({schedule(c, i)}): {arrays}{c['array'][i]}, "
                     f"{c['divider'][i]} divider, "
                     f"{c['clock_mhz'][i]:g} MHz, {c['dram_gbps'][i]:g} GB/s, {c['node_nm'][i]:g} nm: "
                     f"{c['latency_s'][i] * 1e6:.4g} µs, {c['energy_j'][i] * 1e3:.3g} mJ "
                     f"({c['energy_j_low'][i] * 1e3:.3g}–{c['energy_j_high'][i] * 1e3:.3g}), "
                     f"{c['area_mm2'][i]:.3g} mm²; use {c['utilisation'][i]:.1%}, DRAM stalls "
                     f"{c['dram_stall_share'][i]:.0%}; {shares(c, i)}; mapping: {c['mapping'][i]}")
    return lines


def run(name: str) -> list[str]:
    problem, results = RUNS[name]
    folder = HERE / name
    if not (folder / "points.csv").is_file():
        return [f"## {name}", "", f"Not run yet: {folder.relative_to(HERE.parents[2])} has no points.csv.", ""]
    c = columns(folder / "points.csv")
    present = [Path(r) for r in results if (Path(r) / "results.csv").is_file()]
    measured, left_out = load(present, problem)
    if name == "llama3-8b-decode" and not measured:
        measured = [stand_in()]
    bound = iso.fp16_rel_l2(problem)
    rows = iso.compare(c, measured, problem, bound)
    serial = HERE / SERIAL[name] if name in SERIAL else None
    cs, beside = None, {}
    if serial is not None and (serial / "points.csv").is_file():
        cs = columns(serial / "points.csv")
        beside = {(r.reference, r.budget, r.dram_cap_gbps): r for r in iso.compare(cs, measured, problem, bound)}
    lines = [f"## {name}: B {problem.batch} H {problem.heads}"
             + (f"/{problem.kv_heads}" if problem.kv_heads else "") + f" N {problem.seq}"
             + (f" q_len {problem.q_len}" if problem.q_len else "") + f" d {problem.dim}"
             + (" causal" if problem.causal else ""), "",
             f"fp16's rel-L2 on the probe head: {bound:.2e}; --results rows used: {len(measured)}"
             + "".join(f"; left out {line}" for line in left_out)
             + "".join(f"; {r} missing" for r in results if Path(r) not in present)
             + (f"; the RTL's schedule: {serial.relative_to(HERE.parents[2])}" + ("" if cs is not None else
                " not run yet") if serial is not None else ""), "",
             "| reference | its latency, energy, power | budget | schedule | point | copies (fit) | latency | × faster "
             "| × less energy (band) | rel-L2 | use, DRAM stalls | largest energy shares |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(table_row(c, row))
        twin = beside.get((row.reference, row.budget, row.dram_cap_gbps))
        if twin is not None:
            lines.append(table_row(cs, twin))
        elif cs is not None:
            lines.append(f"| {row.reference} | | {row.budget} | serial, iterative divider, one array: RTL-checked "
                         "| none at least as accurate as fp16 | | | | | | | |")
    if not rows:
        lines.append("| (no measured row with a latency and an energy for this problem) | | | | | | | | | | | |")
    lines += extremes(c, "The space's")
    if cs is not None:
        lines += extremes(cs, "The RTL's schedule (space-serial.toml): the space's")
    return lines + [""]


def main(names: list[str]) -> int:
    print("# Issue 33: the explorer at equal cost, summarised (reports/issue-33/iso/summary.py)\n")
    for name in names or list(RUNS):
        print("\n".join(run(name)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
