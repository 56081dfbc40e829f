"""The launch configurations of the GPU kernels, and their shared memory: the formulas each kernel's launch is
checked against (kernels/budget.py, kernels/target.py) and the configuration records and tables the sweeps chose
(TC_CONFIGS, TF32_CONFIGS, WGMMA_CONFIGS, DEFAULT_TILES; docs/gpu.md). kernels/variants.py builds the launches from
them. Nothing here imports CuPy.
"""

from __future__ import annotations

from typing import NamedTuple

from host.checks import check_int
from host.errors import SpecError
from host.problem import LIMITS

FLOAT_BYTES = 4
#: Tile sizes (Br, Bc) the shared-memory formulas accept; a block of these kernels holds at most a few hundred rows.
TILE_RANGE = (1, 1024)


def row_strides(dim: int) -> tuple[int, int]:
    """(QP, KP): the FFMA flash kernel's Q and K row strides in floats (float4 rows when d % 4 == 0)."""
    return (dim, dim + 4) if dim % 4 == 0 else (dim + 1, dim + 1)


def flash_smem_bytes(br: int, bc: int, dim: int) -> int:
    """Shared memory of one FFMA flash block (kernels/flash.cu) in bytes: 4·(Br·QP + Bc·KP + Bc·d + Br·(Bc+4) +
    3·Br): fp32 Q, K, V and S tiles (Q, K and S rows padded), and m, l, scale per row."""
    br = check_int("Br", br, *TILE_RANGE)
    bc = check_int("Bc", bc, *TILE_RANGE)
    dim = check_int("dim", dim, *LIMITS["dim"])
    qp, kp = row_strides(dim)
    return FLOAT_BYTES * (br * qp + bc * kp + bc * dim + br * (bc + 4) + 3 * br)


def flash_tf32_smem_bytes(br: int, bc: int, dim: int) -> int:
    """Shared memory of one 3xTF32 flash block (kernels/flash_tf32.cu) in bytes: 4·(Br·(d+8) + 2·Bc·(d+8) +
    2·Bc·(d+4)), the fp32 Q tile and two stages each of K (rows d + 8 floats apart) and V (d + 4)."""
    return 4 * (br * (dim + 8) + 2 * bc * (dim + 8) + 2 * bc * (dim + 4))


def flash_tc_smem_bytes(br: int, bc: int, dim: int, stages: int = 2) -> int:
    """Shared memory of one tensor-core flash block (kernels/flash_tc.cu) in bytes: 2·(Br + 2·stages·Bc)·d, the
    16-bit Q tile and `stages` stages each of K and V."""
    return 2 * (br + 2 * stages * bc) * dim


def flash_wgmma_smem_bytes(dim: int, bc: int, consumers: int, stages: int, persistent: bool = False,
                           early_k: bool = False) -> int:
    """Dynamic shared memory of one Hopper block in bytes: the 16-bit Q tile (64 · consumers rows) and `stages`
    stages each of K and V, their mbarriers (8 bytes each: Q's, then full K, full V and empty per stage, in a
    persistent launch Q's empty one, with early_k K's empty one per stage), and 1024 bytes to align the tiles to the
    swizzle's period."""
    return (2 * dim * (64 * consumers + 2 * stages * bc)
            + 8 * (1 + 3 * stages + int(persistent) + stages * int(early_k)) + 1024)


def flash_wgmma_threads(consumers: int) -> int:
    """Threads of one Hopper block: the consumer warpgroups and the producer warpgroup (one thread of which issues
    the copies; the rest hand their registers to the consumers)."""
    return 128 * consumers + 128


def decode_wgmma_smem_bytes(dim: int, bc: int, stages: int) -> int:
    """Dynamic shared memory of one Hopper split-KV block (kernels/decode_wgmma.cu) in bytes: two 16-bit Q tiles of
    64 rows, `stages` stages each of K and V, the mbarriers (8 bytes each: Q full and empty per Q tile, then full K,
    full V and empty per stage) and 1024 bytes to align the tiles to the swizzle's period."""
    return 2 * dim * (2 * 64 + 2 * stages * bc) + 8 * (4 + 3 * stages) + 1024


