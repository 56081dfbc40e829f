"""`python -m codesign synth [--array 8x8] [--acc-bits 40] [--units mac,array,...] [--write-calibration [PATH]]`:
synthesise the datapath's RTL units with Yosys (codesign/rtl/synth.py) and print their NAND2 gate equivalents: the
MAC cell at 24-, 32-, 40- and 48-bit accumulators, the EXP2 unit, the divider, the score and rescale units, and the
systolic array at 4×4 and at --array, with the array's GE per cell beside the MAC cell's (the scaling check) and
the seconds each synthesis took. --write-calibration synthesises what the explorer's synthesis-based area needs and
writes it as TOML (default codesign/rtl_gates.toml; codesign/technology.py reads it). The machine's load average and
a numpy matmul anchor, measured before the first synthesis, are printed beside the seconds (codesign/console.py).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from codesign.console import machine as machine_state
from codesign.datapath import ACC_BITS_MAX, ACC_BITS_MIN, OUTPUT_ACC_BITS, Datapath, array_shape
from codesign.rtl import available
from codesign.rtl.synth import ABC_GATES, DEFAULT_TIMEOUT_S, WEIGHTS, Synthesis, synthesize, yosys_missing
from host.cli_common import Parser, integer, name_list, real
from host.errors import SpecError, TargetError, UnavailableError
from host.target_api import cpu_model

#: unit kind → (module, class): the units of codesign/rtl/ this command synthesises.
UNIT_KINDS = {
    "mac": ("codesign.rtl.mac", "MacCell"),
    "exp2": ("codesign.rtl.exp2", "Exp2Unit"),
    "divider": ("codesign.rtl.divider", "Divider"),
    "score": ("codesign.rtl.score", "ScoreUnit"),
    "rescale": ("codesign.rtl.rescale", "RescaleUnit"),
    "array": ("codesign.rtl.array", "SystolicArray"),
    "parallel": ("codesign.rtl.parallel", "ParallelDatapath"),
}
#: The parallel-array datapath synthesised: two copies of a 4×4 array with one softmax lane and one divider each,
#: held to twice the sum of those units synthesised alone (the explorer counts P arrays as P datapaths).
PARALLEL = {"count": 2, "rows": 4, "cols": 4, "lanes": 1, "dividers": 1}
#: Accumulator widths of the table's MAC cells, and of the calibration's MAC cells and score units (every 8 bits
#: across codesign.datapath's 16..64, so the explorer interpolates between neighbours at most 8 bits apart).
TABLE_ACC_BITS = (24, 32, 40, 48)
CALIBRATION_ACC_BITS = tuple(range(ACC_BITS_MIN, ACC_BITS_MAX + 1, 8))
#: The arrays synthesised: this small one always, and --array; larger than MAX_ARRAY_CELLS cells is refused (Yosys
#: takes about a second per cell).
SMALL_ARRAY = (4, 4)
MAX_ARRAY_CELLS = 256
DIV_LATENCY = Datapath().div_latency
CALIBRATION = Path(__file__).resolve().parent.parent / "rtl_gates.toml"


@dataclass(frozen=True)
class Job:
    """One unit to synthesise: its kind, the constructor's keyword arguments, and a label for the table."""

    kind: str
    label: str
    arguments: tuple = ()  # (name, value) pairs: a tuple, so a Job is hashable

    @property
    def params(self) -> dict:
        return dict(self.arguments)

    @property
    def top(self) -> str:
        return "_".join([self.kind, *(str(v) for _, v in self.arguments)])

    @property
    def cells_in_array(self) -> int:
        return self.params["rows"] * self.params["cols"] if self.kind == "array" else 1


def make_job(kind: str, label: str, **params) -> Job:
    return Job(kind, label, tuple(params.items()))


def build(job: Job):
    """The unit of `job` (its module imported here: Amaranth only once the command runs)."""
    module_name, class_name = UNIT_KINDS[job.kind]
    return getattr(importlib.import_module(module_name), class_name)(**job.params)


