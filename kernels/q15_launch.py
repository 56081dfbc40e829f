"""The launch of the GPU's Q15 kernel (kernels/q15.cu): its template instance, block, grid and shared memory for a
problem, written once for the CuPy launcher (kernels/cuda.py), the fake (kernels/fake.py), the build test and the
budget of docs/gpu.md. Nothing here imports CuPy.

A block owns BR = 16·warps query rows of one (batch, head) and walks the contract's key blocks of `host.q15.BC` = 64
keys; d is padded to D, a multiple of 32 (the k-extent of an int8 m16n8k32 MMA), with zero columns. Shared memory per
block (kernels/q15.cu): the accumulators A in int64, BR·D·8 bytes; the exp2 table, 256; Q's high and low bytes,
2·BR·(D + 16); K's, 2·64·(D + 16); Vᵀ's, 2·D·(64 + 16) (each row padded by 16 bytes so the 8 rows of a fragment load
fall in distinct banks).
"""

from __future__ import annotations

from dataclasses import dataclass

from host.errors import SpecError
from host.problem import AttentionProblem
from host.q15 import BC, DIM_MAX, SEQ_MAX

#: The kernel's source under kernels/.
SOURCE = "q15.cu"
#: Bytes a shared row of Q or K bytes is padded by, and the Vᵀ row of a key block (kernels/q15.cu Q15_VT_STRIDE).
ROW_PAD = 16
VT_STRIDE = BC + ROW_PAD
#: The exp2 table in shared memory: 64 uint32.
TABLE_BYTES = 64 * 4
#: Warps a block at D <= 64 (4: 64 rows), above (2: 32 rows, so that A's int64 slots leave room for two blocks an SM
#: at D 128).
WARPS_SMALL_D, WARPS_LARGE_D = 4, 2
#: CUDA's limit on a grid's x extent, where the kernel puts query tiles × (batch, head) pairs.
MAX_GRID_X = 2**31 - 1
#: The launch's arguments in order (kernels/q15.cu q15_attention).
ARGS = ("q", "k", "v", "o", "shift", "nq", "n", "group", "d", "causal", "mult", "rshift")


@dataclass(frozen=True)
class Q15Launch:
    """One call of kernels/q15.cu: the template instance (a name expression), grid, block and dynamic shared memory
    in bytes."""

    dim_pad: int
    warps: int
    grid: int
    smem: int

    @property
    def rows(self) -> int:
        """Query rows a block owns (BR)."""
        return 16 * self.warps

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def function(self) -> str:
        return f"q15_attention<{self.dim_pad},{self.warps}>"


def smem_bytes(dim_pad: int, warps: int) -> int:
    """Dynamic shared memory of a block: A, the table, Q's, K's and Vᵀ's bytes (module docstring)."""
    rows, stride = 16 * warps, dim_pad + ROW_PAD
    return rows * dim_pad * 8 + TABLE_BYTES + 2 * rows * stride + 2 * BC * stride + 2 * dim_pad * VT_STRIDE


def q15_launch(problem: AttentionProblem) -> Q15Launch:
    """The launch for a problem: D = d rounded up to 32, the warps for that D, ⌈q_len / BR⌉ tiles × B·H heads.
    SpecError beyond the contract's seq and d, or past CUDA's grid limit."""
    if problem.seq > SEQ_MAX or problem.dim > DIM_MAX:
        raise SpecError(f"seq={problem.seq}, dim={problem.dim} is outside the Q15 contract; allowed: seq 1..{SEQ_MAX}, "
                        f"dim 1..{DIM_MAX} (host/q15.py)")
    dim_pad = -(-problem.dim // 32) * 32
    warps = WARPS_SMALL_D if dim_pad <= 64 else WARPS_LARGE_D
    grid = -(-problem.queries // (16 * warps)) * problem.batch * problem.heads
    if grid > MAX_GRID_X:
        raise SpecError(f"the Q15 kernel needs {grid} blocks at q_len={problem.queries}, batch·heads="
                        f"{problem.batch * problem.heads}; allowed: 1..{MAX_GRID_X} (CUDA's grid x limit)")
    return Q15Launch(dim_pad, warps, grid, smem_bytes(dim_pad, warps))


def instances() -> list[Q15Launch]:
    """Every template instance a problem can ask for: D = 32, 64, .., 256 (a build test compiles them all)."""
    return [q15_launch(AttentionProblem(seq=1, dim=d, dtype="q15")) for d in range(32, DIM_MAX + 1, 32)]
