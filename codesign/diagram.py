"""`python -m codesign diagram`: the datapath's block diagram, drawn from a `Datapath` (array shape, dataflow,
widths, lanes, buffers), as a PNG. Boxes are units, arrows the data that moves between them, labelled with its
width. It writes OUT/codesign_datapath.png (or .svg, .pdf), OUT by default reports/latest/diagram (git-ignored); the
figure in docs/codesign.md is the default datapath's, regenerated only when asked: `--out docs`."""

from __future__ import annotations

from pathlib import Path

from codesign.datapath import OUTPUT_ACC_BITS, Datapath
from codesign.options import add_datapath_options, datapaths
from host.cli_common import Parser, folder, output_folder
from host.errors import SpecError
from host.q15 import BC

UNIT = "#dbe8f5"
MEMORY = "#f5e6cc"
ARRAY = "#d9f0d3"
#: The file types the diagram can be written as (matplotlib picks the format from the suffix).
FORMATS = ("png", "svg", "pdf")
#: The file name inside --out, and the default --out.
NAME = "codesign_datapath"
DEFAULT_OUT = Path("reports/latest/diagram")


class _Canvas:
    """The figure's axes with the diagram's two drawing verbs: a unit's box and a labelled arrow."""

    def __init__(self, ax):
        self.ax = ax

    def box(self, x, y, w, h, title, lines=(), colour=UNIT) -> None:
        from matplotlib.patches import FancyBboxPatch

        self.ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.4", facecolor=colour, edgecolor="#333"))
        self.ax.text(x + w / 2, y + h - 2.2, title, ha="center", va="top", fontsize=10, weight="bold")
        for i, line in enumerate(lines):
            self.ax.text(x + w / 2, y + h - 5.6 - 2.9 * i, line, ha="center", va="top", fontsize=8)

    def arrow(self, start, end, label="", offset=(0, 1.2), bend=0.0) -> None:
        from matplotlib.patches import FancyArrowPatch

        self.ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, color="#444",
                                          connectionstyle=f"arc3,rad={bend}", linewidth=1.2))
        if label:
            self.ax.text((start[0] + end[0]) / 2 + offset[0], (start[1] + end[1]) / 2 + offset[1], label,
                         ha="center", fontsize=7.5, color="#222")


def _memories(canvas: _Canvas, dp: Datapath) -> None:
    canvas.box(2, 28, 12, 16, "DRAM", [f"{dp.dram_bytes_per_cycle:g} B/cycle"], MEMORY)
    canvas.box(22, 54, 14, 11, "Q buffer", [f"{dp.q_buffer_kb:g} KB", f"tiles of {dp.rows} rows"], MEMORY)
    canvas.box(22, 38, 14, 11, "K buffer", [f"{dp.k_buffer_kb:g} KB", f"blocks of {BC} keys"], MEMORY)
    canvas.box(22, 22, 14, 11, "V buffer", [f"{dp.v_buffer_kb:g} KB", f"blocks of {BC} keys"], MEMORY)


def _array(canvas: _Canvas, dp: Datapath) -> None:
    """The array, with a small grid of cells."""
    from matplotlib.patches import FancyBboxPatch, Rectangle

    ax = canvas.ax
    ax.add_patch(FancyBboxPatch((45, 26), 26, 36, boxstyle="round,pad=0.4", facecolor=ARRAY, edgecolor="#333"))
    ax.text(58, 60, f"systolic array {dp.rows}×{dp.cols}", ha="center", va="top", fontsize=10, weight="bold")
    ax.text(58, 56.8, f"{dp.dataflow} dataflow, Q15 × Q15 MACs", ha="center", va="top", fontsize=8)
    ax.text(58, 54.0, f"{dp.acc_bits}-bit accumulators ({dp.overflow})", ha="center", va="top", fontsize=8)
    cells = 6
    for i in range(cells):
        for j in range(cells):
            ax.add_patch(Rectangle((49.5 + j * 3.0, 30 + i * 3.2), 2.4, 2.5, facecolor="white", edgecolor="#5a5"))
    ax.text(58, 27.2, "QKᵀ per (tile, block), then P·V", ha="center", fontsize=7.5)


