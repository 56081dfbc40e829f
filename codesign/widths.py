"""`python -m codesign widths`: the accumulator-width sweep. For each head dimension, overflow rule and width, one
head runs through the datapath on two inputs, and the table says whether its output is bit-exact with host/q15.py,
how many accumulator results overflowed, and its rel-L2 against the float64 golden.

The contract predicts the width (codesign/bits.py `exact_width`): QKᵀ sums d products of at most 2³⁰, P·V sums Bc
products of at most 32767·32768, so max(32 + ⌊log₂ d⌋, 31 + ⌈log₂ Bc⌉) bits hold every sum of every input. Bc is
the contract's (host.q15.BC = 64) unless --bc says otherwise; the array's shape changes no bit. The
"extreme" input reaches that worst case (a query row and half the key rows all −32768, so one score's accumulator is
exactly d·2³⁰): it must break one bit below the prediction when wrapping. The "normal" input (the problem's seeded
N(0,1) tensors) shows where typical data breaks, far lower. Writes OUT/widths.csv and OUT/widths.png (default
OUT: reports/latest/codesign-widths, git-ignored), and prints the machine's load and a matmul anchor beside its time.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

import numpy as np

from codesign.bits import exact_width, run_head
from codesign.console import Progress, machine
from codesign.datapath import ACC_BITS_MAX, ACC_BITS_MIN, OVERFLOWS, Datapath, array_shape
from host import q15
from host.cli_common import Parser, folder, int_list, integer, output_folder
from host.problem import AttentionProblem
from host.reference import attention, errors
from host.safe_files import keep_aside

#: Where the table and plot go unless --out says otherwise: under reports/latest/, which git ignores.
DEFAULT_OUT = Path("reports/latest/codesign-widths")
COLUMNS = ("input", "dim", "overflow", "acc_bits", "predicted_bits", "bit_exact", "overflows", "rel_l2", "max_abs")


def predicted_width(dim: int, bc: int) -> int:
    """The narrowest accumulator that holds every sum of both GEMMs (QKᵀ over d, P·V over a block of Bc keys) for
    any Q15 input."""
    return max(exact_width(dim, 1 << 30), exact_width(bc, 32767 * 32768))


def inputs(kind: str, seq: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float (N, d) Q, K, V. 'normal': the seeded N(0,1) problem. 'extreme': values on the Q15 grid of exponent 0
    (so quantisation is exact): query rows and even key rows all −1.0 (−32768), odd key rows 0, V uniform."""
    if kind == "normal":
        problem = AttentionProblem(batch=1, heads=1, seq=seq, dim=dim, causal=False, dtype="q15", seed=seed)
        return tuple(x[0, 0].astype(np.float64) for x in problem.inputs())
    rng = np.random.default_rng(seed)
    q = -np.ones((seq, dim))
    k = np.zeros((seq, dim))
    k[0::2] = -1.0
    v = rng.integers(-32768, 32768, (seq, dim)) / 32768.0
    return q, k, v


def sweep(seq: int, dims: tuple[int, ...], widths: tuple[int, ...], rows: int, cols: int, seed: int,
          progress=None, bc: int = q15.BC, emit=None) -> list[dict]:
    """Every (input, dim, overflow, width) point as a dict of COLUMNS, each also given to `emit` as it is made (so
    a stopped sweep keeps what it computed)."""
    points = []
    for kind in ("extreme", "normal"):
        for dim in dims:
            q, k, v = inputs(kind, seq, dim, seed)
            problem = AttentionProblem(batch=1, heads=1, seq=seq, dim=dim, causal=False, dtype="q15", seed=seed)
            quantized = q15.prepare(problem, *(x[None, None] for x in (q, k, v)), bc)
            whole = quantized.expected()
            expected = q15.Q15Out(whole.o[0, 0], whole.shift[0, 0])
            gold = attention(q[None, None], k[None, None], v[None, None], False, np.float64)[0, 0]
            for overflow in OVERFLOWS:
                for bits in widths:
                    datapath = Datapath(rows=rows, cols=cols, acc_bits=bits, overflow=overflow)
                    head = run_head(*quantized.head(0, 0), quantized.params, datapath)
                    metrics = errors(quantized.dequantize(head.out), gold)
                    points.append({"input": kind, "dim": dim, "overflow": overflow, "acc_bits": bits,
                                   "predicted_bits": predicted_width(dim, bc),
                                   "bit_exact": int(head.out.same_bits(expected)),
                                   "overflows": head.overflows, "rel_l2": metrics.rel_l2,
                                   "max_abs": metrics.max_abs})
                    if emit is not None:
                        emit(points[-1])
                    if progress is not None:
                        progress.update()
    return points


