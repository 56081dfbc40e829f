"""`python -m codesign explore --seq 1024 --dim 64 --heads 16 [--q-len Q] [--kv-heads H] [--causal 0|1|both] [--space
space.toml] [--results DIR ...] [--max-area MM2] [--max-power W] [--out DIR]`, or `--workload NAME`
(host/workloads.toml, in place of the shape options; `--workload list` prints the table): run the operating-point
explorer (codesign/explore.py) and write OUT/points.csv (every point), OUT/front.csv (the Pareto fronts, also printed),
OUT/sensitivity.csv, OUT/energy_latency.png (energy per inference against latency, area as colour, the front drawn, the
--results rows marked) and OUT/efficiency.png (throughput per mm² against energy efficiency, one colour per node) and
OUT/iso.md (codesign/iso.py: the fastest point at each --results row's die area and power, at least as accurate as fp16
on the same probe head, copied to the budget). --max-area and --max-power bound every answer alike: the fronts
(front.csv and the console), the sensitivity table, both plots (points beyond them drawn faint) and iso.md; points.csv
keeps every point. OUT defaults to reports/latest/explore (git-ignored). Progress goes to stderr stage by stage, in a
log as on a terminal; the report prints the machine's load and a matmul anchor beside the time it took. One sweep writes
into a folder at a time (OUT/.kbench.lock, shared with host.compare and kernels.sweep: host/out_lock.py, holds its PID,
host and tool); the lock of a run that no longer runs is taken over, saying so in one line.
Exit status: 0 written; 1 a failure while working (a file, another sweep holding OUT); 2 bad arguments (one
`kbench: error:` line); 130 interrupted (Ctrl-C) and 143 terminated (SIGTERM), each one line, nothing of the
interrupted run written and the lock released.
"""

from __future__ import annotations

import csv
import functools
import os
import time
from pathlib import Path

import numpy as np

from codesign.console import Progress, joules, machine, problem_text, say, seconds
from codesign.explore import SWEPT, explore, fronts, load_space, sensitivity, space_size
from codesign.explore_cycles import div_latency_applies
from codesign import iso
from codesign.explore_plots import nothing_exact, plot_efficiency, plot_energy_latency
from codesign.measured import MeasuredPoint, load
from codesign.options import add_shape_options, listed, problems_of
from codesign.technology import GateCalibration, Technology
from host.cli_common import Parser, folder, guard, integer, output_folder, real, terminate_on_sigterm
from host.errors import KbenchError, SpecError
from host.out_lock import sweep_lock
from host.problem import LIMITS, AttentionProblem
from host.q15 import DIM_MAX, SEQ_MAX

#: Columns of front.csv besides the point's own.
FRONT_COLUMNS = ("front", "array", "dataflow", "exp_lanes", "dividers", "div_latency", "buffers_kb", "clock_mhz",
                 "dram", "dram_gbps", "node_nm", "acc_bits", "overflow", "latency_s", "energy_j", "energy_j_low",
                 "energy_j_high", "area_mm2",
                 "area_mm2_low", "area_mm2_high", "synth_area_mm2", "synth_area_mm2_low", "synth_area_mm2_high",
                 "synth_ge", "utilisation", "dram_stall_share", "gops", "bit_exact", "rel_l2",
                 "share_array", "share_buffers", "share_softmax", "share_score", "share_dividers", "share_dram",
                 "share_leakage", "divider", "arrays", "schedule", "mapping", "slower_than")
COMMAND = "codesign explore"
#: Where the files go unless --out says otherwise: under reports/latest/, which git ignores (points.csv is ~22 MB).
DEFAULT_OUT = Path("reports/latest/explore")


