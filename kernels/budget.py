"""`python -m kernels.budget`: the flash kernel's shared memory per block, and what it leaves for occupancy.

The fp32 FFMA flash kernel (kernels/flash.cu; its record is kernels/variants.py FLASH) keeps, per block, in shared
memory (in floats):

    Q tile Br·QP + K tile Bc·KP + V tile Bc·d + S tile Br·(Bc+4) + 3·Br (the per-row m, l and rescale
    factor; Q, K and S rows are padded by one float against bank conflicts)

so ``smem(Br, Bc, d) = 4·(Br·QP + Bc·KP + Bc·d + Br·(Bc+4) + 3·Br)`` bytes, with QP = d, KP = d + 4 when d % 4 == 0
(rows read as float4) and QP = KP = d + 1 otherwise. This module gives that formula, the device limits it
runs into (queried through CuPy where there is a GPU, or a published profile where there is not), how many blocks
stay resident per SM, and the largest square tile that keeps at least two of them. The CLI prints the Br×Bc table
and the arithmetic behind every verdict, and runs without a GPU: CuPy is imported only inside `query_device`.

Usage: ``python -m kernels.budget --dim 64 [--device h200|a100|t4] [--br-bc 8,16,32,64,128]``.
Exit status: 0 printed, 2 bad arguments (one ``kbench: error: ...`` line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from host.errors import UnavailableError
from host.cli_common import Parser, guard, int_list, integer
from host.checks import check_int
from host.problem import LIMITS
from kernels.variants import FLASH, FLOAT_BYTES, TILE_RANGE, flash_smem_bytes, row_strides

#: Square tiles `largest_square_tile` tries by default, and the CLI's default Br×Bc grid.
CANDIDATES = (8, 16, 32, 48, 64, 96, 128, 160, 192, 256)
DEFAULT_GRID = (8, 16, 32, 48, 64, 96, 128)
#: Threads per block assumed when the CLI counts resident blocks: the FFMA flash kernel's 4 warps.
DEFAULT_THREADS = FLASH.threads


@dataclass(frozen=True)
class DeviceLimits:
    """What bounds a block's shared memory and the blocks resident per SM. Bytes, registers and threads are counts.

    smem_per_sm is the largest shared-memory carve-out of one SM; smem_per_block_default the limit a kernel gets
    without asking (48 KB); smem_per_block_optin the limit after raising the kernel's
    max_dynamic_shared_size_bytes; reserved_smem_per_block what CUDA itself takes per resident block (sm_80+: 1 KB),
    counted against smem_per_sm but not against smem_per_block_optin. The two trailing fields, beyond what the
    driver's occupancy needs from a kernel-independent model: a block's shared memory (its bytes plus the
    reservation) is allocated in units of smem_alloc_granularity bytes, and an SM holds at most max_blocks_per_sm
    blocks whatever their size.
    """

    name: str
    sms: int
    smem_per_sm: int
    smem_per_block_default: int
    smem_per_block_optin: int
    reserved_smem_per_block: int
    regs_per_sm: int
    max_threads_per_sm: int
    smem_alloc_granularity: int = 128
    max_blocks_per_sm: int = 32


# Sources. H200: the device attributes our H200 reported (shared/research/h200_measured.md; the same numbers are in
# the Hopper tuning guide: 228 KB per SM, 227 KB per block opt-in, 1 KB reserved per block, 64K registers, 2048
# threads). A100 SXM: the Ampere tuning guide and the CUDA C++ Programming Guide's compute-capability table for 8.0:
# 108 SMs, 164 KB per SM, 163 KB per block opt-in, 64K registers, 2048 threads. T4: the Turing tuning guide and the
# table for 7.5: 40 SMs, 64 KB per SM, all of it addressable by one block with opt-in, 64K registers, 1024 threads.
# The per-block reservation: the programming guide says, for 8.x and later, that the 1 KB not available to a block is
# "reserved for system use"; CUDA's occupancy calculator (cuda_occupancy.h, cudaOccSMemPerBlock) adds it only from
# compute capability 8 on ("Starting Ampere, CUDA driver reserves additional shared memory per block"), and pre-Ampere
# devices report cudaDevAttrReservedSharedMemoryPerBlock = 0. So T4 (sm_75) has 0 here: an assumption from those two
# sources, not a query of a T4.
# Allocation granularity and blocks per SM: cuda_occupancy.h (cudaOccSMemAllocationGranularity: 256 B for compute
# capability 7.x, 128 B from 8.0 on; cudaOccMaxBlocksPerMultiprocessor: 16 for 7.5, 32 for 8.0 and 9.0). Our H200's
# driver agrees (cuOccupancyMaxActiveBlocksPerMultiprocessor, asked through CuPy): 4 blocks, not 5, for 45,576 B of
# dynamic shared memory (45,576 + 1,024 = 46,600 → 46,720 in 128 B units; 5 × 46,720 = 233,600 > 233,472), and 32
# blocks, not 64, of 32 threads.
PROFILES: dict[str, DeviceLimits] = {
    "h200": DeviceLimits(name="NVIDIA H200", sms=132, smem_per_sm=233_472, smem_per_block_default=49_152,
                         smem_per_block_optin=232_448, reserved_smem_per_block=1_024, regs_per_sm=65_536,
                         max_threads_per_sm=2_048, smem_alloc_granularity=128, max_blocks_per_sm=32),
    "a100": DeviceLimits(name="NVIDIA A100-SXM4", sms=108, smem_per_sm=167_936, smem_per_block_default=49_152,
                         smem_per_block_optin=166_912, reserved_smem_per_block=1_024, regs_per_sm=65_536,
                         max_threads_per_sm=2_048, smem_alloc_granularity=128, max_blocks_per_sm=32),
    "t4": DeviceLimits(name="Tesla T4", sms=40, smem_per_sm=65_536, smem_per_block_default=49_152,
                       smem_per_block_optin=65_536, reserved_smem_per_block=0, regs_per_sm=65_536,
                       max_threads_per_sm=1_024, smem_alloc_granularity=256, max_blocks_per_sm=16),
}


def query_device() -> DeviceLimits:
    """The current CUDA device's limits, read through CuPy; UnavailableError with the reason where there is none."""
    try:
        import cupy
    except ImportError as exc:
        raise UnavailableError(f"CuPy is not installed ({exc}); install kbench[gpu] or kbench[gpu-cuda13]") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
        if not count:
            raise UnavailableError("CuPy sees no CUDA device")
        device = cupy.cuda.Device()
        props = cupy.cuda.runtime.getDeviceProperties(device.id)
    except UnavailableError:
        raise
    except Exception as exc:  # noqa: BLE001 - CUDARuntimeError and driver load failures all mean "no usable GPU"
        raise UnavailableError(f"no usable CUDA GPU ({type(exc).__name__}: {exc})") from None
    name = props["name"]
    return DeviceLimits(
        name=name.decode() if isinstance(name, bytes) else str(name),
        sms=int(props["multiProcessorCount"]),
        smem_per_sm=int(props["sharedMemPerMultiprocessor"]),
        smem_per_block_default=int(props["sharedMemPerBlock"]),
        smem_per_block_optin=int(props["sharedMemPerBlockOptin"]),
        reserved_smem_per_block=int(props.get("reservedSharedMemPerBlock", 0)),
        regs_per_sm=int(props["regsPerMultiprocessor"]),
        max_threads_per_sm=int(props["maxThreadsPerMultiProcessor"]),
        smem_alloc_granularity=128 if int(props["major"]) >= 8 else 256,  # cuda_occupancy.h; not a device attribute
        max_blocks_per_sm=int(props["maxBlocksPerMultiProcessor"]),
    )


