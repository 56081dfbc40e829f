"""`python -m codesign run`: one attention problem on one datapath, printed: cycles and latency, each stage's
busy cycles and utilisation, the traffic per operand, and the output's verdict (bit-exact with host/q15.py at the
contract's Bc, host.q15.BC, for every array shape; rel-L2 and max-abs against the float64 golden).

With --rtl every head also runs through the datapath's RTL (codesign/rtl, Amaranth's simulator; arrays of C = Bc columns
only): its outputs (values and row shifts) must equal the model's and its stage counters the cycle model's busy cycles,
else the command fails. Simulation is slow (hundreds to thousands of cycles per second, fewer on larger arrays), so the
expected time is printed first (codesign/rtl/sim.py estimate_seconds) and more than RTL_MAX_S is refused."""

from __future__ import annotations

import sys
import time

from host.cli_common import Parser, guard, integer
from host.errors import SpecError, UnavailableError
from host.problem import AttentionProblem
from host import q15
from host.q15 import DIM_MAX, SEQ_MAX
from host.target_api import Inputs

from codesign.console import Progress, problem_text
from codesign.datapath import OUTPUT_ACC_BITS, Datapath
from codesign.evaluate import Evaluation, evaluate, mapping_note
from codesign.options import add_datapath_options, add_shape_options, datapaths, listed, problems_of


def build_parser() -> Parser:
    parser = Parser(prog="python -m codesign run", description=__doc__)
    problem = parser.add_argument_group("problem")
    problem.add_argument("--seq", type=integer("seq", 1, SEQ_MAX), default=256, help="sequence length (default 256)")
    problem.add_argument("--dim", type=integer("dim", 1, DIM_MAX), default=64, help="head dimension (default 64)")
    problem.add_argument("--heads", type=integer("heads", 1, 256), default=1, help="heads (default 1)")
    problem.add_argument("--batch", type=integer("batch", 1, 64), default=1, help="batch (default 1)")
    add_shape_options(problem)
    problem.add_argument("--seed", type=integer("seed", 0, 2**32 - 1), default=0, help="input seed (default 0)")
    problem.add_argument("--bc", type=integer("bc", 1, q15.MODEL_BC_MAX), default=q15.BC,
                         help=f"keys per block (default the contract's {q15.BC}; --rtl needs the array's columns)")
    add_datapath_options(parser.add_argument_group("datapath"))
    parser.add_argument("--rtl", action="store_true",
                        help="also run every head through the RTL in Amaranth's simulator (small arrays and heads: "
                             "it prints the expected time first) and check outputs, stage cycles and total cycles "
                             "against the model's (default: off)")
    return parser


#: The longest RTL simulation --rtl starts, by codesign/rtl/sim.py's estimate (seconds).
RTL_MAX_S = 3600


def rtl_plan(problem: AttentionProblem, dp: Datapath, bc: int = q15.BC) -> str:
    """Whether --rtl can run this problem on `dp`, checked before anything is computed: the line to print first
    (the expected simulation time), or UnavailableError / SpecError in one line."""
    from codesign import rtl

    ok, why = rtl.available()
    if not ok:
        raise UnavailableError(f"--rtl: {why}")
    from codesign.rtl.divider import MIN_LATENCY
    from codesign.rtl.sim import ESTIMATE_ERROR, estimate_seconds, model_cycles

    if dp.dataflow != "os":
        raise SpecError(f"--rtl: dataflow={dp.dataflow!r} has no RTL array; allowed: os")
    if problem.q_len is not None:
        raise SpecError(f"--rtl: q_len={problem.q_len} of seq={problem.seq}: the RTL's head engine runs a head's every "
                        "query row (self-attention) only; allowed: no --q-len with --rtl")
    if dp.cols != bc:
        raise SpecError(f"--rtl: bc={bc} differs from the array's {dp.cols} columns; allowed: an array "
                        f"{dp.rows}x{bc} (the RTL folds no key block over its columns; the contract's Bc is {q15.BC}, "
                        f"and --bc {dp.cols} would compute other bits than the contract's)")
    built = {"arrays": 1, "schedule": "serial", "divider": "iterative"}  # the one datapath the RTL builds
    for name, value in built.items():
        if getattr(dp, name) != value:
            raise SpecError(f"--rtl: {name}={getattr(dp, name)!r} has no RTL; allowed: {value!r} "
                            "(docs/codesign_rtl.md)")
    if dp.div_latency < MIN_LATENCY:
        raise SpecError(f"--rtl: div-latency={dp.div_latency} is below the RTL divider's minimum; allowed: "
                        f"{MIN_LATENCY}..256")
    try:
        total, _ = model_cycles(dp, problem.seq, problem.dim, problem.causal)  # the cycles each head simulates
    except SpecError as exc:
        raise SpecError(f"--rtl: {exc}") from None
    heads = problem.batch * problem.heads
    estimate = estimate_seconds(dp, problem.seq, problem.dim, problem.causal, heads)
    if estimate > RTL_MAX_S:
        raise SpecError(f"--rtl: {heads} head(s) of {total:,} cycles on a {dp.rows}x{dp.cols} array would simulate "
                        f"for about {estimate / 3600:.1f} h; allowed: up to {RTL_MAX_S // 60} min (a smaller --array, "
                        "--seq or --dim)")
    return (f"kbench: the RTL will simulate {heads} head(s) of {total:,} cycles, roughly {estimate:.0f} s "
            f"({estimate * (1 - ESTIMATE_ERROR):.0f}..{estimate * (1 + ESTIMATE_ERROR):.0f} s on an idle 2-core VM)")


