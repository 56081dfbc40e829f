"""Cycles and SRAM traffic of one GEMM on one R×C systolic array, in closed form, with SCALE-Sim v2's report beside.

C (M×N) = A (M×K) · B (K×N) runs on R rows × C columns of MAC cells. Each dataflow keeps one operand's index pair
spatial, Sr over the rows and Sc over the columns, and streams the third index, T, through the array:

    dataflow  stationary      Sr  Sc  T   cycles of one fold
    os        C (outputs)     M   N   K   T + R + C − 2    A and B enter skewed, the last cell finishes R+C−2 late
    ws        B (weights)     K   N   M   2R + C + T − 2   R to load the weights, then T rows skewed through R and C
    is        A (inputs)      K   M   N   2R + C + T − 2   as ws with A and B swapped

The spatial pair is cut into ceil(Sr/R) · ceil(Sc/C) folds, run back to back without overlap, so the GEMM takes
folds · fold_cycles cycles and every stall-free design-space point costs a few integer operations (no trace).

SRAM words moved (one word per operand element, whatever its width):
    os  reads A M·K·ceil(N/C) (once per column fold), B K·N·ceil(M/R) (once per row fold); writes C M·N
    ws  reads A M·K·ceil(N/C), B K·N once;  writes M·N·ceil(K/R) partial sums (one set per row fold of K)
    is  reads A M·K once, B K·N·ceil(M/C);  writes M·N·ceil(K/R)

Under the datapath's overlap schedule (`Datapath.schedule == "overlap"`) a GEMM's folds run as a pipeline: the next
fold's fill under the last one's drain, the stationary operand double-buffered, so each fold holds the array for
max(T, r) cycles (r = min(Sr, R), the rows a fold uses: os drains r output rows, ws and is load r weight rows) and
the fill and drain of the part of the array a fold uses, r + c − 2 in os and 2r + c − 2 in ws and is
(c = min(Sc, C)), are paid once at the end of a chain of GEMMs (`overlapped`). One fold with T ≥ R on the whole array
costs what the table above says. `oriented` also tries Cᵀ = Bᵀ·Aᵀ (rows and columns swapped) and keeps the faster.

`GemmCounts` holds these true counts. `GemmCounts.scalesim()` gives the figures SCALE-Sim v2 (scale-sim-v2 @22f88b17)
prints for the same GEMM without stalls, its counting quirks added there and only there (tests/data/scalesim/README.md
lists them; tests/codesign/test_codesign_gemm.py checks every row SCALE-Sim printed).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from codesign.datapath import ARRAY_MAX, DATAFLOWS, Datapath, array_shape
from host.cli_common import Parser, guard, integer
from host.errors import SpecError
from host.checks import check_int

__all__ = ["DATAFLOWS", "DIM_MAX", "GemmCounts", "array_shape", "gemm", "main", "oriented", "overlapped", "streamed"]

DIM_MAX = 2**31  # M, N, K: 1..2³¹


@dataclass(frozen=True, slots=True)
class GemmCounts:
    """One GEMM (M, N, K) on an R×C array under one dataflow: true counts (no SCALE-Sim quirk in any field)."""

    m: int
    n: int
    k: int
    rows: int  # R
    cols: int  # C
    dataflow: str
    folds: int  # ceil(Sr/R) · ceil(Sc/C)
    fold_cycles: int  # os T+R+C−2; ws, is 2R+C+T−2 (fill, stream, drain)
    cycles: int  # folds · fold_cycles: a count of cycles
    macs: int  # M·N·K useful multiply-accumulates
    ifmap_reads: int  # SRAM words of A (M×K) read
    filter_reads: int  # SRAM words of B (K×N) read
    ofmap_writes: int  # SRAM words of C (M×N) written, partial sums included
    mapping_efficiency: float  # mean over folds of the cells mapped: Sr·Sc / (folds·R·C), 0..1

    def utilisation(self) -> float:
        """Useful MACs per MAC-cell cycle: M·N·K / (cycles·R·C), 0..1."""
        return self.macs / (self.cycles * self.rows * self.cols)

    def scalesim(self) -> dict[str, float | int]:
        """The figures SCALE-Sim v2 reports for this GEMM when nothing stalls (CALC bandwidth mode, or SRAMs that
        hold the operands), keyed by the columns of tests/data/scalesim/scalesim_v2.csv. Its quirks:

        - total_cycles is the 0-based index of the last cycle, `cycles − 1`; overall_util_pct divides by it (so a
          1×1 os array can report over 100 %), and a 1-cycle GEMM has no figures (SCALE-Sim divides by zero).
        - compute_util_pct is per fold MACs·T over R·C times a fold length that for ws and is is 2R+2C+T−3, the
          stationary operand's unskewed demand, not the 2R+C+T−2 of total_cycles.
        - sram_ofmap_writes under os counts R+C more per fold (`ofmap_writes += rows + cols` of each fold).
        Percentages are its per-fold means, which it sums fold by fold in floating point: ours round once, so they
        agree to (folds+3) units in the last place, and exactly for one fold.
        """
        total = self.cycles - 1
        if total == 0:
            raise SpecError(f"SCALE-Sim v2 has no figures for a 1-cycle GEMM (M={self.m} N={self.n} K={self.k} on "
                            f"{self.rows}x{self.cols} {self.dataflow}): its Total Cycles is 0 and it divides by it")
        cells = self.rows * self.cols
        t = _spatial_temporal(self.m, self.n, self.k, self.dataflow)[2]
        util_fold = self.fold_cycles if self.dataflow == "os" else 2 * self.rows + 2 * self.cols + t - 3
        extra_writes = self.folds * (self.rows + self.cols) if self.dataflow == "os" else 0
        # Same operation order as SCALE-Sim where it is one expression (exact match), per-fold means rounded once.
        return {"total_cycles": total,
                "stall_cycles": 0,
                "overall_util_pct": (self.macs * 100) / (total * cells),
                "mapping_efficiency_pct": self.mapping_efficiency * 100,
                "compute_util_pct": self.macs / (self.folds * cells * util_fold) * 100,
                "sram_ifmap_reads": self.ifmap_reads,
                "sram_filter_reads": self.filter_reads,
                "sram_ofmap_writes": self.ofmap_writes + extra_writes}


def _spatial_temporal(m: int, n: int, k: int, dataflow: str) -> tuple[int, int, int]:
    """(Sr, Sc, T) of a dataflow: the index over the rows, the index over the columns, the streamed index."""
    if dataflow == "os":
        return m, n, k
    if dataflow == "ws":
        return k, n, m
    return k, m, n


def gemm(m: int, n: int, k: int, rows: int, cols: int, dataflow: str) -> GemmCounts:
    """Counts of C (m×n) = A (m×k) · B (k×n) on a rows×cols array under `dataflow` (one of DATAFLOWS).

    Raises SpecError naming the bad value: m, n, k in 1..2³¹, rows and cols in 1..256.
    """
    m = check_int("M", m, 1, DIM_MAX)
    n = check_int("N", n, 1, DIM_MAX)
    k = check_int("K", k, 1, DIM_MAX)
    rows = check_int("array rows", rows, 1, ARRAY_MAX)
    cols = check_int("array cols", cols, 1, ARRAY_MAX)
    if dataflow not in DATAFLOWS:
        raise SpecError(f"dataflow={dataflow!r} is unknown; allowed: {', '.join(DATAFLOWS)}")
    sr, sc, t = _spatial_temporal(m, n, k, dataflow)
    row_folds = -(-sr // rows)
    col_folds = -(-sc // cols)
    folds = row_folds * col_folds
    if dataflow == "os":
        fold_cycles = t + rows + cols - 2
        reads_a, reads_b, writes_c = m * k * col_folds, k * n * row_folds, m * n
    elif dataflow == "ws":
        fold_cycles = 2 * rows + cols + t - 2
        reads_a, reads_b, writes_c = m * k * col_folds, k * n, m * n * row_folds
    else:
        fold_cycles = 2 * rows + cols + t - 2
        reads_a, reads_b, writes_c = m * k, k * n * col_folds, m * n * row_folds
    return GemmCounts(m, n, k, rows, cols, dataflow, folds, fold_cycles, folds * fold_cycles, m * n * k,
                      reads_a, reads_b, writes_c, (sr * sc) / (folds * rows * cols))


def overlapped(counts: GemmCounts) -> tuple[int, int]:
    """(steady, tail) of a GEMM under the overlap schedule: the cycles it holds the array, folds · max(T, r), and the
    fill and drain of the part of the array its folds use, paid once at the end of a chain (os r + c − 2, ws and
    is 2r + c − 2, with r = min(Sr, R) and c = min(Sc, C))."""
    sr, sc, t = _spatial_temporal(counts.m, counts.n, counts.k, counts.dataflow)
    r, c = min(sr, counts.rows), min(sc, counts.cols)
    fill = r + c - 2 if counts.dataflow == "os" else 2 * r + c - 2
    return counts.folds * max(t, r), fill


def streamed(counts: GemmCounts) -> int:
    """folds · T: the cycles a GEMM's folds stream data through the array, its fill, drain and loads left out (what
    a bigger array cannot shorten except by taking fewer folds)."""
    return counts.folds * _spatial_temporal(counts.m, counts.n, counts.k, counts.dataflow)[2]


def oriented(m: int, n: int, k: int, rows: int, cols: int, dataflow: str) -> tuple[GemmCounts, bool]:
    """The faster of C = A·B and Cᵀ = Bᵀ·Aᵀ under the overlap schedule (least steady cycles, then least tail; C = A·B
    on a tie), and whether it is the transposed one (A's and B's reads then swap roles)."""
    plain, swapped = gemm(m, n, k, rows, cols, dataflow), gemm(n, m, k, rows, cols, dataflow)
    if overlapped(swapped) < overlapped(plain):
        return swapped, True
    return plain, False


_FOLD_FORMULA = {"os": "T + R + C - 2", "ws": "2R + C + T - 2", "is": "2R + C + T - 2"}
_SPATIAL_NAMES = {"os": ("M", "N", "K"), "ws": ("K", "N", "M"), "is": ("K", "M", "N")}


def report(counts: GemmCounts, scalesim: bool) -> str:
    """The figures `python -m codesign gemm` prints: our counts, then (when asked) SCALE-Sim v2's."""
    c = counts
    sr, sc, t = _SPATIAL_NAMES[c.dataflow]
    lines = [f"GEMM M={c.m} N={c.n} K={c.k} on a {c.rows}x{c.cols} array, dataflow {c.dataflow} "
             f"(rows {sr}, columns {sc}, streamed {t})",
             f"  folds               {c.folds:>16,}   ceil({sr}/R) * ceil({sc}/C)",
             f"  cycles per fold     {c.fold_cycles:>16,}   {_FOLD_FORMULA[c.dataflow]}",
             f"  cycles              {c.cycles:>16,}",
             f"  MACs                {c.macs:>16,}",
             f"  utilisation         {100 * c.utilisation():>15.2f}%",
             f"  mapping efficiency  {100 * c.mapping_efficiency:>15.2f}%",
             f"  SRAM reads A        {c.ifmap_reads:>16,} words",
             f"  SRAM reads B        {c.filter_reads:>16,} words",
             f"  SRAM writes C       {c.ofmap_writes:>16,} words"]
    if scalesim:
        try:
            figures = c.scalesim()
        except SpecError as exc:  # a case SCALE-Sim itself cannot report: our counts stand, with the reason
            lines.append(f"SCALE-Sim v2 compatible: none; {exc}")
        else:
            lines.append("SCALE-Sim v2 compatible (its quirks included; tests/data/scalesim/README.md):")
            lines += [f"  {key:<23} {value!r}" for key, value in figures.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """`python -m codesign gemm M N K [--array RxC] [--dataflow DF] [--scalesim]`: print one GEMM's counts (array and
    dataflow default to the datapath's, as in `python -m codesign run`)."""
    default = Datapath()
    argv = sys.argv[1:] if argv is None else argv
    parser = Parser(prog="python -m codesign gemm",
                    description="Cycles and SRAM traffic of C (MxN) = A (MxK) . B (KxN) on one systolic array.")
    for name in ("M", "N", "K"):
        parser.add_argument(name, type=integer(name, 1, DIM_MAX), help=f"1..{DIM_MAX}")
    parser.add_argument("--array", type=array_shape, default=(default.rows, default.cols),
                        help=f"RxC, 1..{ARRAY_MAX} each; default {default.rows}x{default.cols}")
    parser.add_argument("--dataflow", choices=DATAFLOWS, default=default.dataflow,
                        help=f"output-, weight- or input-stationary; default {default.dataflow}")
    parser.add_argument("--scalesim", action="store_true",
                        help="also print SCALE-Sim v2's figures for it (default: ours only)")

    def body() -> int:
        args = parser.parse_args(argv)
        counts = gemm(args.M, args.N, args.K, *args.array, args.dataflow)
        print(report(counts, args.scalesim))
        return 0

    return guard(body)


if __name__ == "__main__":  # `python -m codesign.gemm` runs `python -m codesign gemm`
    from codesign.__main__ import run_as

    run_as("gemm")