def allocated_smem(smem_bytes: int, limits: DeviceLimits) -> int:
    """Shared memory one resident block takes from its SM: smem + reserved, rounded up to the allocation unit."""
    unit = limits.smem_alloc_granularity
    return -(-(smem_bytes + limits.reserved_smem_per_block) // unit) * unit


def _smem_limit(smem_bytes: int, limits: DeviceLimits) -> int:
    """Blocks per SM allowed by shared memory alone: smem_per_sm // allocated; 0 past the opt-in limit."""
    if smem_bytes > limits.smem_per_block_optin:
        return 0
    per_block = allocated_smem(smem_bytes, limits)
    return limits.smem_per_sm // per_block if per_block else sys.maxsize


def blocks_per_sm(smem_bytes: int, limits: DeviceLimits, threads_per_block: int = DEFAULT_THREADS) -> int:
    """Blocks resident on one SM, as the driver's occupancy calculator counts them for a kernel light on registers.

    min(smem_per_sm // allocated_smem(smem_bytes), max_threads_per_sm // threads_per_block, max_blocks_per_sm),
    where allocated_smem is smem_bytes + the per-block reservation rounded up to the allocation unit; 0 when the
    block needs more than the opt-in per-block limit. Registers are not counted: the kernel's register count is
    known only after compiling it.
    """
    smem_bytes = check_int("smem_bytes", smem_bytes, 0, sys.maxsize)
    threads_per_block = check_int("threads_per_block", threads_per_block, 1, 1024)
    return min(_smem_limit(smem_bytes, limits), limits.max_threads_per_sm // threads_per_block,
               limits.max_blocks_per_sm)


def largest_square_tile(dim: int, limits: DeviceLimits, min_blocks: int = 2,
                        candidates: Sequence[int] = CANDIDATES) -> int | None:
    """The largest Br = Bc among `candidates` whose flash block leaves >= min_blocks resident per SM; None if none."""
    min_blocks = check_int("min_blocks", min_blocks, 1, 1024)
    fitting = [tile for tile in candidates if blocks_per_sm(flash_smem_bytes(tile, tile, dim), limits) >= min_blocks]
    return max(fitting) if fitting else None


def fits(br: int, bc: int, dim: int, limits: DeviceLimits) -> tuple[bool, str]:
    """Whether one block fits the opt-in per-block limit; (False, reason naming the bytes and the limit) otherwise."""
    need = flash_smem_bytes(br, bc, dim)
    if need > limits.smem_per_block_optin:
        return False, (f"Br={br}, Bc={bc}, d={dim} needs {need:,} B of shared memory per block, more than the "
                       f"{limits.smem_per_block_optin:,} B opt-in limit of {limits.name}")
    if need > limits.smem_per_block_default:
        return True, (f"Br={br}, Bc={bc}, d={dim} needs {need:,} B: over the {limits.smem_per_block_default:,} B "
                      f"default, within the {limits.smem_per_block_optin:,} B opt-in limit (raise the kernel's "
                      f"max_dynamic_shared_size_bytes)")
    return True, (f"Br={br}, Bc={bc}, d={dim} needs {need:,} B, within the "
                  f"{limits.smem_per_block_default:,} B default limit")


# ---------------------------------------------------------------------------------------------------------- CLI

def _kb(nbytes: int) -> str:
    return f"{nbytes / 1024:g} KB"


def _formula(br: int, bc: int, dim: int) -> str:
    qp, kp = row_strides(dim)
    return (f"4·({br}·{qp} + {bc}·{kp} + {bc}·{dim} + {br}·{bc + 4} + 3·{br}) = "
            f"{flash_smem_bytes(br, bc, dim):,} B")


def _verdict(tile: int, dim: int, limits: DeviceLimits, min_blocks: int) -> str:
    """One line: a square tile's bytes, the residency arithmetic against the SM, and the blocks per SM."""
    need = flash_smem_bytes(tile, tile, dim)
    head = f"Br=Bc={tile}: {_formula(tile, tile, dim)}"
    blocks = blocks_per_sm(need, limits)
    if need > limits.smem_per_block_optin:
        return f"{head} > {limits.smem_per_block_optin:,} opt-in limit → 0 blocks/SM"
    per_block = allocated_smem(need, limits)
    reserved = limits.reserved_smem_per_block
    shown = f"{need:,} + {reserved:,}" if reserved else f"{need:,}"
    if per_block != need + reserved:
        shown = f"({shown}, rounded up to {limits.smem_alloc_granularity} B: {per_block:,})"
    elif reserved:
        shown = f"({shown})"
    if blocks >= min_blocks:
        line = f"{head}; {blocks} × {shown} = {blocks * per_block:,} ≤ {limits.smem_per_sm:,}"
        if _smem_limit(need, limits) > blocks:
            return f"{line} → {blocks} blocks/SM (capped by {_cap(limits)})"
        return f"{line} → {blocks} blocks/SM"
    unit = "block" if blocks == 1 else "blocks"
    return (f"{head}; {min_blocks} × {shown} = {min_blocks * per_block:,} > {limits.smem_per_sm:,}"
            f" → {blocks} {unit}/SM")


def _cap(limits: DeviceLimits) -> str:
    """What caps residency when shared memory does not: threads or the hardware's blocks per SM."""
    by_threads = limits.max_threads_per_sm // DEFAULT_THREADS
    if by_threads <= limits.max_blocks_per_sm:
        return f"threads: {limits.max_threads_per_sm:,} / {DEFAULT_THREADS}"
    return f"the hardware's {limits.max_blocks_per_sm} blocks per SM"


def _table(dim: int, limits: DeviceLimits, tiles: Sequence[int]) -> list[str]:
    width = max(8, len(f"{flash_smem_bytes(max(tiles), max(tiles), dim) / 1024:.1f}") + 3)
    corner = "Br \\ Bc"
    lines = [f"{corner:>8}" + "".join(f"{bc:>{width}}" for bc in tiles)]
    for br in tiles:
        cells = []
        for bc in tiles:
            need = flash_smem_bytes(br, bc, dim)
            mark = "x" if need > limits.smem_per_block_optin else "*" if need > limits.smem_per_block_default else " "
            cells.append(f"{need / 1024:>{width - 1}.1f}{mark}")
        lines.append(f"{br:>8}" + "".join(cells))
    return lines


def report(dim: int, limits: DeviceLimits, source: str, tiles: Sequence[int] = DEFAULT_GRID) -> str:
    """The CLI's text: device, limits, the Br×Bc table, the formula's terms and the largest square tile."""
    dim = check_int("dim", dim, *LIMITS["dim"])
    tiles = sorted(set(tiles))
    r = limits.reserved_smem_per_block
    out = [
        f"flash kernel shared memory per block, fp32 ({FLOAT_BYTES} B per float), d = {dim}",
        "",
        f"device: {limits.name}: {source}",
        f"  {limits.sms} SMs; shared memory per SM {limits.smem_per_sm:,} B ({_kb(limits.smem_per_sm)}); "
        f"per block {limits.smem_per_block_default:,} B ({_kb(limits.smem_per_block_default)}) by default, "
        f"{limits.smem_per_block_optin:,} B ({_kb(limits.smem_per_block_optin)}) with the opt-in attribute",
        f"  CUDA reserves {r:,} B per resident block, allocated in {limits.smem_alloc_granularity} B units; "
        f"{limits.regs_per_sm:,} registers, {limits.max_threads_per_sm:,} threads and {limits.max_blocks_per_sm} "
        f"blocks per SM",
        "",
        f"smem(Br, Bc, d) = 4·(Br·QP + Bc·KP + Bc·d + Br·(Bc+4) + 3·Br) B with QP = {row_strides(dim)[0]}, "
        f"KP = {row_strides(dim)[1]} at d = {dim} (padded rows), three terms:",
        f"  Q, K, V tiles   4·(Br·QP + Bc·KP + Bc·d)   linear in d: {FLOAT_BYTES * row_strides(dim)[0]}·Br + "
        f"{FLOAT_BYTES * (row_strides(dim)[1] + dim)}·Bc B at d = {dim}",
        "  S tile          4·Br·(Bc+4)       grows as Br·Bc, independent of d",
        "  m, l, rescale   4·3·Br            one float each per row",
        f"  for Br = Bc = t: 12·t·d + 4·t² plus padding linear in t, so the S tile outgrows the Q, K, V tiles past "
        f"t = 3·d "
        f"(= {3 * dim} at d = {dim})",
        "",
        f"KB per block (1 KB = 1,024 B), rows Br, columns Bc; * over the {_kb(limits.smem_per_block_default)} "
        f"default (needs the opt-in attribute), x over the {limits.smem_per_block_optin:,} B opt-in limit "
        f"(does not fit)",
        *_table(dim, limits, tiles),
        "",
    ]
    min_blocks = 2
    best = largest_square_tile(dim, limits, min_blocks, tiles)
    header = (f"resident blocks per SM = min(⌊{limits.smem_per_sm:,} / (smem + {r:,}, rounded up to "
              f"{limits.smem_alloc_granularity} B)⌋, ⌊{limits.max_threads_per_sm:,} / {DEFAULT_THREADS} threads⌋, "
              f"{limits.max_blocks_per_sm}); registers not counted")
    out.append(header)
    if best is None:
        out.append(f"largest Br = Bc with at least {min_blocks} resident blocks per SM: none among "
                   f"{', '.join(map(str, tiles))}")
        out.append("  " + _verdict(tiles[0], dim, limits, min_blocks))
    else:
        out.append(f"largest Br = Bc with at least {min_blocks} resident blocks per SM: {best}")
        out.append("  " + _verdict(best, dim, limits, min_blocks))
        larger = [tile for tile in tiles if tile > best]
        if larger:
            out.append("  " + _verdict(larger[0], dim, limits, min_blocks))
        else:
            out.append("  (the largest tile tried; pass --br-bc with larger values to go further)")
        q_kv = FLOAT_BYTES * best * (sum(row_strides(dim)) + dim)
        s = FLOAT_BYTES * best * (best + 4)
        out.append(f"  at Br=Bc={best}: Q, K, V tiles {q_kv:,} B, S tile {s:,} B, m/l/scale {12 * best:,} B")
    return "\n".join(out)


def _device_name(text: str) -> str:
    if text not in PROFILES:
        raise argparse.ArgumentTypeError(f"{text!r} is unknown; allowed: {', '.join(PROFILES)}")
    return text


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m kernels.budget", doc=__doc__)
    parser.add_argument("--dim", type=integer("dim", *LIMITS["dim"]), required=True,
                        help=f"head dimension d ({'..'.join(map(str, LIMITS['dim']))}; required)")
    parser.add_argument("--device", type=_device_name,
                        help=f"use a published profile instead of querying the GPU: {', '.join(PROFILES)} "
                             "(default: query the GPU, else h200)")
    parser.add_argument("--br-bc", type=int_list("Br/Bc", *TILE_RANGE), default=DEFAULT_GRID, metavar="LIST",
                        help=f"comma-separated tile sizes for Br and Bc (default {','.join(map(str, DEFAULT_GRID))})")
    return parser


def choose_device(profile: str | None) -> tuple[DeviceLimits, str]:
    """The limits to report on and a phrase saying where they came from: --device wins, then the GPU, then h200."""
    if profile is not None:
        return PROFILES[profile], f"the '{profile}' profile (published figures, chosen with --device), not a query"
    try:
        return query_device(), "queried from the GPU through CuPy"
    except UnavailableError as why:
        return PROFILES["h200"], f"the 'h200' profile (published/measured figures), not a query: {why}"


def main(argv: Sequence[str] | None = None) -> int:
    def body() -> int:
        args = _parser().parse_args(argv)
        limits, source = choose_device(args.device)
        print(report(args.dim, limits, source, args.br_bc))
        return 0

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