def rtl_check(result: Evaluation) -> tuple[list[str], bool]:
    """Every head of the evaluation through the RTL: report lines, and whether outputs and stage cycles agree."""
    dp, head, quantized = result.datapath, result.head, result.quantized
    from codesign.rtl.sim import DONE_TICKS, model_cycles, simulate_heads

    began = time.perf_counter()
    b_h = [(b, h) for b in range(result.problem.batch) for h in range(result.problem.heads)]
    # the simulated cycles as the RTL counts them: each head's cycles as the model has them, and the cycle of its done
    total, fast = model_cycles(dp, head.seq, head.dim, head.causal)
    simulated = (total + DONE_TICKS) * len(b_h)
    with Progress("codesign run", "RTL", simulated, "cycle", unit_scale=True) as bar:
        # the time estimate printed first can be far off: the rate says how far
        rtl_heads = simulate_heads([(*quantized.head(b, h), quantized.params) for b, h in b_h], dp,
                                   progress=bar.update)
    seconds = time.perf_counter() - began
    same_bits = all(one.out.same_bits(q15.Q15Out(result.out.o[b, h], result.out.shift[b, h]))
                    for one, (b, h) in zip(rtl_heads, b_h))
    model = {name: stage.busy_cycles for name, stage in head.stages.items()}
    cycles = sum(one.cycles for one in rtl_heads)
    lines = [f"rtl        {len(rtl_heads)} head(s) simulated in {seconds:.1f} s ({cycles / seconds:,.0f} cycles/s, "
             f"Amaranth's simulator); outputs equal the model's: {'yes' if same_bits else 'NO'}",
             "  stage      model busy     RTL busy (per head)"]
    same_cycles = True
    for name, expected in model.items():
        got = {one.stage_cycles[name] for one in rtl_heads}
        same_cycles &= got == {expected}
        lines.append(f"  {name:<8} {expected:>12,} {', '.join(f'{g:,}' for g in sorted(got)):>12}"
                     + ("" if got == {expected} else "   DIFFERS"))
    totals = {one.cycles for one in rtl_heads}
    same_total = totals == {total}
    # N on each line is a plain integer, for scripts: `cycles N` and `rtl_cycles N`, equal when the RTL keeps the
    # model's schedule (the report above named its DRAM-inclusive total cycles_dram under --rtl)
    lines.append(f"cycles     {total * len(rtl_heads)} (the model's without DRAM, which the RTL has not: "
                 f"{total:,} per head, its {fast.cycles:,} at a DRAM that never stalls less the prologue "
                 f"{fast.prologue} and epilogue {fast.epilogue}; docs/codesign_rtl.md)")
    lines.append(f"rtl_cycles {cycles} ({', '.join(f'{t:,}' for t in sorted(totals))} per head, start to done"
                 f"{'' if same_total else ', DIFFERS from the model'})")
    return lines, same_bits and same_cycles and same_total


