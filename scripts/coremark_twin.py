"""CoreMark on the board twin's emulated Cortex-M4: holds the twin's cycle model (mcu/sim/q15emu.py) to an
independent benchmark with published Cortex-M4 scores.

    python scripts/coremark_twin.py --coremark /path/to/coremark [--iterations N|auto] [--opt=-O2] [--out DIR]

The CoreMark sources stay outside this project (take them from github.com/eembc/coremark); nothing of them is
copied here. This script writes a bare-metal port of its own (core_portme.h/.c below, written from CoreMark's
porting rules: the types, timer, seed and output hooks that coremark.h asks for) and a linker script into a scratch
build folder, checks CoreMark's own sources against its coremark.md5 (its `make check`: only the port may change),
builds them with arm-none-eabi-gcc for the Cortex-M4, loads the image into SRAM of the twin's emulator
(`mcu.sim.q15emu.CortexM4`, the core behind `q15attn`) and calls the port's entry point once per seed set:

- timing: the port reads DWT_CYCCNT around CoreMark's timed loop, as a board port would; on the twin CYCCNT is the
  cycle model's count. CoreMark/MHz = iterations × 1e6 / ticks, whatever the clock; `--clock` only sets the seconds
  CoreMark prints (and its 10-second rule, which a run must meet for "Correct operation validated").
- output: ee_printf formats into a buffer in emulated SRAM that the script reads back and prints.
- seeds: volatile variables (SEED_VOLATILE) set from the entry point's arguments at run time: 0,0,0x66 (the
  performance run) and 0x3415,0x3415,0x66 (the validation run), both with 2000 bytes of data, as CoreMark's
  README requires of a reported score.
- iterations: `auto` (the default) times 10 iterations first and then runs enough for 10.5 s of modelled time, as
  CoreMark's rules require (4,230 at -O2: 3-5 minutes of emulation per seed set on a 2-core VM). A shorter run
  (`--iterations 100`, a few seconds) passes every CRC check and gives CoreMark/MHz within 0.01 %, but CoreMark
  itself then prints its 10-second error instead of "Correct operation validated".

`--out DIR` keeps the raw console reports, the build and run commands, the compiler version and a JSON summary.

Exit status: 0 every run passed CoreMark's checks (its CRCs and known seeds; "Correct operation validated" too when
the run was long enough); 1 one did not, or the toolchain is missing, the build or a run failed; 2 bad arguments
only (a --coremark folder that is not CoreMark's unchanged sources, an unusable --out or --build: one
`kbench: error:` line naming the value); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the twin's emulator is the project's own

from host.cli_common import Parser, folder, guard, integer, output_folder, real  # noqa: E402
from host.errors import SpecError, TargetError, UnavailableError  # noqa: E402

CROSS = "arm-none-eabi-"
CPU_FLAGS = ("-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16")
WARNINGS = ("-Wall",)
#: The toolchain's newlib for memset (GCC turns core_state.c's zeroing loops into memset calls, inside the timed
#: loop, as on a board built with this toolchain) and libgcc for the double arithmetic of the report.
LIBRARIES = ("-lc", "-lgcc")
CORE_SOURCES = ("core_list_join.c", "core_main.c", "core_matrix.c", "core_state.c", "core_util.c")
#: SRAM the image may use: the F407's 128 KB less the 8 KB stack the emulator keeps at the top (q15emu.STACK_BYTES).
IMAGE_BYTES = (128 - 8) << 10
#: Seed sets of CoreMark's README ("Submitting results", rule 2).
SEEDS = {"performance": (0, 0, 0x66), "validation": (0x3415, 0x3415, 0x66)}
#: CoreMark's rule: a reported run lasts at least 10 s; `auto` aims a little above it (modelled seconds).
MINIMUM_SECONDS = 10.0
AUTO_SECONDS = 10.5
PROBE_ITERATIONS = 10
VALIDATED = "Correct operation validated."
TOO_SHORT = "ERROR! Must execute for at least 10 secs for a valid result!"
#: The line core_main.c prints when it recognises each seed set (with 2000 bytes of data, 666 per algorithm).
KNOWN_SEEDS = {"performance": "2K performance run parameters for coremark.",
               "validation": "2K validation run parameters for coremark."}

#: Our bare-metal port (core_portme.h, core_portme.c), copied into the build folder beside CoreMark's sources.
PORT_DIR = Path(__file__).resolve().parent / "coremark_port"

LINKER_SCRIPT = f"""/* Everything in SRAM, where the twin runs code (the board runs a natmod from SRAM too). */
ENTRY(kbench_coremark)
MEMORY {{ SRAM (rwx) : ORIGIN = 0x20000000, LENGTH = {IMAGE_BYTES} }}
SECTIONS
{{
    .text : {{ *(.text .text.*) *(.rodata .rodata.*) }} > SRAM
    .ARM.exidx : {{ *(.ARM.exidx .ARM.exidx.*) }} > SRAM
    .data : {{ *(.data .data.*) }} > SRAM
    .bss : {{ *(.bss .bss.* COMMON) }} > SRAM
}}
"""


@dataclass(frozen=True)
class Build:
    elf: Path
    compile_flags: tuple[str, ...]
    link_flags: tuple[str, ...]
    commands: tuple[str, ...]
    compiler: str
    text_bytes: int  # code and read-only data


@dataclass(frozen=True)
class Run:
    seeds: str
    iterations: int
    ticks: int  # DWT cycles of the timed loop, as CoreMark's report prints them
    seconds: float  # ticks / clock: CoreMark's "Total time"
    coremark_per_mhz: float
    checks_passed: bool  # CoreMark recognised the seeds and found no error but, for a short run, the 10 s rule
    validated: bool  # CoreMark printed "Correct operation validated."
    errors: list[str]  # CoreMark's ERROR lines
    call_cycles: int  # the whole call (init, timed loop, report) by the cycle model
    instructions: int
    wall_s: float
    report: str


def check_sources(coremark: Path) -> list[str]:
    """CoreMark's own `make check`: its files must equal coremark.md5 (only core_portme* may differ)."""
    listing = coremark / "coremark.md5"
    if not listing.is_file():
        raise SpecError(f"--coremark {coremark} is not a CoreMark folder: no coremark.md5 (get "
                        "github.com/eembc/coremark)")
    lines = []
    for line in listing.read_text().splitlines():
        if not line.strip():
            continue
        digest, name = line.split()
        path = coremark / name
        if not path.is_file():
            raise SpecError(f"--coremark {coremark}: {path} is missing")
        actual = hashlib.md5(path.read_bytes()).hexdigest()
        if actual != digest:
            raise SpecError(f"--coremark {coremark}: {path} differs from coremark.md5 ({actual} != {digest}): "
                            "CoreMark's rules allow "
                             "changes to core_portme* only")
        lines.append(f"{name}: OK ({digest})")
    return lines