def table_jobs(kinds: tuple[str, ...], array: tuple[int, int], acc_bits: int) -> list[Job]:
    jobs = []
    if "mac" in kinds:
        widths = sorted({*TABLE_ACC_BITS, acc_bits})
        jobs += [make_job("mac", f"MAC cell acc {bits}", acc_bits=bits) for bits in widths]
    if "exp2" in kinds:
        jobs.append(make_job("exp2", "EXP2 unit"))
    if "divider" in kinds:
        jobs.append(make_job("divider", f"divider latency {DIV_LATENCY}", latency=DIV_LATENCY))
    if "score" in kinds:
        jobs.append(make_job("score", f"score unit acc {acc_bits}", acc_bits=acc_bits))
    if "rescale" in kinds:
        jobs.append(make_job("rescale", f"rescale unit {OUTPUT_ACC_BITS}-bit", width=OUTPUT_ACC_BITS))
    if "array" in kinds:
        for rows, cols in sorted({SMALL_ARRAY, array}):
            jobs.append(make_job("array", f"array {rows}x{cols} acc {acc_bits}",
                            rows=rows, cols=cols, acc_bits=acc_bits))
    if "parallel" in kinds:
        p = PARALLEL
        label = f"{p['count']} datapaths {p['rows']}x{p['cols']} E{p['lanes']} D{p['dividers']}"
        jobs.append(make_job("parallel", label, **p, acc_bits=acc_bits, latency=DIV_LATENCY))
    return jobs


def calibration_jobs(array: tuple[int, int], acc_bits: int) -> list[Job]:
    jobs = [make_job("mac", f"MAC cell acc {bits} {overflow}", acc_bits=bits, overflow=overflow)
            for overflow in ("wrap", "saturate") for bits in CALIBRATION_ACC_BITS]
    jobs += [make_job("score", f"score unit acc {bits}", acc_bits=bits) for bits in CALIBRATION_ACC_BITS]
    jobs += [make_job("exp2", "EXP2 unit"), make_job("divider", f"divider latency {DIV_LATENCY}", latency=DIV_LATENCY),
             make_job("rescale", f"rescale unit {OUTPUT_ACC_BITS}-bit", width=OUTPUT_ACC_BITS)]
    jobs += [make_job("array", f"array {rows}x{cols} acc {acc_bits}", rows=rows, cols=cols, acc_bits=acc_bits)
             for rows, cols in sorted({SMALL_ARRAY, array})]
    return jobs


def run_jobs(jobs: list[Job], timeout_s: float) -> dict[Job, Synthesis | TargetError]:
    """Each job's synthesis, or why it has none: its synthesis failed (TargetError; the other units still run);
    progress on stderr. Ctrl-C (or SIGTERM, see `_term_as_interrupt`) stops it with the
    units done so far: fewer results than jobs."""
    results: dict[Job, Synthesis | TargetError] = {}
    try:
        for number, job in enumerate(jobs, 1):
            print(f"synth [{number}/{len(jobs)}] {job.label} ...", file=sys.stderr, flush=True)
            try:
                done = synthesize(build(job), job.top, timeout_s)
            except TargetError as exc:
                results[job] = exc
                print(f"  {exc}", file=sys.stderr, flush=True)
                continue
            results[job] = done
            print(f"  {done.ge:,.0f} GE in {done.seconds:.1f} s", file=sys.stderr, flush=True)
    except KeyboardInterrupt:  # subprocess.run has killed Yosys and the temporary folder is gone
        print("  stopped", file=sys.stderr, flush=True)
    return results


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM stops the synthesis like Ctrl-C."""
    raise KeyboardInterrupt


@contextlib.contextmanager
def _term_as_interrupt():
    """SIGTERM (and Ctrl-C, even where a shell ignored SIGINT) raise KeyboardInterrupt while the units synthesise,
    so Yosys is killed, its folder removed and the units done so far printed."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt), signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])


def _mac_of(results: dict, acc_bits: int) -> Synthesis | None:
    for job, done in results.items():
        if job.kind == "mac" and job.params.get("acc_bits") == acc_bits and \
                job.params.get("overflow", "wrap") == "wrap" and isinstance(done, Synthesis):
            return done
    return None