def _units(canvas: _Canvas, dp: Datapath) -> None:
    canvas.box(80, 50, 18, 13, "score unit", ["z = sat32(RSH(acc·M, r))", "Q15.16, base-2 units"])
    canvas.box(80, 23, 18, 23, "softmax unit", [f"block max (tree of {BC})", "EXP2: 64-entry table",
                                                f"+ interpolation, {dp.exp_lanes} lanes", "running max m, sum l",
                                                "α = EXP2(m_b − m)", "rescale l, A by α"])
    canvas.box(80, 3, 18, 14, "O accumulators", [f"A: {OUTPUT_ACC_BITS}-bit × d per row",
                                                 f"O buffer {dp.o_buffer_kb:g} KB", "A = RSH(A·α, 15) + Σ p·v"],
               MEMORY)
    latency = "reciprocal, then multiply" if dp.divider == "reciprocal" else f"{dp.div_latency} cycles"
    canvas.box(106, 3, 21, 14, "divider", [f"{dp.dividers} × {dp.divider}, {latency}",
                                           "row peak |A| → shift g", "o = sat16(A'·2^g / l'), g"])


def _flows(canvas: _Canvas, dp: Datapath) -> None:
    """The arrows: what moves between the units, with its width."""
    arrow = canvas.arrow
    arrow((14, 40), (22, 59), "Q tiles (int16)", (-3, 1))
    arrow((14, 37), (22, 43), "K blocks", (0, 1))
    arrow((14, 32), (22, 27), "V blocks", (-1, -3))
    arrow((36, 59), (45, 52), "q rows")
    arrow((36, 43), (45, 43), "kᵀ cols")
    arrow((36, 27), (45, 32), "v")
    arrow((71, 56), (80, 56), f"acc ({dp.acc_bits} b)", (0, 1.0))
    arrow((89, 50), (89, 46.5), "z (32 b)", (5, -0.8))
    arrow((80, 36), (71, 40), "P (Q15)", (0, 1.2))
    arrow((71, 28), (80, 12), f"Σ p·v ({dp.acc_bits} b)", (-7, -1))
    arrow((89, 23), (89, 17.5), "α, l", (3, -0.8))
    arrow((98, 10), (106, 10), "A, l", (0, 1.0))
    canvas.ax.plot([116.5, 116.5, 8, 8], [3, -1.5, -1.5, 27], color="#444", linewidth=1.2)
    arrow((8, 25), (8, 27.6))
    canvas.ax.text(60, -0.6, "O tiles (int16, a shift g per row)", ha="center", fontsize=7.5, color="#222")


def draw(dp: Datapath, path: Path) -> None:
    """The block diagram of `dp`, written to `path` (its suffix picks the format)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(13, 7.2))
    ax.set_xlim(0, 130)
    ax.set_ylim(-3, 72)
    ax.axis("off")
    canvas = _Canvas(ax)
    _memories(canvas, dp)
    _array(canvas, dp)
    _units(canvas, dp)
    _flows(canvas, dp)
    ax.text(65, 69.5, f"{dp.name}: key blocks of the contract's Bc = {BC} in increasing key order, "
                      f"{-(-BC // dp.cols)} QKᵀ fold(s) of {dp.cols} columns each; query tiles of {dp.rows} rows; "
                      f"{dp.clock_hz / 1e6:g} MHz", ha="center", fontsize=9)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str]) -> int:
    parser = Parser(prog="python -m codesign diagram", description=__doc__)
    parser.add_argument("--out", type=folder, default=DEFAULT_OUT,
                        help=f"folder for {NAME}.FORMAT (default {DEFAULT_OUT}, git-ignored; `--out docs` redraws "
                             "the docs figure)")
    parser.add_argument("--format", choices=FORMATS, default=FORMATS[0],
                        help=f"image format: {', '.join(FORMATS)} (default {FORMATS[0]})")
    add_datapath_options(parser.add_argument_group("datapath"))
    args = parser.parse_args(argv)
    (datapath,) = datapaths(args)
    if args.out.suffix.lower().lstrip(".") in FORMATS:
        raise SpecError(f"--out {args.out} names an image file; allowed: a folder (the diagram is "
                        f"FOLDER/{NAME}.{args.format}; --format picks png, svg or pdf)")
    path = output_folder(args.out) / f"{NAME}.{args.format}"
    draw(datapath, path)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":  # `python -m codesign.diagram` runs `python -m codesign diagram`
    from codesign.__main__ import run_as

    run_as("diagram")
