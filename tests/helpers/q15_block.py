"""kernels/q15.cu itself, every block of a launch, on the host: the kernel's source with its inline-PTX MMAs and its
extern shared array swapped for tests/helpers/q15_block/cuda_host.h (each thread a fiber; __syncthreads, the warp
shuffles and the MMAs barriers; the MMA by the PTX ISA's fragment layouts), built with g++ and launched at
kernels/q15_launch.py's grid, block and dynamic shared memory with buffers of exactly those sizes, each ending at an
inaccessible page.

Beside tests/helpers/q15_warp.py (a transcription of one warp's algorithm) this runs the kernel's own code: its block
loop, the warps' shared tiles and their offsets, the skipped blocks, the barriers (a divergent one is a deadlock,
reported), the output indexing of grouped heads and tiles, and an access past the launcher's shared memory or a
buffer (a fault). What it cannot check is the CUDA compiler or the hardware.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from helpers import ROOT
from host import q15
from host.problem import AttentionProblem
from kernels.q15_launch import instances, q15_launch

HERE = Path(__file__).resolve().parent / "q15_block"
#: The kernel's inline-PTX MMA definitions, replaced by cuda_host.h's emulated ones of the same names.
MMA_DEFINITIONS = re.compile(r"#define Q15_MMA\(NAME, TYPES\).*?Q15_MMA\(mma_u8u8, \"u8\.u8\"\)", re.S)
EMULATED_MMAS = "".join(f"Q15_EMU_MMA(mma_{a}{b}, {str(a == 's8').lower()}, {str(b == 's8').lower()})\n"
                        for a in ("s8", "u8") for b in ("s8", "u8"))
EXTERN_SMEM = "extern __shared__ __align__(16) unsigned char smem[];"


def host_source(source: str) -> str:
    """kernels/q15.cu as the host builds it: cuda_host.h first, the MMAs emulated, `smem` the emulated block's."""
    rewritten, count = MMA_DEFINITIONS.subn(EMULATED_MMAS, source)
    if count != 1 or source.count(EXTERN_SMEM) != 1:
        raise AssertionError("kernels/q15.cu no longer has the MMA macro or the extern shared array this emulation "
                             "replaces: update tests/helpers/q15_block.py")
    return f'#include "{HERE / "cuda_host.h"}"\n' + rewritten.replace(EXTERN_SMEM,
                                                                         "unsigned char *smem = emu_smem;")


def build(folder: Path, source: str | None = None) -> Path:
    """The host program of kernels/q15.cu (or of `source`, a variant of it) in `folder`."""
    if shutil.which("g++") is None:
        raise FileNotFoundError("g++")
    kernel = folder / "q15_host.cu"
    kernel.write_text(host_source((ROOT / "kernels" / "q15.cu").read_text() if source is None else source))
    cases = " ".join(f"Q15_EMU_CASE({launch.dim_pad}, {launch.warps})" for launch in instances())
    program = folder / "q15_host"
    subprocess.run(["g++", "-O2", "-std=c++17", "-fno-strict-aliasing", f"-I{ROOT / 'kernels'}",
                    f'-DQ15_EMU_SOURCE="{kernel}"', f"-DQ15_EMU_INSTANCES={cases}", "-o", str(program),
                    str(HERE / "driver.cpp")], check=True, capture_output=True, text=True, timeout=300)
    return program


def run(program: Path, problem: AttentionProblem, quantized: q15.Quantized) -> q15.Q15Out:
    """One launch of the host-built kernel on the problem's int16 Q, K, V: values (B, H, q_len, d) and shifts
    (B, H, q_len). RuntimeError with the program's message when it faults, deadlocks or overflows an MMA."""
    launch, params = q15_launch(problem), quantized.params
    bh, bkv = problem.batch * problem.heads, problem.batch * problem.kv_head_count
    argv = [launch.dim_pad, launch.warps, launch.grid, problem.queries, problem.seq,
            problem.heads // problem.kv_head_count, problem.dim, int(params.causal), params.score_mult,
            params.score_shift, launch.smem, bh, bkv]
    data = b"".join(np.ascontiguousarray(x, dtype=np.int16).tobytes() for x in (quantized.q, quantized.k, quantized.v))
    done = subprocess.run([str(program), *map(str, argv)], input=data, capture_output=True, timeout=600)
    if done.returncode:
        raise RuntimeError(f"the host-built kernel exited {done.returncode}: {done.stderr.decode()[-500:]}")
    values = bh * problem.queries * problem.dim
    return q15.Q15Out(np.frombuffer(done.stdout[:2 * values], dtype=np.int16).reshape(problem.shape),
                      np.frombuffer(done.stdout[2 * values:], dtype=np.uint8).reshape(problem.shape[:-1]))
