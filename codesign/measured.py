"""The targets beside the modelled ASIC: rows of host.compare runs (results.csv) for the explorer's problem, with
their latency and energy per inference and where each figure came from. A row's latency is measured (CUDA events,
DWT cycles of a board, wall clock) or modelled (the board twin's cycle model): its timing_source says which, and
`MeasuredPoint.kind` carries it to every label.

A row is taken when it is `ok`, has energy_j, and matches the problem (batch, heads, seq, dim, causal, and q_len and
kv_heads: a decode row never stands beside a prefill problem, nor a grouped one beside heads with K/V heads of their
own), and it comes from a real device: a row of the fake GPU (`--gpu-device fake`: numpy on the CPU, timed by the
host's wall clock, no energy) is no GPU figure and is left out as such, never labelled H200. Every row left out is
counted with the reason, so a plot or iso.md never silently lacks a target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from host.errors import ResultsError, SpecError
from host.problem import AttentionProblem
from host.results_file import ResultsFile

#: Die areas for throughput per mm², by the device name a GPU row carries: the H200 and the H100 carry NVIDIA's GH100
#: die (H100 Tensor Core GPU Architecture whitepaper: 814 mm², TSMC 4N). Another GPU, and the STM32F407 (not
#: published), have no area: they take no iso-area comparison.
DIE_MM2 = {"H200": 814.0, "H100": 814.0}
#: Peak DRAM bandwidth in GB/s by device name, for iso comparisons at the reference's memory bandwidth: the H200 SXM's
#: HBM3e, 4.8 TB/s (NVIDIA's H200 product table; the measured device copy reaches about 4.2 TB/s, docs/gpu.md); the
#: H100 SXM5's HBM3, 3.35 TB/s (NVIDIA's H100 product table; NVML names it "NVIDIA H100 80GB HBM3", where the PCIe
#: card, 2.0 TB/s of HBM2e, carries "PCIe").
DRAM_GBPS = {"H200": 4800.0, "H100 80GB HBM3": 3350.0}
#: How the fake GPU's rows name their device (kernels/fake.py): "fake GPU (numpy on the CPU, …)".
FAKE_DEVICE = "fake GPU"


@dataclass(frozen=True)
class MeasuredPoint:
    """One row: label (target, kernel, dtype), latency, energy per inference, how each was obtained."""

    target: str
    label: str
    latency_s: float
    energy_j: float
    timing_source: str
    energy_source: str
    area_mm2: float | None
    dram_gbps: float | None = None  # the device's peak DRAM bandwidth, where known (DRAM_GBPS)

    @property
    def kind(self) -> str:
        """'modelled' when the row's timing comes from a model (timing_source 'modelled: …'), else 'measured'."""
        return "modelled" if self.timing_source.startswith("modelled:") else "measured"


def _known(table: dict[str, float], row) -> float | None:
    """The figure `table` holds for the row's GPU (by device name), or None."""
    if row.target != "gpu":
        return None
    return next((value for name, value in table.items() if name in row.device), None)


def _label(row) -> str:
    device = {"gpu": "H200" if "H200" in row.device else (row.device or "GPU"),
              "mcu": "STM32F407" + (" (twin)" if "twin" in row.device else ""),
              "cpu": row.device or "CPU"}.get(row.target, row.target)
    return " ".join(dict.fromkeys((device, row.kernel, row.dtype)))


def _shape(q_len: int | None, kv_heads: int | None) -> str:
    """'q_len 1, kv_heads 8', 'q_len seq, kv_heads heads' (None: the square default)."""
    return f"q_len {'seq' if q_len is None else q_len}, kv_heads {'heads' if kv_heads is None else kv_heads}"


def load(folders: list[Path], problem: AttentionProblem) -> tuple[list[MeasuredPoint], list[str]]:
    """The matching rows of each folder's results.csv, and one line per reason rows were left out (with counts)."""
    points: list[MeasuredPoint] = []
    left: dict[str, int] = {}
    for folder in folders:
        path = Path(folder) / "results.csv"
        if not path.is_file():
            raise SpecError(f"--results {folder}: no results.csv there; allowed: a host.compare --out folder")
        results = ResultsFile(path)
        try:
            rows = results.read()
        except ResultsError as exc:  # a folder named on the command line that holds no results: a bad argument
            raise SpecError(f"--results {folder}: {exc}; allowed: a host.compare --out folder") from None
        if results.torn_line is not None:  # a writer killed mid-row: said, not silently dropped
            left[f"{path}: line {results.torn_line} torn (a writer killed mid-row), skipped"] = 0
        if not rows:
            left[f"{path}: no rows"] = 0
        for row in rows:
            shape = (row.batch, row.heads, row.seq, row.dim, bool(row.causal))
            wanted = (problem.batch, problem.heads, problem.seq, problem.dim, problem.causal)
            # None in both: seq queries and a K/V head per query head (results schema 6 writes them so)
            reason = ("another problem" if shape != wanted else
                      f"another q_len or kv_heads than the problem's ({_shape(problem.q_len, problem.kv_heads)})"
                      if (row.q_len, row.kv_heads) != (problem.q_len, problem.kv_heads) else
                      f"status {row.status}" if row.status != "ok" else
                      f"{row.target} row of the fake device (numpy on the CPU, no GPU timed or measured)"
                      if row.device.startswith(FAKE_DEVICE) else
                      f"{row.target} row without energy_j" if row.energy_j is None else
                      "no latency" if row.p50_ms is None else
                      "latency or energy not a positive finite number" if not (
                          math.isfinite(row.p50_ms) and math.isfinite(row.energy_j) and row.p50_ms > 0
                          and row.energy_j > 0) else "")
            if reason:
                left[reason] = left.get(reason, 0) + 1
                continue
            points.append(MeasuredPoint(row.target, _label(row), row.p50_ms / 1e3, row.energy_j,
                                        row.timing_source, row.energy_source,
                                        _known(DIE_MM2, row), _known(DRAM_GBPS, row)))
    return points, [f"{count} row(s): {reason}" if count else reason for reason, count in sorted(left.items())]