#: Threads of one Hopper split-KV block: a consumer and a producer warpgroup.
WGMMA_SPLIT_THREADS = 256


# ---------------------------------------------------------------------------------------------------------- configs

class TcConfig(NamedTuple):
    """A launch of kernels/flash_tc.cu: `warps` warps of 16 · m_tiles query rows each, Bc keys per block, `stages`
    key blocks of K and V in shared memory (stages − 1 in flight while one is computed on), and `key_warps` warps
    sharing each row block, each taking Bc / key_warps keys of every key block (their states merged at the end)."""

    warps: int
    bc: int
    m_tiles: int
    stages: int = 2
    key_warps: int = 1

    @property
    def br(self) -> int:
        return 16 * self.m_tiles * self.warps // self.key_warps


class Tf32Config(NamedTuple):
    """A launch of kernels/flash_tf32.cu: as TcConfig, and whether Q's split fragments stay in registers."""

    warps: int
    bc: int
    m_tiles: int
    q_in_regs: bool

    @property
    def br(self) -> int:
        return 16 * self.m_tiles * self.warps


class WgmmaConfig(NamedTuple):
    """A launch of kernels/flash_wgmma.cu: key block Bc, consumer warpgroups of 64 query rows each, K/V stages, and
    the schedule (0: each block's products and softmax in turn; 1: a block's softmax overlaps the previous block's
    P·V; 2: also turns between the warpgroups; 3: 2 with the rescale and packing moved to the next block's turn;
    docs/gpu.md). check_wgmma_config says which the kernel builds."""

    bc: int
    consumers: int
    stages: int
    schedule: int
    #: a persistent launch of at most this many blocks, each walking tiles (0: a block a tile)
    blocks: int = 0
    #: release a stage's K once the block's S is done and its V after the P·V (FlashAttention-3's order), not both
    #: after the P·V
    early_k: bool = False

    @property
    def br(self) -> int:
        return 64 * self.consumers


#: The key blocks kernels/flash_wgmma.cu builds: the N of its wgmma_ss shapes (kernels/wgmma.cuh; S = Q·Kᵀ is one
#: m64nBck16 instruction a k-step). Each is a multiple of 16 (P·V takes Bc/16 k16 steps, and each tile half of
#: Bc·128 bytes starts on the swizzle's 1024-byte period) and at most 256 (the copy engine's box rows).
WGMMA_BCS = (64, 96, 128, 160, 176, 192)
#: The head dimensions kernels/flash_wgmma.cu builds (one or two 64-column halves), its schedules, and its consumer
#: warpgroups (Br = 64 · consumers: Q's copy-engine box holds at most 256 rows).
WGMMA_DIMS = (64, 128)
WGMMA_SCHEDULES = (0, 1, 2, 3)
WGMMA_CONSUMERS = (1, 4)
#: Stages of K and V: schedules 1 and 2 issue block j's S before block j−1's stage is released, so they need two
#: (one deadlocks), schedule 3 releases it a block later still, so three (two where K is released after S: early_k);
#: the upper end is far past what 227 KB of shared memory holds, checked at each launch.
WGMMA_STAGES = (1, 16)


def check_wgmma_config(config: WgmmaConfig, dim: int) -> WgmmaConfig:
    """`config` if kernels/flash_wgmma.cu builds it at head dimension `dim`; SpecError quoting the bad field
    otherwise. Its shared memory (flash_wgmma_smem_bytes) is checked against the device at launch."""
    if dim not in WGMMA_DIMS:
        raise SpecError(f"kernels/flash_wgmma.cu is built for d {', '.join(map(str, WGMMA_DIMS))}; d={dim}")
    if config.bc not in WGMMA_BCS:
        raise SpecError(f"wgmma Bc={config.bc} has no wgmma_ss shape in kernels/wgmma.cuh; allowed: "
                        f"{', '.join(map(str, WGMMA_BCS))}")
    check_int("wgmma consumers", config.consumers, *WGMMA_CONSUMERS)
    if config.schedule not in WGMMA_SCHEDULES:
        raise SpecError(f"wgmma schedule={config.schedule!r} is unknown; allowed: "
                        f"{', '.join(map(str, WGMMA_SCHEDULES))}")
    if not isinstance(config.early_k, bool):
        raise SpecError(f"wgmma early_k={config.early_k!r} must be True or False")
    if config.schedule == 0:
        low = WGMMA_STAGES[0]
    elif config.schedule == 3 and not config.early_k:
        low = 3
    else:
        low = 2
    check_int(f"wgmma stages (schedule {config.schedule})", config.stages, low, WGMMA_STAGES[1])
    check_int("wgmma persistent blocks", config.blocks, 0, 2**31 - 1)  # the grid's x extent
    return config


