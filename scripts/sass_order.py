"""The order of a kernel's synchronisation, matrix and exponential instructions in its SASS, runs collapsed: where
ptxas put each `wgmma` wait (WARPGROUP.DEPBAR) against the softmax's MUFU.EX2s, the named barriers (the warpgroups'
turns) and the HGMMAs (issue 34: ptxas hoists the wait for a warpgroup's own P·V above the exponentials).

    cuobjdump --dump-sass UNIT.o > UNIT.sass
    python3 scripts/sass_order.py UNIT.sass

prints, per function, one line a run of the same instruction kind (`MUFU.EX2 ×64`), with the address of its first
instruction. cuobjdump ships with the CUDA toolkit and with Triton's wheel (triton/backends/nvidia/bin).
Exit status: 0 printed; 2 usage or a file with no function in it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

#: The instructions shown, by the start of their mnemonic (the rest are left out, whatever they are).
SHOWN = ("HGMMA", "WARPGROUP.DEPBAR", "WARPGROUP.ARRIVE", "MUFU.EX2", "BAR.SYNC", "BAR.ARV", "SYNCS.ARRIVE",
         "SYNCS.PHASECHK", "F2FP", "EXIT", "BRA")
FUNCTION = re.compile(r"Function : (\S+)")
INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)([^;]*);")


def kind(mnemonic: str, operands: str) -> str | None:
    """The run key of one instruction: its mnemonic (with the wait depth or the MMA's operand source), or None."""
    for shown in SHOWN:
        if mnemonic.startswith(shown):
            if shown == "WARPGROUP.DEPBAR":
                return f"{mnemonic} {operands.strip()}"
            if shown == "HGMMA":
                parts = operands.split(",")
                source = parts[1] if len(parts) > 1 else ""  # an HGMMA with no second operand: none we know
                return f"{mnemonic} ({'P from registers' if ' R' in source else 'smem A'})"
            return mnemonic
    return None


def order(text: str) -> list[tuple[str, list[tuple[str, str, int]]]]:
    """[(function, [(address, kind, count)])] in the order of the listing."""
    functions: list[tuple[str, list[tuple[str, str, int]]]] = []
    for line in text.splitlines():
        if match := FUNCTION.search(line):
            functions.append((match.group(1), []))
            continue
        match = INSTRUCTION.search(line)
        if not match or not functions:
            continue
        key = kind(match.group(3), match.group(4))
        if key is None:
            continue
        runs = functions[-1][1]
        if runs and runs[-1][1] == key:
            runs[-1] = (runs[-1][0], key, runs[-1][2] + 1)
        else:
            runs.append((match.group(1), key, 1))
    return functions


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if len(argv) != 1:
        print(f"kbench: error: usage: sass_order.py FILE.sass (cuobjdump --dump-sass output); got {argv}",
              file=sys.stderr)
        return 2
    if not Path(argv[0]).is_file():
        what = "does not exist" if not Path(argv[0]).exists() else "is not a regular file"
        print(f"kbench: error: {argv[0]} {what}; allowed: a file of cuobjdump --dump-sass output", file=sys.stderr)
        return 2
    functions = order(Path(argv[0]).read_text(errors="replace"))
    if not functions:
        print(f"kbench: error: {argv[0]} holds no 'Function :' header: not cuobjdump --dump-sass output",
              file=sys.stderr)
        return 2
    for name, runs in functions:
        print(name)
        for address, key, count in runs:
            print(f"  {address}  {key}{f' ×{count}' if count > 1 else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