def report(result: Evaluation, rtl: bool = False) -> str:
    """The evaluation as text: what an architect reads first comes first. With rtl (`run --rtl`), the model's total
    with its DRAM prologue and epilogue is labelled cycles_dram, so that the one `cycles` line is the one the RTL's
    `rtl_cycles` stands beside (rtl_check)."""
    dp, head, p = result.datapath, result.head, result.problem
    v = result.verdict
    bc = result.quantized.params.bc
    off_contract = "" if bc == q15.BC else f", not the contract's {q15.BC}"
    model = result.model
    per_head = (f"{head.cycles:,} per head, {head.stall_cycles:,} of them DRAM stalls" if model.later is None else
                f"{head.cycles:,} for a group's first head, {model.later.cycles:,} for each of its "
                f"{model.group - 1} later one(s); {model.stall_cycles:,} DRAM stall cycles in all")
    mapping = mapping_note(model)
    lines = [
        f"datapath   {dp.name}: {dp.describe()}",
        f"problem    {problem_text(p)}: {result.heads} head(s) one after another"
        + (f", the {model.group} query heads of each K/V head together" if model.group > 1 else ""),
        *([f"mapping    {mapping}"] if mapping else []),
        f"{'cycles_dram' if rtl else 'cycles    '} {result.cycles:,} ({per_head})",
        f"latency    {result.latency_s * 1e3:.4g} ms at {dp.clock_hz / 1e6:g} MHz (modelled)",
        f"throughput {p.flops() / result.latency_s / 1e9:.4g} GFLOP/s of "
        f"{2 * dp.arrays * dp.rows * dp.cols * dp.clock_hz / 1e9:.4g} peak; useful MACs {model.utilisation:.1%} of "
        f"the {'array' if dp.arrays == 1 else f'{dp.arrays} arrays'} over the problem",
        f"buffers    Q {head.buffering['q']}, K/V {head.buffering['kv']}, O {head.buffering['o']}",
        "stage      busy cycles   operations   utilisation (of the stage's own capacity while busy)",
    ]
    for name, stage in head.stages.items():
        lines.append(f"  {name:<8} {stage.busy_cycles:>12,} {stage.operations:>12,}   {stage.utilisation:.1%}")
    lines.append("traffic per head (a group's first; DRAM in bytes; buffers and units in words or operations)"
                 if model.later is not None else
                 "traffic per head (DRAM in bytes; buffers and units in words or operations)")
    for name, value in head.traffic.items():
        lines.append(f"  {name:<20} {value:>14,}")
    lines.append(f"DRAM       {result.dram_bytes:,} B over the problem (K and V "
                 f"{model.traffic['dram_read_k_bytes'] + model.traffic['dram_read_v_bytes']:,} B)")
    lines += [
        f"bit_exact  {'yes' if v.bit_exact else 'no'} (host/q15.py at Bc={bc}{off_contract}, values and row shifts); "
        f"accumulator results that overflowed: {result.overflows} ({dp.acc_bits}-bit {dp.overflow} array, "
        f"{OUTPUT_ACC_BITS}-bit output)",
        f"rel_l2     {v.metrics.rel_l2:.3e}   max_abs {v.metrics.max_abs:.3e} (against the float64 golden)",
        f"verdict    {v.status}{': ' + v.message if v.message else ''}",
    ]
    return "\n".join(lines)


def run_problem(problem: AttentionProblem, datapath: Datapath, rtl: bool, bc: int = q15.BC) -> int:
    """One problem through the model (and the RTL): its report printed; 0 when it passed, 1 when not, 130 when
    Ctrl-C stopped the RTL (the model's report stands)."""
    heads = problem.batch * problem.heads
    bar = Progress("codesign run", "heads", heads, "head") if heads > 1 else None
    try:
        result = evaluate(problem, Inputs(problem), datapath, progress=None if bar is None else bar.update, bc=bc)
    finally:
        if bar is not None:
            bar.close()
    print(report(result, rtl))
    if not rtl:
        return 0 if result.verdict.passed else 1

    def check() -> int:
        lines, agrees = rtl_check(result)
        print("\n".join(lines))
        return 0 if result.verdict.passed and agrees else 1

    return guard(check, interrupted="the model's results above stand; the RTL checked nothing")


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if listed(args, parser, argv):
        return 0
    (datapath,) = datapaths(args)
    problems = problems_of(args, parser, argv, args.seed)
    if args.rtl:
        plans = [rtl_plan(problem, datapath, args.bc) for problem in problems]  # every problem refused or planned first
        print("\n".join(plans), file=sys.stderr)
    code = 0
    for number, problem in enumerate(problems):
        if number:
            print()
        done = run_problem(problem, datapath, args.rtl, args.bc)
        if done == 130:
            return done
        code = max(code, done)
    return code


if __name__ == "__main__":  # `python -m codesign.run` runs `python -m codesign run`
    from codesign.__main__ import run_as

    run_as("run")