def format_table(results: dict[Job, Synthesis | TargetError]) -> str:
    header = (f"{'unit':<26} {'cells':>8} {'flip-flops':>10} {'GE':>10} {'GE/cell':>9} {'÷ MAC cell':>10} "
              f"{'export s':>8} {'yosys s':>8}")
    lines = [header, "-" * len(header)]
    for job, done in results.items():
        if not isinstance(done, Synthesis):
            lines.append(f"{job.label:<26} {done}")
            continue
        per_cell, ratio = "", ""
        if job.kind == "array":
            cell_ge = done.ge / job.cells_in_array
            per_cell = f"{cell_ge:,.0f}"
            mac = _mac_of(results, job.params["acc_bits"])
            ratio = f"{cell_ge / mac.ge:.3f}" if mac is not None else "no MAC"
        lines.append(f"{job.label:<26} {sum(done.cells.values()):>8,} {done.flip_flops:>10,} {done.ge:>10,.0f} "
                     f"{per_cell:>9} {ratio:>10} {done.export_seconds:>8.1f} {done.yosys_seconds:>8.1f}")
    lines += [parallel_line(job, done, results) for job, done in results.items()
              if job.kind == "parallel" and isinstance(done, Synthesis)]
    return "\n".join(lines)


def parallel_line(job: Job, done: Synthesis, results: dict[Job, Synthesis | TargetError]) -> str:
    """The parallel-array datapath's GE against its copies × the GE of its units synthesised alone in this run."""
    p = job.params

    def alone(kind: str, **params) -> float | None:
        return next((one.ge for other, one in results.items() if other.kind == kind and isinstance(one, Synthesis)
                     and all(other.params.get(k) == v for k, v in params.items())), None)

    parts = {"array": alone("array", rows=p["rows"], cols=p["cols"], acc_bits=p["acc_bits"]),
             "score": alone("score", acc_bits=p["acc_bits"]), "exp2": alone("exp2"), "rescale": alone("rescale"),
             "divider": alone("divider", latency=p["latency"])}
    missing = [name for name, ge in parts.items() if ge is None]
    if missing:
        return f"{job.label}: no ratio to its units ({', '.join(missing)} not synthesised in this run)"
    one = parts["array"] + p["lanes"] * (parts["score"] + parts["exp2"] + parts["rescale"]) \
        + p["dividers"] * parts["divider"]
    return (f"{job.label}: {done.ge:,.0f} GE = {done.ge / (p['count'] * one):.4f} x {p['count']} x its units alone "
            f"({one:,.0f} GE: array + {p['lanes']} x (score + EXP2 + rescale) + {p['dividers']} x divider)")


def yosys_version() -> str:
    done = subprocess.run(["yosys", "-V"], capture_output=True, text=True, timeout=60)
    return done.stdout.strip()


def machine() -> str:
    """Host name, CPU model and core count (the synthesis seconds depend on them)."""
    return f"{platform.node()}, {cpu_model()}, {os.cpu_count()} cores"


def environment() -> dict[str, str]:
    from importlib.metadata import version

    return {"yosys": yosys_version(), "amaranth": version("amaranth"), "machine": machine(),
            "written_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def _numbers(values) -> str:
    return "[" + ", ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in values) + "]"


