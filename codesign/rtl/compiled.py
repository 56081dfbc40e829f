"""The head engine's RTL in a compiled simulator: Amaranth's Verilog (codesign/rtl/synth.py to_verilog) of
codesign/rtl/head.py, compiled by Debian's Verilator with the C++ testbench codesign/rtl/harness.cpp, which runs heads
exactly as codesign/rtl/sim.py's Python testbench does (load Q, K, V, start for one clock, clock until done, read O,
the shifts and the counters). Same bits and same cycles as Amaranth's simulator (tests/rtl/test_rtl_compiled.py),
far faster per cycle, at the price of a build (Verilator and g++) per engine shape: builds are kept under
build/rtl-verilator/ (or $KBENCH_RTL_BUILD), one folder per hash of what makes the Verilog (this package's sources,
the testbench, Amaranth's version, the datapath and the engine's sizes), so a shape builds once.

`simulate_heads_compiled` takes and returns what sim.simulate_heads does; UnavailableError when Verilator is missing.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from codesign.datapath import Datapath
from codesign.rtl.sim import Head, RtlHead, check_heads, hang_limit
from host.errors import TargetError, UnavailableError
from host.q15 import Q15Out

MISSING_VERILATOR = "verilator not found: install Debian's verilator (scripts/setup.sh does)"
MISSING_BUILD_TOOL = "{tool} not found (Verilator's builds need g++ and make): install Debian's {tool}"
HARNESS = Path(__file__).with_name("harness.cpp")
#: The Verilator configuration that makes public only what the testbench reaches inside the engine (the memories).
PUBLIC = Path(__file__).with_name("harness.vlt")
#: Longest a build (Verilator, then g++ on its C++) may take, and the C++ optimisation: -O1 for the code that runs
#: every clock (Verilator's "fast" files and its runtime; its makefile would otherwise compile them at -Os, which g++
#: takes as long over and which overrode the -O1 once passed in CFLAGS), -O0 for the code that runs once (the "slow"
#: files: construction, initial blocks, the first settle), a third of -O1's compile time on the 8x8 engine's C++.
BUILD_TIMEOUT_S = 3600.0
CXX_OPT = "-O1"
CXX_OPT_ONCE = "-O0"
#: The record before each head's output in the harness's output file: status, ticks and the four counters (int32).
RECORD_WORDS = 6
STATUS_HANG, STATUS_FAULT = 1, 2


def verilator_missing() -> str:
    """Why the compiled simulator cannot run here ('' when `verilator` is on PATH)."""
    if not shutil.which("verilator"):
        return MISSING_VERILATOR
    return next((MISSING_BUILD_TOOL.format(tool=tool) for tool in ("g++", "make") if not shutil.which(tool)), "")


#: A memory word set to zero in an `initial` block of Amaranth's Verilog (its memories' init, empty here).
ZERO_WORD = re.compile(r"^ *\\?[\w$.]+\[\d+\] = \d+'h0+;\n", re.MULTILINE)


def without_zero_memory_init(verilog: str) -> str:
    """The Verilog without the statements that zero the memories one word at a time (4·seq_max·dim_max of them, a
    quarter of a million for a seq 1024, d 64 engine, which Verilator turns into one enormous C++ function); the
    compiled model starts every variable at zero anyway, and the testbench loads Q, K and V before a head."""
    return ZERO_WORD.sub("", verilog)


def build_root() -> Path:
    """Where builds are kept: $KBENCH_RTL_BUILD, else build/rtl-verilator under the checkout (git-ignored)."""
    env = os.environ.get("KBENCH_RTL_BUILD")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "build" / "rtl-verilator"


def build(datapath: Datapath, seq_max: int, dim_max: int, jobs: int = 2,
          timeout_s: float = BUILD_TIMEOUT_S) -> tuple[Path, float]:
    """The compiled testbench of a HeadEngine(datapath, seq_max, dim_max): (its executable, seconds spent building,
    0 when it was built before). UnavailableError without Verilator; TargetError when a step fails or the build
    takes longer than timeout_s (Verilator, make and g++ are stopped)."""
    missing = verilator_missing()
    if missing:
        raise UnavailableError(missing)
    from amaranth import __version__ as amaranth_version

    from codesign.rtl.head import HeadEngine
    from codesign.rtl.synth import to_verilog

    began = time.perf_counter()
    sources = [path.read_text() for path in (*sorted(HARNESS.parent.glob("*.py")), HARNESS, PUBLIC)]
    key = hashlib.sha256("\0".join((*sources, amaranth_version, repr(datapath), str(seq_max), str(dim_max),
                                    CXX_OPT, CXX_OPT_ONCE)).encode()).hexdigest()[:16]
    folder = build_root() / key
    binary = folder / "vhead"
    if binary.exists():
        return binary, 0.0
    verilog = without_zero_memory_init(to_verilog(HeadEngine(datapath, seq_max, dim_max), "head"))
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=folder.parent))
    (work / "head.v").write_text(verilog)
    # only the memories the testbench reaches are public (harness.vlt), not every signal (--public-flat-rw)
    command = ["verilator", "--cc", "--exe", "--build", "-j", str(jobs), "-Wno-fatal", "-Wno-lint", "-Wno-style",
               "--top-module", "head", "-CFLAGS", f"-DDIM_MAX={dim_max}",
               "-MAKEFLAGS", f"OPT_FAST={CXX_OPT} OPT_GLOBAL={CXX_OPT} OPT_SLOW={CXX_OPT_ONCE}",
               "-Mdir", "obj", str(PUBLIC), "head.v", str(HARNESS), "-o", "vhead"]
    # its own process group: `verilator` is a script that starts verilator_bin, which starts make and g++; a
    # timeout must stop them all (killing the script alone left them compiling into the removed folder)
    process = subprocess.Popen(command, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        shutil.rmtree(work, ignore_errors=True)
        raise TargetError(f"verilator did not build the head engine ({datapath.name}) in {timeout_s:g} s",
                          status="timeout") from None
    done = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    if done.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise TargetError(f"verilator failed on the head engine ({datapath.name}), exit {done.returncode}: "
                          f"{done.stderr.strip()[-400:]}", status="error")
    shutil.move(str(work / "obj" / "vhead"), work / "vhead")
    shutil.rmtree(work / "obj", ignore_errors=True)
    try:
        work.rename(folder)
    except OSError:  # another process built the same engine meanwhile: keep its copy
        shutil.rmtree(work, ignore_errors=True)
    return binary, time.perf_counter() - began


def _write_input(path: Path, heads: list[Head], datapath: Datapath) -> None:
    with open(path, "wb") as f:
        f.write(np.int32(len(heads)).tobytes())
        for q, k, v, params in heads:
            f.write(np.array([params.seq, params.dim, int(params.causal), params.score_mult, params.score_shift,
                              hang_limit(datapath, params)], dtype="<i4").tobytes())
            for tensor in (q, k, v):
                f.write(np.ascontiguousarray(tensor, dtype="<i2").tobytes())


def simulate_heads_compiled(heads: list[Head], datapath: Datapath, binary: Path | None = None) -> list[RtlHead]:
    """Each head (q, k, v: (seq, dim) int16, params with bc = datapath.cols) through the Verilator-compiled head
    engine, sized as sim.simulate_heads sizes it, or through `binary`, an executable that build() made for this
    datapath and these heads' largest seq and dim (kept, say, from before an edit of a source that changed the build's
    key but not the Verilog). An RtlHead's sim_seconds is its share (by cycles) of the run, the build excluded.
    SpecError for bad heads, UnavailableError without Verilator, TargetError on a hang or fault."""
    if not heads:
        return []
    check_heads(heads, datapath)
    if binary is None:
        seq_max = max(head[3].seq for head in heads)
        dim_max = max(head[3].dim for head in heads)
        binary, _ = build(datapath, seq_max, dim_max)
    with tempfile.TemporaryDirectory(prefix="kbench-vhead-") as tmp:
        source, sink = Path(tmp) / "in.bin", Path(tmp) / "out.bin"
        _write_input(source, heads, datapath)
        began = time.perf_counter()
        done = subprocess.run([str(binary), str(source), str(sink)], capture_output=True, text=True)
        seconds = time.perf_counter() - began
        if done.returncode != 0:
            raise TargetError(f"the compiled head engine exited {done.returncode}: {done.stderr.strip()[-400:]}",
                              status="error")
        data = sink.read_bytes()
    results: list[RtlHead] = []
    at = 0
    for *_, params in heads:
        seq, dim = params.seq, params.dim
        record = np.frombuffer(data, dtype="<i4", count=RECORD_WORDS, offset=at)
        at += 4 * RECORD_WORDS
        values = np.frombuffer(data, dtype="<i2", count=seq * dim, offset=at).reshape(seq, dim).astype(np.int16)
        at += 2 * seq * dim
        shifts = np.frombuffer(data, dtype=np.uint8, count=seq, offset=at).copy()
        at += seq
        status, _, array, softmax, divider, cycles = (int(x) for x in record)
        if status == STATUS_HANG:
            raise TargetError(f"the head engine ({datapath.name}, seq {seq}, dim {dim}) did not finish in "
                              f"{hang_limit(datapath, params)} cycles, the cycle model's bound", status="hang")
        if status == STATUS_FAULT:
            raise TargetError(f"the softmax unit's pipelines ran out of step ({datapath.name}, seq {seq}, dim "
                              f"{dim}): a unit's valid_out did not come as its lane issued", status="fault")
        results.append(RtlHead(Q15Out(values, shifts), {"array": array, "softmax": softmax, "divider": divider},
                               cycles, 0.0))
    total = sum(one.cycles for one in results) or 1
    return [RtlHead(one.out, one.stage_cycles, one.cycles, seconds * one.cycles / total) for one in results]