def tool(name: str) -> str:
    path = shutil.which(CROSS + name)
    if path is None:
        raise UnavailableError(f"{CROSS}{name} not found (Debian: apt-get install gcc-arm-none-eabi)")
    return path


def build(coremark: Path, folder: Path, opt: tuple[str, ...], clock_hz: int) -> Build:
    """Write the port into `folder` and build CoreMark there; returns the ELF and the exact commands."""
    gcc = tool("gcc")
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("core_portme.h", "core_portme.c"):
        (folder / name).write_text((PORT_DIR / name).read_text())
    (folder / "coremark.ld").write_text(LINKER_SCRIPT)
    flags_text = " ".join((*opt, *CPU_FLAGS))
    compile_flags = (*opt, *CPU_FLAGS, *WARNINGS)
    defines = (f"-DKBENCH_CLOCK_HZ={clock_hz}", f'-DKBENCH_COMPILER_FLAGS="{flags_text}"')
    commands, objects = [], []
    for source in (*(coremark / name for name in CORE_SOURCES), folder / "core_portme.c"):
        obj = folder / (source.stem + ".o")
        command = [gcc, *compile_flags, *defines, f"-I{folder}", f"-I{coremark}", "-c", str(source), "-o", str(obj)]
        run_tool(command)
        commands.append(command)
        objects.append(obj)
    elf = folder / "coremark.elf"
    link_flags = (*opt, *CPU_FLAGS, "-nostdlib", "-nostartfiles", f"-T{folder / 'coremark.ld'}")
    command = [gcc, *link_flags, *map(str, objects), *LIBRARIES, "-o", str(elf)]
    run_tool(command)
    commands.append(command)
    undefined = subprocess.run([tool("nm"), "-u", str(elf)], capture_output=True, text=True, check=True).stdout
    if undefined.strip():
        raise TargetError(f"{elf} has undefined symbols: {undefined.split()}")
    sizes = subprocess.run([tool("size"), "-A", str(elf)], capture_output=True, text=True, check=True).stdout
    text_bytes = sum(int(m.group(1)) for m in re.finditer(r"^\.text\s+(\d+)", sizes, re.M))
    version = subprocess.run([gcc, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    return Build(elf, (*compile_flags, *defines), link_flags, tuple(shlex.join(c) for c in commands), version,
                 text_bytes)


def run_tool(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise TargetError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr}")


def parse_report(report: str) -> tuple[int, int, list[str]]:
    """(iterations, total ticks, ERROR lines) from CoreMark's console report."""
    ticks = re.search(r"^Total ticks\s*:\s*(\d+)", report, re.M)
    iterations = re.search(r"^Iterations\s*:\s*(\d+)", report, re.M)
    if ticks is None or iterations is None:
        raise TargetError(f"CoreMark's report lacks its ticks or iterations:\n{report}")
    errors = [line for line in report.splitlines() if "ERROR" in line]
    return int(iterations.group(1)), int(ticks.group(1)), errors


def run(elf: Path, seeds: str, iterations: int, clock_hz: int, timeout_s: float) -> Run:
    """One CoreMark run on a fresh emulated core; the report is read back from emulated SRAM."""
    from mcu.sim.q15emu import CortexM4

    cpu = CortexM4(elf)
    length, stats = cpu.call("kbench_coremark", *SEEDS[seeds], iterations, timeout_s=timeout_s)
    console, _ = cpu.call("kbench_console_address")
    report = cpu.read(console, length).decode("ascii", "replace")
    counted, ticks, errors = parse_report(report)
    if stats.cycles >= 1 << 32:
        raise TargetError(f"the run took {stats.cycles} cycles: DWT_CYCCNT wrapped (2^32); use fewer iterations")
    timed, _ = cpu.call("kbench_timed_ticks")
    if (timed & 0xFFFFFFFF) != ticks:
        raise TargetError(f"the report's ticks ({ticks}) differ from the port's DWT reading ({timed})")
    seconds = ticks / clock_hz
    allowed = [TOO_SHORT] if seconds < MINIMUM_SECONDS else []
    checks_passed = KNOWN_SEEDS[seeds] in report and all(line in allowed for line in errors)
    return Run(seeds=seeds, iterations=counted, ticks=ticks, seconds=round(seconds, 4),
               coremark_per_mhz=counted * 1e6 / ticks, checks_passed=checks_passed, validated=VALIDATED in report,
               errors=errors, call_cycles=stats.cycles, instructions=stats.instructions, wall_s=round(stats.wall_s, 2),
               report=report)


def auto_iterations(elf: Path, clock_hz: int, timeout_s: float) -> int:
    """Iterations for AUTO_SECONDS of modelled time, from a PROBE_ITERATIONS run (CoreMark's own auto mode would
    emulate 10, 100 and 1000 iterations first)."""
    probe = run(elf, "performance", PROBE_ITERATIONS, clock_hz, timeout_s)
    return -(-int(AUTO_SECONDS * clock_hz * probe.iterations) // probe.ticks)


#: What the model's cost table does not charge, per occurrence (Cortex-M4 TRM, "Load/store timings"; the same
#: text is in TI's CC13x2/CC26x2 manual SWCU192, "Arm Cortex-M4F instruction set"), and what it charges differently.
LACKS = {
    "address_from_alu": "load/store whose address register the previous instruction computed (ALU): +1 stall, no "
                        "forwarding path",
    "address_from_load": "load/store right after a load whose result forms its address: not pipelined, +1 (the "
                         "model pipelines every load after a load)",
    "store_after_load": "store right after a load: pipelined on silicon, -1 (the model pipelines load after load only)",
    "table_branch": "TBB/TBH: >= 6 cycles on silicon (2 load, 1 add, 3 refill), 3 in the model: +3",
    "literal_load": "LDR Rx,[PC,#imm]: may add a cycle (contention with instruction fetch): 0..+1",
}


@dataclass(frozen=True)
class Breakdown:
    cycles: int  # the model's total for the call, recomputed from the counts (must equal the emulator's)
    by_class: dict[str, int]  # cycles by instruction class, refills apart
    instructions: dict[str, int]  # executed instructions by class
    refills: int  # taken branches (block entries away from the fall-through), 2 cycles each in the model
    divides: int
    lacks: dict[str, int]  # occurrences of each LACKS effect


def instruction_class(name: str) -> str:
    from mcu.sim.q15emu import LOAD_MNEMONICS, STORE_MNEMONICS

    if name in ("push", "pop", "ldm", "ldmia", "ldmdb", "stm", "stmia", "stmdb", "vpush", "vpop"):
        return "load/store multiple"
    if name in LOAD_MNEMONICS or name == "ldrd":
        return "load"
    if name in STORE_MNEMONICS or name == "strd":
        return "store"
    if name in ("sdiv", "udiv"):
        return "divide"
    if name in ("b", "bl", "bx", "blx", "cbz", "cbnz", "tbb", "tbh"):
        return "branch"
    if name.startswith("v"):
        return "vfp"
    if name.startswith(("mul", "mla", "mls", "smul", "umul", "smla", "umla", "smlal", "smus", "smuad")):
        return "multiply"
    return "alu"


def loaded_registers(insn, arm_const) -> set[int]:
    """The registers a load writes with loaded data (those before its memory operand), not a written-back base."""
    registers = set()
    for op in insn.operands:
        if op.type == arm_const.ARM_OP_MEM:
            break
        if op.type == arm_const.ARM_OP_REG:
            registers.add(op.reg)
    return registers


def breakdown(elf: Path, seeds: str, iterations: int, timeout_s: float) -> Breakdown:
    """Run once more with a second block hook that counts executions, then cost every executed instruction with the
    model's own table (mcu.sim.q15emu.instruction_cycles) and count what the table leaves out (LACKS)."""
    import capstone
    from capstone import arm_const
    from unicorn import UC_HOOK_BLOCK

    from mcu.sim.q15emu import LOAD_MNEMONICS, STORE_MNEMONICS, TAKEN_BRANCH_REFILL, CortexM4, base_mnemonic, \
        instruction_cycles

    cpu = CortexM4(elf)
    counts: dict[tuple[int, int], int] = {}
    state = {"end": None, "refills": 0}

    def on_block(uc, address, size, user_data):
        counts[(address, size)] = counts.get((address, size), 0) + 1
        if state["end"] is not None and address != state["end"]:
            state["refills"] += 1
        state["end"] = address + size

    cpu.uc.hook_add(UC_HOOK_BLOCK, on_block)
    _, stats = cpu.call("kbench_coremark", *SEEDS[seeds], iterations, timeout_s=timeout_s)
    disasm = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB | capstone.CS_MODE_MCLASS)
    disasm.detail = True
    by_class: dict[str, int] = {}
    executed: dict[str, int] = {}
    lacks = dict.fromkeys(LACKS, 0)
    divides = 0
    for (address, size), count in counts.items():
        previous_load, previous = False, None
        for insn in disasm.disasm(cpu.read(address, size), address):
            name = base_mnemonic(insn.mnemonic)
            kind = instruction_class(name)
            cost = instruction_cycles(insn.mnemonic, insn.op_str, previous_load)
            by_class[kind] = by_class.get(kind, 0) + cost * count
            executed[kind] = executed.get(kind, 0) + count
            divides += count * (kind == "divide")
            memory = [op.mem for op in insn.operands if op.type == arm_const.ARM_OP_MEM]
            address_registers = {r for m in memory for r in (m.base, m.index) if r}
            if previous is not None and memory:
                previous_name = base_mnemonic(previous.mnemonic)
                if previous_name in LOAD_MNEMONICS:
                    if loaded_registers(previous, arm_const) & address_registers:
                        lacks["address_from_load"] += count * (name in LOAD_MNEMONICS)
                    elif name in STORE_MNEMONICS:
                        lacks["store_after_load"] += count
                elif (instruction_class(previous_name) in ("alu", "multiply")
                      and set(previous.regs_access()[1]) & address_registers):
                    lacks["address_from_alu"] += count
            if name in ("tbb", "tbh"):
                lacks["table_branch"] += count
            if name in LOAD_MNEMONICS and arm_const.ARM_REG_PC in address_registers:
                lacks["literal_load"] += count
            previous_load = name in LOAD_MNEMONICS
            previous = insn
    total = sum(by_class.values()) + TAKEN_BRANCH_REFILL * state["refills"]
    if total != stats.cycles:
        raise RuntimeError(f"the breakdown's {total} cycles differ from the emulator's {stats.cycles}")
    return Breakdown(total, by_class, executed, state["refills"], divides, lacks)


def sensitivity(result: Breakdown) -> dict[str, int]:
    """Cycles the call would gain (+) or lose (-) if one effect the model fixes or leaves out were charged otherwise."""
    from mcu.sim.q15emu import DIVIDE_CYCLES

    return {
        "refill P=1 (model: 2)": -result.refills,
        "refill P=3 (model: 2)": +result.refills,
        f"divide 2 cycles (model: {DIVIDE_CYCLES})": -(DIVIDE_CYCLES - 2) * result.divides,
        f"divide 12 cycles (model: {DIVIDE_CYCLES})": (12 - DIVIDE_CYCLES) * result.divides,
        "address_from_alu +1": result.lacks["address_from_alu"],
        "address_from_load +1": result.lacks["address_from_load"],
        "store_after_load -1": -result.lacks["store_after_load"],
        "table_branch +3": 3 * result.lacks["table_branch"],
        "literal_load +1": result.lacks["literal_load"],
    }


def print_breakdown(result: Breakdown, iterations: int) -> None:
    from mcu.sim.q15emu import TAKEN_BRANCH_REFILL

    total = result.cycles
    print(f"--- where the model's {total} cycles go ({iterations} iterations, whole call) ---")
    for kind, cycles in sorted(result.by_class.items(), key=lambda item: -item[1]):
        print(f"{kind:<20} {result.instructions[kind]:>11} instructions {cycles:>11} cycles "
              f"{100 * cycles / total:5.1f} %")
    refill = TAKEN_BRANCH_REFILL * result.refills
    print(f"{'taken-branch refill':<20} {result.refills:>11} branches     {refill:>11} cycles "
          f"{100 * refill / total:5.1f} %")
    print("--- what the model lacks: cycles if each effect were charged as on silicon, and CoreMark/MHz's factor ---")
    for name, delta in sensitivity(result).items():
        print(f"{name:<28} {delta:>+12} cycles  {100 * delta / total:+6.2f} %  "
              f"CoreMark/MHz x {total / (total + delta):.3f}")
    for name, text in LACKS.items():
        print(f"  {name}: {text}")


def write_outputs(out: Path, argv: list[str], coremark: Path, commit: str, md5_lines: list[str], built: Build,
                  runs: list[Run], clock_hz: int, detail: Breakdown | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for result in runs:
        (out / f"{result.seeds}.log").write_text(result.report)
    (out / "command.txt").write_text(
        "python " + shlex.join(argv) + "\n\n# build (scratch folder; CoreMark's sources are not kept here)\n"
        + "\n".join(built.commands) + "\n")
    (out / "toolchain.txt").write_text(
        f"{built.compiler}\ncompile flags: {shlex.join(built.compile_flags)}\n"
        f"link flags: {shlex.join(built.link_flags)} {' '.join(LIBRARIES)}\n"
        f"code and read-only data: {built.text_bytes} bytes\n"
        f"CoreMark: {commit or 'commit not given (--coremark-commit)'}, from {coremark}; coremark.md5 check:\n"
        + "\n".join(md5_lines) + "\n")
    summary = {"clock_hz": clock_hz, "compiler": built.compiler, "flags": list(built.compile_flags),
               "coremark_commit": commit, "text_bytes": built.text_bytes,
               "runs": [{k: v for k, v in asdict(r).items() if k != "report"} for r in runs]}
    if detail is not None:
        summary["breakdown"] = {**asdict(detail), "sensitivity": sensitivity(detail)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def build_parser() -> Parser:
    parser = Parser(prog="python scripts/coremark_twin.py", doc=__doc__)
    parser.add_argument("--coremark", type=Path, required=True, metavar="DIR",
                        help="a CoreMark source folder (eembc/coremark; required)")
    parser.add_argument("--iterations", default="auto",
                        help=f"CoreMark iterations per run, or auto (the default): {AUTO_SECONDS} s of modelled "
                             "time, as CoreMark requires of a valid run")
    parser.add_argument("--opt", default="-O2",
                        help="optimisation flags, one string given with '=' (--opt='-O3 -funroll-loops'; default -O2)")
    parser.add_argument("--clock", type=integer("clock", 1_000_000, 1_000_000_000), default=168_000_000,
                        metavar="HZ", help="Hz behind CoreMark's seconds (default 168000000, the F407's 168 MHz)")
    parser.add_argument("--seeds", choices=(*SEEDS, "both"), default="both",
                        help="which of CoreMark's seed sets to run (default both)")
    parser.add_argument("--build", type=folder, metavar="DIR",
                        help="build folder (default: a temporary one, deleted afterwards)")
    parser.add_argument("--out", type=folder, metavar="DIR",
                        help="keep the reports, commands, toolchain and summary here (default: keep nothing)")
    parser.add_argument("--coremark-commit", default="",
                        help="the CoreMark commit, recorded with --out (default: not recorded)")
    parser.add_argument("--timeout", type=real("timeout", 1, 86_400), default=1800.0, metavar="S",
                        help="emulation cap per run, in wall seconds (default 1800)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON last")
    parser.add_argument("--breakdown", type=integer("breakdown", 0), metavar="N", default=0,
                        help="also run N iterations of the performance seeds with a counting hook and print where "
                             "the model's cycles go and what it leaves out (slower; default 0: not run)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return guard(lambda: coremark_twin(argv))


def coremark_twin(argv: list[str]) -> int:
    """The script's body: check the arguments and CoreMark's sources, build, run, print (and keep with --out)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.iterations != "auto" and not (args.iterations.isdigit() and int(args.iterations) > 0):
        parser.error(f"--iterations takes a positive number or auto, not {args.iterations!r}")
    for option, where in (("--out", args.out), ("--build", args.build)):
        if where is not None:
            output_folder(where, option)  # refused now, not after minutes of emulation
    coremark = args.coremark.resolve()
    md5_lines = check_sources(coremark)
    with tempfile.TemporaryDirectory(prefix="kbench-coremark-") as scratch:
        build_dir = args.build.resolve() if args.build else Path(scratch)
        built = build(coremark, build_dir, tuple(args.opt.split()), args.clock)
        print(f"built {built.elf.name}: {built.compiler}, {' '.join(built.compile_flags)}; "
              f"text {built.text_bytes} bytes", flush=True)
        iterations = (auto_iterations(built.elf, args.clock, args.timeout) if args.iterations == "auto"
                      else int(args.iterations))
        runs = []
        for seeds in (SEEDS if args.seeds == "both" else (args.seeds,)):
            start = time.perf_counter()
            result = run(built.elf, seeds, iterations, args.clock, args.timeout)
            runs.append(result)
            print(f"--- {seeds} run (seeds {', '.join(hex(s) for s in SEEDS[seeds])}; "
                  f"{time.perf_counter() - start:.1f} s of emulation) ---")
            print(result.report, end="" if result.report.endswith("\n") else "\n")
            print(f"CoreMark/MHz (iterations x 1e6 / ticks): {result.coremark_per_mhz:.4f}; "
                  f"at {args.clock / 1e6:g} MHz: {result.coremark_per_mhz * args.clock / 1e6:.1f} CoreMark",
                  flush=True)
        detail = None
        if args.breakdown:
            detail = breakdown(built.elf, "performance", args.breakdown, args.timeout)
            print_breakdown(detail, args.breakdown)
    if args.out:
        write_outputs(args.out, ["scripts/coremark_twin.py", *argv], coremark, args.coremark_commit, md5_lines,
                      built, runs, args.clock, detail)
    if args.json:
        print(json.dumps({"runs": [{k: v for k, v in asdict(r).items() if k != "report"} for r in runs]}))
    return 0 if all(r.checks_passed for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