def calibration_text(results: dict[Job, Synthesis | TargetError], command: str,
                     env: dict[str, str]) -> str:
    """The calibration file: every job's GE, by kind, as TOML; UnavailableError when one of them failed."""
    missing = [f"{job.label}: {done}" for job, done in results.items() if not isinstance(done, Synthesis)]
    if missing:
        raise UnavailableError(f"--write-calibration needs every unit; {'; '.join(missing)}")

    def ge(kind: str, **params) -> float:
        return next(done.ge for job, done in results.items()
                    if job.kind == kind and all(job.params.get(k) == v for k, v in params.items()))

    arrays = [job for job in results if job.kind == "array"]
    lines = [
        "# NAND2 gate equivalents (GE) of the datapath's RTL units (codesign/rtl/), synthesised with Yosys by",
        "# codesign/rtl/synth.py: generic synthesis, flip-flops made plain D flip-flops, logic mapped by ABC to",
        f"# {ABC_GATES} and NOT, cells weighted by NanGate FreePDK45 areas over NAND2_X1 (synth.py WEIGHTS).",
        "# codesign/technology.py (GateCalibration) reads it for the explorer's synthesis-based area. Written by a",
        "# tool: regenerate it with the command below rather than editing it.",
        f"command = {json.dumps(command)}",  # a JSON string is a TOML basic string, whatever the path holds
        *(f"{key} = {json.dumps(value)}" for key, value in env.items()),
        "",
        "[mac]  # one MacCell by accumulator width, wrapping and saturating",
        f"acc_bits = {_numbers(CALIBRATION_ACC_BITS)}",
        f"wrap = {_numbers([ge('mac', acc_bits=b, overflow='wrap') for b in CALIBRATION_ACC_BITS])}",
        f"saturate = {_numbers([ge('mac', acc_bits=b, overflow='saturate') for b in CALIBRATION_ACC_BITS])}",
        "",
        "[score]  # one ScoreUnit lane by the width of the accumulator it scales",
        f"acc_bits = {_numbers(CALIBRATION_ACC_BITS)}",
        f"ge = {_numbers([ge('score', acc_bits=b) for b in CALIBRATION_ACC_BITS])}",
        "",
        "[exp2]  # one Exp2Unit lane",
        f"ge = {ge('exp2'):.3f}",
        "",
        "[divider]  # one Divider at the datapath's default latency",
        f"latency = {DIV_LATENCY}",
        f"ge = {ge('divider', latency=DIV_LATENCY):.3f}",
        "",
        f"[rescale]  # one RescaleUnit lane on the {OUTPUT_ACC_BITS}-bit output accumulators",
        f"width = {OUTPUT_ACC_BITS}",
        f"ge = {ge('rescale', width=OUTPUT_ACC_BITS):.3f}",
        "",
        "[array]  # whole SystolicArrays (wrap): their GE over rows × cols × the MAC cell's is the array's overhead",
        f"rows = {_numbers([job.params['rows'] for job in arrays])}",
        f"cols = {_numbers([job.params['cols'] for job in arrays])}",
        f"acc_bits = {_numbers([job.params['acc_bits'] for job in arrays])}",
        f"ge = {_numbers([results[job].ge for job in arrays])}",
    ]
    return "\n".join(lines) + "\n"


def calibration_path(text: str) -> Path:
    """An argparse type: the calibration file's path (an empty one is refused rather than read as '.')."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is empty; allowed: a file path in an existing, writable folder")
    return Path(text)


def staged_path(path: Path) -> Path:
    """Where the calibration is written before it replaces `path` (so a reader never sees half of it)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def discard(staged: Path) -> None:
    """Remove a staging file if there is one; a failure here (EROFS, EACCES: the same cause as the write's) is
    dropped, so the write's own one-line error is the one reported."""
    with contextlib.suppress(OSError):
        staged.unlink(missing_ok=True)


def check_writable(path: Path) -> None:
    """SpecError unless a file can be made beside `path` (made and removed now, before the long work: os.access
    says yes to root and to read-only file systems alike)."""
    staged = staged_path(path)
    try:
        staged.write_text("")
    except OSError as exc:
        raise SpecError(f"--write-calibration {path}: cannot write a file there ({exc.strerror or exc}); allowed: a "
                        "file path in an existing, writable folder") from None
    finally:
        discard(staged)


def build_parser() -> Parser:
    parser = Parser(prog="python -m codesign synth", description=__doc__)
    parser.add_argument("--array", type=array_shape, default=(8, 8),
                        help=f"the larger array to synthesise, RxC (default 8x8; at most {MAX_ARRAY_CELLS} cells)")
    parser.add_argument("--acc-bits", type=integer("acc-bits", ACC_BITS_MIN, ACC_BITS_MAX), default=40,
                        help="accumulator bits of the arrays and the score unit (default 40)")
    parser.add_argument("--units", type=name_list, default=tuple(UNIT_KINDS),
                        help=f"comma-separated kinds to synthesise (default all: {','.join(UNIT_KINDS)})")
    parser.add_argument("--timeout", type=real("timeout", 1, 86_400), default=DEFAULT_TIMEOUT_S,
                        help=f"seconds one synthesis may take (default {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--write-calibration", type=calibration_path, nargs="?", const=CALIBRATION, metavar="PATH",
                        help="synthesise the explorer's calibration set and write it (default: not written; "
                             "PATH left out: codesign/rtl_gates.toml)")
    return parser


