"""The Q15 contract's measured error against the float64 golden, beside fp16's: the table of docs/q15.md §8.

    python -m host.q15_error [--seq 16,256,1024,4096,16384,32768] [--dim 16,64,128] [--causal {0,1,both}]
                             [--inputs normal,x0.1,x10,peaked] [--bc 64]

prints a Markdown table, a row per (inputs, causal, seq, dim) as each is measured (an interrupted run keeps the rows
it printed): the relative L2 and max-abs error of the contract
(host/q15.py, at the contract's Bc unless --bc says otherwise) and of fp16 attention as FlashAttention-2 computes it
(host/fp16_reference.py) on the same inputs and query rows (host/q15_accuracy.py: heads longer than 256 rows are
judged on 256 rows spread over the sequence), and their ratio, which is at most 1 where the contract is as accurate
as fp16. On stderr, one line per row as it is measured, flushed at once, so a run into a log is never silent:
`kbench: q15_error 3/72 normal seq 256 d 64 (4.1 s)` (the time since the run began).
Exit status: 0 printed, every ratio at most 1; 1 printed, some ratio above 1 (named on stderr); 2 bad arguments
only (one `kbench: error:` line naming the value); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from host.cli_common import Parser, Stages, guard, int_list, integer
from host.q15 import BC, DIM_MAX, MODEL_BC_MAX, SEQ_MAX
from host.q15_accuracy import INPUT_KINDS, Comparison, compare

HEADER = ("| inputs | causal | seq | d | Q15 rel-L2 | fp16 rel-L2 | Q15 / fp16 | Q15 max-abs | fp16 max-abs |\n"
          "|---|---|---|---|---|---|---|---|---|")


def comparisons(kinds: Sequence[str], masks: Sequence[bool], seqs: Sequence[int], dims: Sequence[int], bc: int,
                progress: Callable[[Comparison], object] | None = None) -> list[Comparison]:
    """Every (inputs, causal, seq, dim) compared; `progress(comparison)` after each."""
    done = []
    for kind in kinds:
        for causal in masks:
            for seq in seqs:
                for dim in dims:
                    done.append(compare(kind, seq, dim, causal, bc))
                    if progress is not None:
                        progress(done[-1])
    return done


def table(rows: Sequence[Comparison]) -> str:
    """The Markdown table of `rows`."""
    return "\n".join([HEADER] + [
        f"| {c.kind} | {int(c.causal)} | {c.seq} | {c.dim} | {c.q15_rel_l2:.1e} | {c.fp16_rel_l2:.1e} | "
        f"{c.ratio:.2f} | {c.q15_max_abs:.1e} | {c.fp16_max_abs:.1e} |" for c in rows])


def kind_list(text: str) -> tuple[str, ...]:
    """--inputs: comma-separated input kinds."""
    kinds = tuple(part.strip() for part in text.split(","))
    for kind in kinds:
        if kind not in INPUT_KINDS:
            raise argparse.ArgumentTypeError(f"inputs={kind!r} is unknown; allowed: {', '.join(INPUT_KINDS)}")
    return kinds


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m host.q15_error", doc=__doc__)
    parser.add_argument("--seq", type=int_list("seq", 1, SEQ_MAX), default=(16, 256, 1024, 4096, 16384, 32768),
                        metavar="LIST", help="sequence lengths N (default 16,256,1024,4096,16384,32768)")
    parser.add_argument("--dim", type=int_list("dim", 1, DIM_MAX), default=(16, 64, 128), metavar="LIST",
                        help="head dimensions d, comma-separated (default 16,64,128)")
    parser.add_argument("--causal", choices=("0", "1", "both"), default="both", help="causal masking (default both)")
    parser.add_argument("--inputs", type=kind_list, default=INPUT_KINDS, metavar="LIST",
                        help=f"input kinds, comma-separated (default {','.join(INPUT_KINDS)})")
    parser.add_argument("--bc", type=integer("bc", 1, MODEL_BC_MAX), default=BC,
                        help=f"keys per block Bc (default the contract's, {BC})")
    return parser


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        args = build_parser().parse_args(argv)
        masks = (False, True) if args.causal == "both" else (args.causal == "1",)
        stage, total, count = Stages("q15_error"), len(args.inputs) * len(masks) * len(args.seq) * len(args.dim), [0]

        def progress(c: Comparison) -> None:
            count[0] += 1
            print(table([c]).splitlines()[-1], flush=True)  # each row as it is measured: an interrupt loses none
            stage(f"{count[0]}/{total} {c.kind} seq {c.seq} d {c.dim}{' causal' if c.causal else ''}")

        print(HEADER, flush=True)
        rows = comparisons(args.inputs, masks, args.seq, args.dim, args.bc, progress)
        worse = [c for c in rows if not c.ratio <= 1.0]
        for c in worse:
            print(f"kbench: the contract is less accurate than fp16 at {c.kind} seq {c.seq} d {c.dim} causal "
                  f"{int(c.causal)}: rel-L2 {c.q15_rel_l2:.2e} against {c.fp16_rel_l2:.2e}", file=sys.stderr)
        return 1 if worse else 0

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
