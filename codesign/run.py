"""`python -m codesign run`: one attention problem on one datapath, printed: cycles and latency, each stage's
busy cycles and utilisation, the traffic per operand, and the output's verdict (bit-exact with host/q15.py at
Bc = the array's width, rel-L2 and max-abs against the float64 golden)."""

from __future__ import annotations

import sys

from host.cli_common import Parser, integer
from host.problem import AttentionProblem
from host.q15 import DIM_MAX, SEQ_MAX
from host.target_api import Inputs

from codesign.datapath import OUTPUT_ACC_BITS
from codesign.evaluate import Evaluation, evaluate
from codesign.options import add_datapath_options, datapaths


def build_parser() -> Parser:
    parser = Parser(prog="python -m codesign run", description=__doc__)
    problem = parser.add_argument_group("problem")
    problem.add_argument("--seq", type=integer("seq", 1, SEQ_MAX), default=256, help="sequence length (default 256)")
    problem.add_argument("--dim", type=integer("dim", 1, DIM_MAX), default=64, help="head dimension (default 64)")
    problem.add_argument("--heads", type=integer("heads", 1, 256), default=1, help="heads (default 1)")
    problem.add_argument("--batch", type=integer("batch", 1, 64), default=1, help="batch (default 1)")
    problem.add_argument("--causal", action="store_true", help="causal mask")
    problem.add_argument("--seed", type=integer("seed", 0, 2**32 - 1), default=0, help="input seed (default 0)")
    add_datapath_options(parser.add_argument_group("datapath"))
    return parser


def report(result: Evaluation) -> str:
    """The evaluation as text: what an architect reads first comes first."""
    dp, head, p = result.datapath, result.head, result.problem
    v = result.verdict
    lines = [
        f"datapath   {dp.name}: {dp.describe()}",
        f"problem    B{p.batch} H{p.heads} N{p.seq} d{p.dim}{' causal' if p.causal else ''}: "
        f"{result.heads} head(s) one after another",
        f"cycles     {result.cycles:,} ({head.cycles:,} per head, {head.stall_cycles:,} of them DRAM stalls)",
        f"latency    {result.latency_s * 1e3:.4g} ms at {dp.clock_hz / 1e6:g} MHz (modelled)",
        f"throughput {p.flops() / result.latency_s / 1e9:.4g} GFLOP/s of {2 * dp.rows * dp.cols * dp.clock_hz / 1e9:.4g} "
        f"peak; useful MACs {head.utilisation:.1%} of the array over the head",
        f"buffers    Q {head.buffering['q']}, K/V {head.buffering['kv']}, O {head.buffering['o']}",
        "stage      busy cycles   operations   utilisation (of the stage's own capacity while busy)",
    ]
    for name, stage in head.stages.items():
        lines.append(f"  {name:<8} {stage.busy_cycles:>12,} {stage.operations:>12,}   {stage.utilisation:.1%}")
    lines.append("traffic per head (DRAM in bytes; buffers and units in words or operations)")
    for name, value in head.traffic.items():
        lines.append(f"  {name:<20} {value:>14,}")
    lines += [
        f"bit_exact  {'yes' if v.bit_exact else 'no'} (host/q15.py at Bc={dp.cols}); accumulator results that "
        f"overflowed: {result.overflows} ({dp.acc_bits}-bit {dp.overflow} array, {OUTPUT_ACC_BITS}-bit output)",
        f"rel_l2     {v.metrics.rel_l2:.3e}   max_abs {v.metrics.max_abs:.3e} (against the float64 golden)",
        f"verdict    {v.status}{': ' + v.message if v.message else ''}",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    (datapath,) = datapaths(args)
    problem = AttentionProblem(batch=args.batch, heads=args.heads, seq=args.seq, dim=args.dim, causal=args.causal,
                               dtype="q15", seed=args.seed)
    from tqdm import tqdm

    with tqdm(total=problem.batch * problem.heads, desc="heads", unit="head", file=sys.stderr, leave=False,
              disable=None if problem.batch * problem.heads > 1 else True) as bar:
        result = evaluate(problem, Inputs(problem), datapath, progress=bar.update)
    print(report(result))
    return 0 if result.verdict.passed else 1