def as_written(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The columns as points.csv and front.csv hold them: div_latency empty where it does not apply (a reciprocal
    divider's: explore_cycles.NO_DIV_LATENCY), where the columns carry the space's first value."""
    latency = columns["div_latency"].astype(object)
    latency[~div_latency_applies(columns["divider"])] = ""
    return {**columns, "div_latency": latency}


def write_points(columns: dict[str, np.ndarray], path: Path) -> None:
    names = list(columns)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(names)
        writer.writerows(zip(*(_text(columns[name]) for name in names)))


def _text(values: np.ndarray) -> list[str]:
    if values.dtype.kind == "f":
        return ["" if not np.isfinite(v) else f"{v:.6g}" for v in values.tolist()]
    return [str(v) for v in values.tolist()]


def front_rows(columns: dict[str, np.ndarray], chosen: list[tuple[str, np.ndarray]]) -> list[dict[str, str]]:
    rows = []
    for name, idx in chosen:
        for i in idx:
            row = {"front": name}
            for key in FRONT_COLUMNS[1:]:
                value = columns[key][i]
                row[key] = f"{value:.6g}" if isinstance(value, (float, np.floating)) else str(value)
            rows.append(row)
    return rows


def _point_line(columns, i: int) -> str:
    """One front point: its datapath, then latency, energy and both areas with their bands, in human units."""
    c = columns
    arrays = f"{c['arrays'][i]} x " if c["arrays"][i] > 1 else ""
    # the reciprocal divider's latencies are its own (datapath.RECIPROCAL_LATENCY, PRODUCT_LATENCY): no div_latency
    divider = (f"rdiv{c['dividers'][i]}" if c["divider"][i] == "reciprocal" else
               f"{'p' if c['divider'][i] == 'pipelined' else ''}div{c['dividers'][i]}x{c['div_latency'][i]}")
    schedule = "" if c["schedule"][i] == "serial" else f" {c['schedule'][i]} ({c['mapping'][i]})"
    return (f"{arrays}{c['array'][i]} {c['dataflow'][i]} e{c['exp_lanes'][i]} "
            f"{divider}{schedule} "
            f"{c['clock_mhz'][i]:g} MHz {c['dram'][i]} {c['dram_gbps'][i]:g} GB/s {c['node_nm'][i]} nm "
            f"acc{c['acc_bits'][i]} {c['overflow'][i]}: {seconds(c['latency_s'][i])}, "
            f"{joules(c['energy_j'][i], (c['energy_j_low'][i], c['energy_j_high'][i]))}, "
            f"{c['area_mm2'][i]:.3g} mm² ({c['area_mm2_low'][i]:.3g}..{c['area_mm2_high'][i]:.3g}; synthesis "
            f"{c['synth_area_mm2'][i]:.3g}: {c['synth_area_mm2_low'][i]:.3g}..{c['synth_area_mm2_high'][i]:.3g})")


def bounds_text(max_area: float | None, max_power: float | None) -> str:
    """'area ≤ 5 mm² and power ≤ 2 W', or '' without --max-area and --max-power."""
    return " and ".join(filter(None, [f"area ≤ {max_area:g} mm²" if max_area else "",
                                      f"power ≤ {max_power:g} W" if max_power else ""]))


def _summary(columns, chosen, points, allowed=None, bounds: str = "") -> str:
    lines = []
    within = f" (points within {bounds})" if bounds else ""
    for name, idx in chosen:
        if not len(idx):
            lines.append(f"front {name}{within}: empty: {nothing_exact(columns, allowed, bounds)}")
            continue
        lines.append(f"front {name}{within}: {len(idx)} points")
        for what, metric in (("fastest", "latency_s"), ("least energy", "energy_j"), ("smallest", "area_mm2")):
            lines.append(f"  {what:<12} {_point_line(columns, idx[np.argmin(columns[metric][idx])])}")
    for p in points:  # the twin's cycles are a model: its rows say modelled, not measured
        lines.append(f"{p.kind} {p.label}: {seconds(p.latency_s)}, {joules(p.energy_j)} (timing "
                     f"{p.timing_source}; energy {p.energy_source})")
    return "\n".join(lines)


def _sensitivity_lines(columns, base: int, spread: list[dict]) -> list[str]:
    # a reciprocal divider's div_latency does not apply (points.csv and front.csv leave it empty): not named here
    applies = bool(div_latency_applies(columns["divider"][base:base + 1])[0])
    lines = ["sensitivity around the front's least energy-delay point ("
             + ", ".join(f"{k} {columns[k][base]}" for k in SWEPT if k != "div_latency" or applies)
             + "): max/min when one parameter alone varies",
             f"  {'parameter':<11} {'latency':>8} {'energy':>8} {'area':>8}  best energy at"]
    for row in spread:
        lines.append(f"  {row['parameter']:<11} {row['latency_s_spread']:8.3g} {row['energy_j_spread']:8.3g} "
                     f"{row['area_mm2_spread']:8.3g}  {row['energy_j_best_at']}")
    return lines


def _write_all(out: Path, result, chosen, spread, measured, problem, iso_text: str, allowed=None,
               bounds: str = "") -> None:
    """Every output file, each written under a temporary name and renamed into place only once all are done, so an
    interrupted or failed run leaves the folder as it was; a run without a sensitivity table removes an old one."""
    staged: list[tuple[Path, Path]] = []

    def stage(name: str) -> Path:
        assert name in OUTPUTS, name  # so that a later explore removes it, should this one be killed
        path = out / f".tmp-{os.getpid()}-{name}"  # the real suffix kept: matplotlib picks the format from it
        staged.append((path, out / name))
        return path

    try:
        written = as_written(result.columns)
        write_points(written, stage("points.csv"))
        with open(stage("front.csv"), "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=FRONT_COLUMNS)
            writer.writeheader()
            writer.writerows(front_rows(written, chosen))
        if spread:
            with open(stage("sensitivity.csv"), "w", newline="", encoding="utf-8") as handle:
                writer = csv.DictWriter(handle, fieldnames=list(spread[0]))
                writer.writeheader()
                writer.writerows(spread)
        stage("iso.md").write_text(iso_text, encoding="utf-8")
        say(COMMAND, "plots")
        plot_energy_latency(result.columns, chosen, measured, problem, stage("energy_latency.png"), allowed, bounds)
        plot_efficiency(result.columns, chosen, measured, problem, stage("efficiency.png"), allowed, bounds)
        for temporary, final in staged:
            os.replace(temporary, final)
        if not spread:
            (out / "sensitivity.csv").unlink(missing_ok=True)
    except OSError as exc:
        raise KbenchError(f"--out {out}: writing failed ({exc.strerror or exc}); files of an earlier run there are "
                          "unchanged") from None
    finally:
        for temporary, _ in staged:
            temporary.unlink(missing_ok=True)


#: The files `_write_all` stages as '.tmp-PID-NAME' before renaming them into place.
OUTPUTS = ("points.csv", "front.csv", "sensitivity.csv", "energy_latency.png", "efficiency.png", "iso.md")


def _remove_leftovers(out: Path) -> None:
    """Delete the staged files of an explore killed before it renamed them ('.tmp-PID-NAME'): this one holds the
    folder's lock, so no other explore is writing them."""
    for name in OUTPUTS:
        for leftover in out.glob(f".tmp-*-{name}"):
            pid = leftover.name[len(".tmp-"):-len(name) - 1]
            if pid.isdigit() and leftover.is_file() and not leftover.is_symlink():
                leftover.unlink(missing_ok=True)


def balanced(columns: dict[str, np.ndarray], chosen: list[tuple[str, np.ndarray]]) -> int | None:
    """The all-nodes front's point of least energy × latency: the base of the sensitivity table."""
    _, idx = chosen[0]
    if not len(idx):
        return None
    return int(idx[np.argmin(columns["energy_j"][idx] * columns["latency_s"][idx])])


def build_parser() -> Parser:
    parser = Parser(prog="python -m codesign explore", description=__doc__)
    parser.add_argument("--seq", type=integer("seq", 1, SEQ_MAX), default=1024, help="sequence length (default 1024)")
    parser.add_argument("--dim", type=integer("dim", 1, DIM_MAX), default=64, help="head dimension (default 64)")
    parser.add_argument("--heads", type=integer("heads", *LIMITS["heads"]), default=16,
                        help="heads, run one after another on the datapath (default 16)")
    parser.add_argument("--batch", type=integer("batch", *LIMITS["batch"]), default=1, help="batch (default 1)")
    add_shape_options(parser)
    parser.add_argument("--space", type=Path, help="TOML file of space keys replacing the defaults "
                        "(default: codesign/explore.py DEFAULT_SPACE, which lists them)")
    parser.add_argument("--technology", type=Path, help="per-action table (default codesign/technology.toml)")
    parser.add_argument("--gates", type=Path, help="gate calibration for the synthesis-based area (default "
                        "codesign/rtl_gates.toml, written by `python -m codesign synth --write-calibration`)")
    parser.add_argument("--results", type=folder, nargs="+", default=[],
                        help="host.compare --out folders whose matching rows are placed beside the ASIC points "
                             "(default: none)")
    parser.add_argument("--max-area", type=real("max-area", 1e-6, 1e6), metavar="MM2",
                        help="the largest area in mm² (table band's middle) a point may have on the fronts, the "
                             "plots, the sensitivity table and iso.md (default: any)")
    parser.add_argument("--max-power", type=real("max-power", 1e-9, 1e6), metavar="W",
                        help="the largest average power in W (energy per inference over latency) likewise "
                             "(default: any)")
    parser.add_argument("--out", type=folder, default=DEFAULT_OUT,
                        help=f"output folder (default {DEFAULT_OUT}, git-ignored); with --causal both, its "
                             "subfolders full/ and causal/")
    return parser


def _describe(problem: AttentionProblem) -> str:
    return problem_text(problem)


def explore_into(out: Path, problem: AttentionProblem, space: dict, tech: Technology, gates: GateCalibration,
                 measured: list[MeasuredPoint], left_out: list[str], max_area: float | None = None,
                 max_power: float | None = None) -> int:
    """One problem's exploration: progress on stderr (stage by stage, and the cycle model every few seconds in a
    log), the files into `out`, the report on stdout with the machine's load and anchor beside the time."""
    state = machine()
    began = time.perf_counter()
    configs, total = space_size(space)
    print(state.line())
    say(COMMAND, f"{total:,} operating points ({configs:,} cycle-model configurations) for {_describe(problem)}")
    with sweep_lock(out, COMMAND):
        _remove_leftovers(out)
        with Progress(COMMAND, "cycle model", configs, "config") as progress:
            result = explore(problem, space, tech, progress, gates)
        reasons = result.columns["skipped"]
        if len(reasons) and (reasons != "").all():  # nothing to rank or plot: the space cannot run this problem
            raise SpecError(f"--space: none of the {len(reasons):,} points can run {_describe(problem)} (the first: "
                            f"{reasons[0]}); give larger buffers_kb, a slower clock_mhz, or a smaller problem, as "
                            "the reason says")
        say(COMMAND, f"{len(result):,} points evaluated (cycles, energy, area, bits) in {result.seconds:.1f} s; "
                     "Pareto fronts and sensitivity")
        # --max-area and --max-power bound the fronts, the sensitivity table, the plots and iso.md alike
        allowed = iso.within(result.columns, max_area, max_power)
        bounds = bounds_text(max_area, max_power)
        chosen = fronts(result, allowed)
        base = balanced(result.columns, chosen)
        spread = sensitivity(result, base, allowed) if base is not None else []
        iso_text = _iso_text(result.columns, measured, problem, allowed, bounds, left_out)
        say(COMMAND, f"writing {out}")
        _write_all(out, result, chosen, spread, measured, problem, iso_text, allowed, bounds)
    skipped = int((result.columns["skipped"] != "").sum())
    print(f"{_describe(problem)}: {len(result):,} points in {state.ratio(result.seconds)} "
          f"({len(result) / result.seconds:,.0f} points/s); the whole run with fronts, files and plots "
          f"{state.ratio(time.perf_counter() - began)}; {skipped:,} points cannot run ("
          f"{skipped - sum(result.refused.values()):,} a buffer below one tile, {result.refused.get('clock', 0):,} a "
          f"clock above the node's f_max, {result.refused.get('sram_timing', 0):,} a banked buffer slower than the "
          "clock period: points.csv skipped says which)")
    print(f"cycle model (mapper included) {result.cycle_seconds:.2f} s for {result.cycle_configs:,} configurations "
          f"({result.cycle_configs / max(result.cycle_seconds, 1e-9):,.0f}/s); the rest "
          f"{result.cycle_free_points_per_s:,.0f} points/s; {result.slower_pairs:,} of {result.array_pairs:,} "
          "(smaller, bigger) array pairs with all else equal have the bigger slower (points.csv slower_than says "
          "why)")
    print(_summary(result.columns, chosen, measured, allowed, bounds))
    if spread:
        print("\n".join(_sensitivity_lines(result.columns, base, spread)))
    print(iso_text, end="")  # with the --results rows left out and why
    names = ["points.csv", "front.csv", *(["sensitivity.csv"] if spread else []), "energy_latency.png",
             "efficiency.png", "iso.md"]
    print("wrote " + ", ".join(str(out / name) for name in names)
          + ("" if spread else " (no sensitivity table: the front is empty)"))
    return 0


def _iso_text(columns, measured, problem: AttentionProblem, allowed: np.ndarray, bounds: str,
              left_out: list[str]) -> str:
    """iso.md: the points within --max-area and --max-power (the fastest and the least energy among those bit-exact
    for every input), and the iso-area and iso-power table against the --results rows (such points, at least as
    accurate as fp16 on the probe head); the rows left out of it and why (a row without an energy figure, another
    problem's)."""
    bound = iso.fp16_rel_l2(problem)
    answers = allowed & iso.exact_for_all_inputs(columns)  # a point not exact for every input is never an answer
    lines = [f"# {_describe(problem)} at equal cost", "",
             f"Points within {bounds or 'no area or power bound'}: {int(allowed.sum()):,} of {len(allowed):,}, "
             f"{int(answers.sum()):,} of them bit-exact for every input (the only ones named below)."]
    for what, metric in (("fastest", "latency_s"), ("least energy", "energy_j")):
        if answers.any():
            values = np.where(answers, columns[metric], np.inf)
            lines.append(f"- {what}: {_point_line(columns, int(np.argmin(values)))}")
    lines.append("")
    left = [f"--results: left out {line}" for line in left_out]
    if not measured:
        lines += ["No --results rows for this problem: no iso-area or iso-power comparison (give host.compare "
                  "folders holding GPU or MCU rows of the same shape, each with its latency and energy).", "",
                  *left, *([""] if left else [])]
        return "\n".join(lines)
    share = iso.share_for(columns, problem)
    rows = iso.compare(columns, measured, problem, bound, allowed, share)
    shared = iso.units(problem)
    cost = (f"\nEach copy's latency is the cycle model's for its share of the problem's {shared} independent "
            f"unit{'s' if shared > 1 else ''} (K/V groups, or heads) under its best mapping: {share.evaluations} "
            f"model runs, {share.seconds:.2g} s.\n")
    return ("\n".join(lines) + iso.table(rows, columns, bound) + cost
            + "".join(f"\n{line}\n" for line in left))


def main(argv: list[str]) -> int:
    terminate_on_sigterm()  # a killed explore releases its lock and temporary files, as Ctrl-C does
    parser = build_parser()
    args = parser.parse_args(argv)
    if listed(args, parser, argv):
        return 0
    problems = problems_of(args, parser, argv)
    tech = Technology.load(args.technology)
    gates = GateCalibration.load(args.gates)
    space = load_space(args.space, tech)
    results = list(dict.fromkeys(args.results))
    rows = [load(results, problem) for problem in problems]  # refuse a bad --results before the long work
    outs = [args.out] if len(problems) == 1 else [args.out / ("causal" if p.causal else "full") for p in problems]
    outs = [output_folder(out) for out in outs]
    for problem, (measured, left_out), out in zip(problems, rows, outs):
        code = guard(functools.partial(explore_into, out, problem, space, tech, gates, measured, left_out,
                                       args.max_area, args.max_power),
                     interrupted=f"nothing written to {out} (files of an earlier run there are unchanged)")
        if code:
            return code
    return 0


if __name__ == "__main__":  # `python -m codesign.explore_cli` runs `python -m codesign explore`
    from codesign.__main__ import run_as

    run_as("explore")
