"""`python -m codesign COMMAND …`: the datapath model's command line. Each command is a module with `main(argv)`,
run under host.cli_common.guard: bad arguments exit 2 with one line, a failed check or a missing capability exits 1,
Ctrl-C exits 130 with one line. Commands that write take `--out DIR`, by default a folder under reports/latest/
(git-ignored)."""

from __future__ import annotations

import importlib
import sys

from host.cli_common import guard

#: command → (module, what it does)
COMMANDS = {
    "run": ("codesign.run", "one attention problem on one datapath: cycles, stages, traffic, bit-exactness"),
    "gemm": ("codesign.gemm", "one GEMM on the array: cycles and SRAM accesses, SCALE-Sim v2 compatible"),
    "widths": ("codesign.widths", "the accumulator-width sweep: where bit-exactness breaks and what error follows"),
    "diagram": ("codesign.diagram", "draw the datapath's block diagram (PNG, SVG or PDF)"),
    "actions": ("codesign.actions", "the energy and area model's per-action bands at one node"),
    "explore": ("codesign.explore_cli", "sweep operating points: latency, energy and area bands, Pareto front, plots"),
    "synth": ("codesign.rtl.synth_cli", "synthesise the RTL units with Yosys: NAND2 gate equivalents, seconds"),
    "bench": ("codesign.bench", "speed of the bit-accurate model and of cycle-only evaluation"),
}


def usage() -> str:
    lines = ["usage: python -m codesign COMMAND [options]   (COMMAND --help for its options)", "commands:"]
    lines += [f"  {name:<8} {what}" for name, (_, what) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if not argv:
        print(f"kbench: error: a command is needed; allowed: {', '.join(COMMANDS)} (--help says more)",
              file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"kbench: error: unknown command {command!r}; allowed: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    try:
        return guard(lambda: module.main(rest))  # guard owns Ctrl-C: one line, exit 130
    except MemoryError as exc:  # a problem larger than this machine: say so in one line, not a traceback
        print(f"kbench: out of memory: {exc or 'MemoryError'}", file=sys.stderr)
        return 1


def run_as(command: str) -> None:
    """A command module run as `python -m codesign.MODULE …` (each ends by calling this): the same as `python -m
    codesign COMMAND …`, with the same argument checks and exit statuses, rather than a silent exit 0."""
    sys.exit(main([command, *sys.argv[1:]]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