#: The tensor-core flash kernel's launch per (head dimension, causal). The best of the H200 variant sweeps at N 4096
#: (reports/gpu-tc, docs/gpu.md): at d 128 two m-tiles (Q re-read from shared memory; 48 bytes of spills) win
#: without the mask and lose with it.
TC_CONFIGS = {(64, False): TcConfig(4, 64, 2), (64, True): TcConfig(4, 64, 2),
              (128, False): TcConfig(8, 64, 2), (128, True): TcConfig(8, 128, 1)}
#: The 3xTF32 flash kernel's launch per (head dimension, causal): the best of the H200 variant sweep at N 4096
#: (reports/gpu-tf32).
TF32_CONFIGS = {(64, False): Tf32Config(4, 32, 2, False), (64, True): Tf32Config(4, 32, 1, True),
                (128, False): Tf32Config(8, 64, 1, False), (128, True): Tf32Config(8, 64, 1, False)}
#: The Hopper kernel's launch per head dimension, causal or not: the best of the H200 variant sweeps at N 4096
#: (reports/gpu-wgmma); at d 64 the 192-key block since the issue-34 sweeps on an H100 (reports/issue-34/
#: h100_persist): 506 against 441 TFLOP/s at N 16,384 (1.02-1.04 of cuDNN, 0.99-1.02 causal), 436 against 397 at
#: 4,096 (its persistent form), 0.96x the 128-key block at 1,024 (six 192-key blocks for 1,024 keys: 11 % padding).
WGMMA_CONFIGS = {64: WgmmaConfig(192, 2, 3, 2), 128: WgmmaConfig(128, 2, 3, 2)}


class WgmmaSplitConfig(NamedTuple):
    """A launch of kernels/decode_wgmma.cu: key block Bc and K/V stages (64 packed query rows a block)."""

    bc: int
    stages: int

    @property
    def br(self) -> int:
        return 64


#: One block an SM (two Q tiles and the stages: 160 KB at d 128): four 64-key stages keep three key blocks (96 KB at
#: d 128) in flight, over the ~47 KB an SM needs at its share of the copy rate and a microsecond of latency; at d 64
#: the same bytes take eight.
WGMMA_SPLIT_CONFIGS = {64: WgmmaSplitConfig(64, 8), 128: WgmmaSplitConfig(64, 4)}
#: Head dimensions each tensor-core kernel is built for.
TC_DIMS = tuple(sorted({d for d, _ in TC_CONFIGS}))
TF32_DIMS = tuple(sorted({d for d, _ in TF32_CONFIGS}))
#: The FFMA flash kernel's tile sizes, for Br and Bc alike.
TILE_CHOICES = (8, 16, 32, 64, 128)
#: Default FFMA flash tiles by head dimension, (Br, Bc): the H200 sweeps' best at N = 2048 and 4096 for d = 64 and at
#: N = 4096 for d = 128 (docs/gpu.md); d = 256 from the shared-memory budget (two blocks per SM), not swept.
DEFAULT_TILES = {64: (128, 64), 128: (64, 32), 256: (16, 32)}

#: The C++ type of each 16-bit dtype in kernels/flash_tc.cu, and its number in kernels/flash_wgmma.cu.
TC_TYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16"}
WGMMA_TYPES = {"float16": 0, "bfloat16": 1}


def check_tile(br: int, bc: int) -> None:
    """SpecError unless Br and Bc are both FFMA flash tile sizes (TILE_CHOICES)."""
    for name, value in (("Br", br), ("Bc", bc)):
        if value not in TILE_CHOICES:
            raise SpecError(f"{name}={value} is not supported; allowed: {', '.join(map(str, TILE_CHOICES))}")
