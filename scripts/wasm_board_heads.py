"""Issue 29's nine head shapes and the main job's other MCU heads (seq 128, 256 at dim 64, causal and not) on the
WebAssembly board (MicroPython's real VM, 100 KB GC heap that cannot grow; tests/helpers/wasm_board.py), with the
board's modules as .mpy and from source: one Markdown row per head with the heap HELLO announced (free, largest
block), the plan that ran, the replans it took, the verdict against host/q15.py and the wall time.

    .venv/bin/python scripts/wasm_board_heads.py [--source-only | --mpy-only]

Needs node and the WebAssembly port (scripts/setup.sh test installs both). Exit status 0 when every head is ok and
bit-exact, 1 otherwise (the failing rows say why).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from helpers.wasm_board import ISSUE_SHAPES, MAIN_SHAPES, run_wasm_head, wasm_board_missing  # noqa: E402 - after the path


def row(seq: int, dim: int, causal: bool, mpy: bool) -> str:
    started = time.monotonic()
    name = f"| {seq}×{dim}{' causal' if causal else ''} | {'.mpy' if mpy else 'source'} |"
    try:
        head, expected, hello, _ = run_wasm_head(seq, dim, causal, mpy)
    except Exception as exc:  # noqa: BLE001 - a failed head is a row of the table, with its reason
        return f"{name} - | - | - | failed: {type(exc).__name__}: {exc} | {time.monotonic() - started:.1f} s |"
    exact = bool((head.out == expected).all())
    how = "resident" if head.keys == seq else f"streamed, {head.keys} keys at a time"
    return (f"{name} {hello.heap_free:,} / {hello.largest_block:,} B | {head.rows} rows, {how} | {head.replans} | "
            f"{'ok, bit-exact' if exact else 'wrong: not bit-exact'} | {time.monotonic() - started:.1f} s |")


def main(argv: list[str]) -> int:
    missing = wasm_board_missing()
    if missing:
        print(f"kbench: {missing}", file=sys.stderr)
        return 1
    variants = [v for v, flag in ((True, "--source-only"), (False, "--mpy-only")) if flag not in argv]
    print("| head (Bc 32) | board modules | HELLO free / largest block | plan | replans | verdict | wall |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for mpy in variants:
        for seq, dim, causal in ISSUE_SHAPES + MAIN_SHAPES:
            rows.append(row(seq, dim, causal, mpy))
            print(rows[-1], flush=True)
    return 0 if all("ok, bit-exact" in row for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