def check_arguments(args: argparse.Namespace) -> None:
    """SpecError in one line for what the parser cannot see (unknown units, too large an array, an unwritable
    calibration); UnavailableError when Amaranth or yosys is missing. All before the long work."""
    unknown = [kind for kind in args.units if kind not in UNIT_KINDS]
    if unknown:
        raise SpecError(f"--units {unknown[0]!r} is unknown; allowed: {', '.join(UNIT_KINDS)}")
    rows, cols = args.array
    if rows * cols > MAX_ARRAY_CELLS:
        raise SpecError(f"--array {rows}x{cols} has {rows * cols} cells; allowed: up to {MAX_ARRAY_CELLS} "
                        "(Yosys takes about a second per cell)")
    if args.write_calibration is not None:
        if tuple(args.units) != tuple(UNIT_KINDS):
            raise SpecError("--write-calibration synthesises every unit kind; leave out --units")
        if args.write_calibration.is_dir():
            raise SpecError(f"--write-calibration {args.write_calibration}: cannot write a file there; allowed: a "
                            "file path in an existing, writable folder")
        check_writable(args.write_calibration)
    for reason in (available()[1], yosys_missing()):
        if reason:
            raise UnavailableError(reason)


def write_calibration(path: Path, results: dict[Job, Synthesis | TargetError], argv: list[str],
                      env: dict[str, str]) -> None:
    """The calibration file at `path`, staged and renamed so a reader never sees half of it."""
    command = shlex.join(["python", "-m", "codesign", "synth", *argv])  # to run again as it stands
    text = calibration_text(results, command, env)
    staged = staged_path(path)
    try:
        staged.write_text(text)
        os.replace(staged, path)
    except OSError as exc:
        raise SpecError(f"--write-calibration {path}: cannot write it ({exc.strerror or exc})") from None
    finally:
        discard(staged)
    print(f"wrote {path}")


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    check_arguments(args)
    if args.write_calibration is not None:
        jobs = calibration_jobs(args.array, args.acc_bits)
    else:
        jobs = table_jobs(tuple(args.units), args.array, args.acc_bits)
    state = machine_state()
    with _term_as_interrupt():
        results = run_jobs(jobs, args.timeout)
    stopped = "" if len(results) == len(jobs) else (
        f"kbench: interrupted after {len(results)} of {len(jobs)} units"
        + (" (the table has them)" if results else "")
        + ("; no calibration written" if args.write_calibration is not None else ""))
    if not results:
        print(stopped, file=sys.stderr)
        return 130
    env = environment()
    print(f"NAND2 gate equivalents from {env['yosys']} (generic synthesis, ABC to {ABC_GATES} and NOT); weights: "
          + ", ".join(f"{cell.strip('$_')} {weight:.3g}" for cell, weight in WEIGHTS.items()))
    print(state.line())
    print(format_table(results))
    synthesised = [done for done in results.values() if isinstance(done, Synthesis)]
    total = sum(done.seconds for done in synthesised)
    print(f"{len(results)} units, {len(synthesised)} synthesised" + (
        f" in {state.ratio(total)} on {env['machine']}" if synthesised else " (no time to give: every one failed)"))
    if stopped:
        print(stopped, file=sys.stderr)
        return 130
    failed = [f"{job.label}: {done}" for job, done in results.items() if isinstance(done, TargetError)]
    if failed and args.write_calibration is None:
        raise TargetError(f"{len(failed)} of {len(jobs)} units failed (the table has the others); {failed[0]}")
    if args.write_calibration is not None:
        write_calibration(args.write_calibration, results, argv, env)
    return 0


if __name__ == "__main__":  # `python -m codesign.rtl.synth_cli` runs `python -m codesign synth`
    from codesign.__main__ import run_as

    run_as("synth")