def narrowest_exact(points: list[dict], kind: str, dim: int, overflow: str) -> str:
    """The narrowest tested width from which every wider tested one is bit-exact: 'N' when the width just below N was
    tested and is not, 'A..N' when the widest failing width tested is A − 1 < N − 1 (the untested widths between
    may hold too), '<=N' when N is the narrowest width tested, or 'never' when the widest is not exact."""
    chosen = sorted((p for p in points if (p["input"], p["dim"], p["overflow"]) == (kind, dim, overflow)),
                    key=lambda p: p["acc_bits"])
    narrowest, failing = None, None
    for point in reversed(chosen):
        if not point["bit_exact"]:
            failing = point["acc_bits"]
            break
        narrowest = point["acc_bits"]
    if narrowest is None:
        return "never"
    if failing is None:
        return f"<={narrowest}"
    return str(narrowest) if failing == narrowest - 1 else f"{failing + 1}..{narrowest}"


def summary(points: list[dict], dims: tuple[int, ...], bc: int) -> str:
    lines = [f"{'dim':>4} {'predicted':>9}  " + "  ".join(f"{kind + ' ' + ov:>16}" for kind in ("extreme", "normal")
                                                      for ov in OVERFLOWS),
             f"{'':>4} {'(bits)':>9}  " + "  ".join(f"{'exact from':>16}" for _ in range(4))]
    for dim in dims:
        cells = []
        for kind in ("extreme", "normal"):
            for overflow in OVERFLOWS:
                cells.append(f"{narrowest_exact(points, kind, dim, overflow):>16}")
        lines.append(f"{dim:>4} {predicted_width(dim, bc):>9}  " + "  ".join(cells))
    return "\n".join(lines)


def plot(points: list[dict], dims: tuple[int, ...], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, kind in zip(axes, ("extreme", "normal")):
        for colour, dim in zip(colours, dims):
            for overflow, style in zip(OVERFLOWS, ("-", "--")):
                chosen = sorted((p for p in points if (p["input"], p["dim"], p["overflow"]) == (kind, dim, overflow)),
                                key=lambda p: p["acc_bits"])
                xs = [p["acc_bits"] for p in chosen]
                ys = [max(p["rel_l2"], 1e-7) for p in chosen]
                ax.plot(xs, ys, style, color=colour, label=f"d {dim} {overflow}")
                exact = [p["acc_bits"] for p in chosen if p["bit_exact"]]
                ax.plot(exact, [max(p["rel_l2"], 1e-7) for p in chosen if p["bit_exact"]], "o", color=colour,
                        markersize=3)
            ax.axvline(chosen[0]["predicted_bits"] if chosen else 0, color=colour, linewidth=0.6, alpha=0.5)
        ax.set_yscale("log")
        ax.set_xlabel("array accumulator width (bits); dots: bit-exact; thin lines: predicted width")
        ax.set_title(f"{kind} inputs")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("rel-L2 against the float64 golden")
    axes[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def build_parser() -> Parser:
    parser = Parser(prog="python -m codesign widths", description=__doc__)
    parser.add_argument("--seq", type=integer("seq", 1, 4096), default=256, help="sequence length (default 256)")
    parser.add_argument("--dims", type=int_list("dim", 1, q15.DIM_MAX), default=(16, 64, 128, 256),
                        help="head dimensions (default 16,64,128,256)")
    parser.add_argument("--bits", type=int_list("acc-bits", ACC_BITS_MIN, ACC_BITS_MAX),
                        default=tuple(range(16, 49)), help="accumulator widths, comma-separated (default: every "
                                                           "width from 16 to 48)")
    parser.add_argument("--array", type=array_shape, default=(32, 32), help="array RxC (default 32x32)")
    parser.add_argument("--bc", type=integer("bc", 1, q15.MODEL_BC_MAX), default=q15.BC,
                        help=f"keys per block (default the contract's {q15.BC})")
    parser.add_argument("--seed", type=integer("seed", 0, 2**32 - 1), default=0,
                        help="seed of the normal input (default 0)")
    parser.add_argument("--out", type=folder, default=DEFAULT_OUT,
                        help=f"folder for widths.csv and widths.png (default {DEFAULT_OUT}, git-ignored)")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    out = output_folder(args.out)
    state = machine()
    print(state.line())
    total = 2 * len(args.dims) * len(OVERFLOWS) * len(args.bits)
    began = time.perf_counter()
    keep_aside(out / "widths.csv", out / "widths.png")  # an earlier run's, as .prev (.1, ...): never overwritten
    with open(out / "widths.csv", "w", newline="", encoding="utf-8") as handle, \
            Progress("codesign widths", None, total, "head") as progress:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()

        def emit(point: dict) -> None:  # each head's row on disk as it is computed: Ctrl-C keeps them
            writer.writerow(point)
            handle.flush()

        points = sweep(args.seq, args.dims, args.bits, *args.array, args.seed, progress, args.bc, emit)
    elapsed = time.perf_counter() - began
    plot(points, args.dims, out / "widths.png")
    print(f"{total} heads in {state.ratio(elapsed)}")
    print(f"seq {args.seq}, array {args.array[0]}x{args.array[1]}, Bc {args.bc}; narrowest accumulator "
          "width from which every wider one is bit-exact:")
    print(summary(points, args.dims, args.bc))
    print(f"wrote {out / 'widths.csv'} and {out / 'widths.png'}")
    return 0


if __name__ == "__main__":  # `python -m codesign.widths` runs `python -m codesign widths`
    from codesign.__main__ import run_as

    run_as("widths")
