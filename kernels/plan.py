"""The GPU target's launch planner: which flash kernel runs a problem on a device (the tensor-core path of a 16-bit
problem, 3xTF32 or FFMA in float32), its tile, and for decode heads the split-KV plan (packed K/V groups, the block
count `kv_parts` derives from the device's SMs and block slots). kernels/target.py checks and launches the plan;
`settings` is its Settings (tc_path, fp32_path, tile), `dev` its device (kernels/cuda.py or kernels/fake.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from host.checks import check_int
from host.errors import SpecError, TargetError
from host.problem import DTYPE_BYTES, AttentionProblem
from kernels.budget import blocks_per_sm
from kernels.halves import HALF_DTYPES
from kernels.shares import segments
from kernels.variants import (DEFAULT_TILES, FLASH_TC, FLASH_TF32, FLASH_WGMMA, MAX_PARTS, SPLIT_WGMMA, TC_DIMS,
                              TF32_DIMS, flash_grid, head_rows, merges_in_place, variant)

#: Below this many query tiles per SM, halve Br (down to 32) to fill the SMs: the sweep's best at N <= 1024.
MIN_TILES_PER_SM = 1
H200_SMS = 132
#: Heads with fewer queries than this (one prefill query tile of 64 rows) run flash on the split-KV path.
SPLIT_BELOW_ROWS = 64
#: The split-KV planner (`kv_parts`): the (tile, key block) units shared equally among the blocks (kernels/shares.py).
#: A block a tile (no partial state, no combine) where the tiles already fill SPLIT_FILL of the SMs' block slots;
#: else a block a slot where each share keeps SPLIT_LONG_RANGE key blocks, and one block an SM where it would not
#: (short shares pay their pipeline fill and partial states more than a second block an SM buys), at most one a
#: SHARE_MIN_KEY_BLOCKS key blocks. Forced counts on the H200 (reports/issue-32/gpu/run7_stream_k, sweep.txt), q_len 1:
#: batch 1 at 16k ran 37.3 µs on 132 blocks against 40.2 on 264, at 128k 149.9 on 264 against 152.3; batch 32 at 4k
#: 137.2 µs a block a tile (256) against 142.8 on 264.
SPLIT_FILL = 0.85
SPLIT_LONG_RANGE = 32
SHARE_MIN_KEY_BLOCKS = 4
#: ... and no more blocks than keep the partial states' traffic within this share of the K/V bytes (many query rows
#: against a short cache: 64 heads on 1 K/V head at q_len 63 and 1,025 keys): the most that do (a block a tile, with
#: no partial state, at least).
SPLIT_PARTIAL_SHARE = 0.25
#: Whether `--gpu-tc-path auto` takes the Hopper split-KV kernel (kernels/decode_wgmma.cu) for 16-bit decode heads
#: on Hopper. On since its first run (an H100, 2026-12-07, reports/issue-32/gpu/run8_h100_compact): its 40 GPU tests
#: passed, and beside the mma.sync launch on the same inputs it was 2–17 % faster at all 16 q_len-16 points and
#: level to 15 % faster at all 16 q_len-1 points (its 64-row tile holds 4 packed rows there, but decode is bound by
#: K and V's bytes, not by the products); the benchmark keeps timing mma.sync's beside it (docs/gpu.md).
WGMMA_SPLIT_AUTO = True


def device_sms(dev) -> tuple[int, str]:
    """(the device's multiprocessor count, '') or (H200_SMS, why it fell back to the H200's count)."""
    try:
        return dev.sm_count(), ""
    except Exception as exc:  # noqa: BLE001 - no device or no answer: plan for the H200, and say so
        return H200_SMS, f"SM count unknown ({type(exc).__name__}: {exc}); tiles planned for the H200's {H200_SMS}"


def default_tile(problem: AttentionProblem, sms: int = H200_SMS) -> tuple[int, int]:
    """The (Br, Bc) used when none is given: the entry for the smallest tabulated d >= problem.dim, with Br halved
    (not below 32) while the grid would give fewer than MIN_TILES_PER_SM blocks per SM."""
    limit = next((d for d in sorted(DEFAULT_TILES) if problem.dim <= d), None)
    if limit is None:
        raise SpecError(f"dim={problem.dim} is out of range for the GPU kernels; allowed: 1..{max(DEFAULT_TILES)}")
    br, bc = DEFAULT_TILES[limit]
    bh = problem.batch * problem.heads
    while br > 32 and -(-problem.queries // br) * bh < MIN_TILES_PER_SM * sms:
        br //= 2
    return br, bc


@dataclass(frozen=True)
class Plan:
    """A launch's flash tile and which flash kernel runs it: "wgmma" or "mma.sync" (16-bit), "3xtf32" or "simt"
    (float32), "split-kv" (either, `parts` blocks sharing the keys); the note goes into the flash row's message."""

    br: int
    bc: int
    path: str = ""
    note: str = ""
    parts: int = 0


def launch_plan(problem: AttentionProblem, settings, dev) -> Plan:
    """The flash launch of this problem on this device: for 16-bit problems the tensor-core path and its tile
    (`tc_plan`); for float32 the 3xTF32 kernel where `fp32_plan` picks it, else the FFMA kernel with the forced
    tile or the default for the device's SM count (the note says when that count is a fallback)."""
    if problem.dtype in HALF_DTYPES:
        plan = tc_plan(problem, dev.capability(), settings.tc_path)
        return split_plan(problem, plan, dev, settings)
    tf32 = fp32_plan(problem, dev.capability(), settings)
    if tf32.path == "3xtf32":  # ... and the 3xTF32 one in float32
        return split_plan(problem, tf32, dev, settings)
    sms, note = device_sms(dev)
    return Plan(*(settings.tile or default_tile(problem, sms)), "simt", "; ".join(filter(None, [tf32.note, note])))


def fp32_plan(problem: AttentionProblem, capability: int, settings) -> Plan:
    """float32 flash's arithmetic on a device of this compute capability: Plan(br, bc, "3xtf32") where the
    tensor-core kernel runs it, else Plan(0, 0, "simt", why) for the FFMA kernel to take; TargetError (skipped)
    where 3xtf32 is forced and not built."""
    why = ("--gpu-fp32-path simt" if settings.fp32_path == "simt" else
           "--gpu-tile forces the FFMA kernel" if settings.tile is not None else
           f"3xTF32 is built for d {', '.join(map(str, TF32_DIMS))}; d={problem.dim}"
           if problem.dim not in TF32_DIMS else
           f"3xTF32 needs sm_80 or newer (mma.sync TF32, cp.async); this device is sm_{capability}"
           if capability < 80 else "")
    if why and settings.fp32_path == "3xtf32":
        raise TargetError(f"--gpu-fp32-path 3xtf32: {why}", status="skipped")
    if why:
        return Plan(0, 0, "simt", f"fp32 FFMA ({why})")
    config = FLASH_TF32.config(problem)
    return Plan(config.br, config.bc, FLASH_TF32.path,
                "fp32 on tensor cores: 3xTF32 (mma.sync m16n8k8, each operand split into two TF32 halves, three "
                "products), as torch's EFFICIENT kernel")


def split_plan(problem: AttentionProblem, plan: Plan, dev, settings) -> Plan:
    """`plan` (a tensor-core one), or for a decode head (fewer than SPLIT_BELOW_ROWS queries against a longer KV
    cache) the split-KV plan: its variant's tile, and `kv_parts` blocks for this device."""
    if problem.queries >= SPLIT_BELOW_ROWS or problem.queries == problem.seq:
        return plan
    chosen = split_variant(problem, plan.path, settings.tc_path)
    config = chosen.config(problem)
    limits, why = dev.limits()
    rows = head_rows(problem, packed=True)
    tiles, key_blocks = flash_grid(rows.nq, config.br, rows.heads), -(-problem.seq // config.bc)
    [first, *_] = chosen.launches(problem, config.br, config.bc, tiles)
    resident = blocks_per_sm(first.smem, limits, first.block[0])
    # the partial states (written and read once in float32) stay a small share of the K/V stream
    kv = 2 * problem.batch * problem.kv_head_count * problem.seq * problem.dim * DTYPE_BYTES[problem.dtype]
    parts = fewer_parts(kv_parts(tiles, key_blocks, limits.sms, max(resident, 1)), tiles,
                        lambda count: partial_bytes(problem, config.br, config.bc, count) <= SPLIT_PARTIAL_SHARE * kv)
    split = len(split_tiles(tiles, key_blocks, parts))
    group = problem.heads // problem.kv_head_count
    shared = (f"{tiles} tile{'s' * (tiles > 1)} × {key_blocks} key blocks shared by {parts} blocks, "
              + (f"{split} tile{'s' * (split > 1)} split, merged "
                 + ("in place (the block finishing a tile's last piece)" if merges_in_place(chosen, problem)
                    else "by a second launch") if split
                 else "no tile split, O written directly"))
    note = (f"split-KV decode: {chosen.label.split(' ', 1)[1]}, {group} query head{'s' * (group > 1)} of a K/V head "
            f"packed: {rows.nq} row{'s' * (rows.nq > 1)} a K/V head in {config.br}-row tiles, {shared}")
    return Plan(config.br, config.bc, chosen.path, "; ".join(filter(None, [note, why])), parts)


def split_variant(problem: AttentionProblem, path: str, tc_path: str = "auto"):
    """The split-KV kernel of a decode head whose prefill plan took `path` (`tc_path`: --gpu-tc-path): the Hopper one
    (wgmma) where that plan is wgmma and either wgmma is forced or WGMMA_SPLIT_AUTO is on; else the mma.sync (16-bit)
    or 3xTF32 (float32) one."""
    if path == FLASH_WGMMA.path and problem.dim in dict(SPLIT_WGMMA.configs) and (tc_path == "wgmma"
                                                                                 or WGMMA_SPLIT_AUTO):
        return SPLIT_WGMMA
    return variant("flash", problem.dtype, "split-kv")


def partial_bytes(problem: AttentionProblem, br: int, bc: int, parts: int) -> int:
    """Device-memory bytes of a split-KV launch's partial states: each partial segment's rows (its tile's, at most
    Br) write d + 1 floats (O and lse) and the combine reads them once: 2·4·(d + 1) a row."""
    rows = head_rows(problem, packed=True)
    per_head = -(-rows.nq // br)
    tile_rows = [min(br, rows.nq - (tile % per_head) * br) for tile in range(per_head)]
    return sum(2 * 4 * (problem.dim + 1) * tile_rows[seg.tile % per_head]
               for seg in segments(per_head * rows.heads, -(-problem.seq // bc), parts) if seg.slot >= 0)


def split_tiles(tiles: int, key_blocks: int, parts: int) -> set[int]:
    """The tiles a share boundary cuts (the combine merges their rows)."""
    return {seg.tile for seg in segments(tiles, key_blocks, parts) if seg.slot >= 0}


def kv_parts(tiles: int, key_blocks: int, sms: int, resident: int) -> int:
    """Blocks of a split-KV launch of `tiles` tiles over `key_blocks` key blocks on `sms` SMs holding `resident`
    blocks each: `tiles` (a block a tile) where they fill SPLIT_FILL of the slots (sms · resident); else a block a
    slot where each share then holds SPLIT_LONG_RANGE key blocks, one an SM where it would not; at most one a
    SHARE_MIN_KEY_BLOCKS key blocks, and never fewer than the tiles (a short cache: a block a tile)."""
    for name, value in (("tiles", tiles), ("key_blocks", key_blocks), ("sms", sms), ("resident", resident)):
        check_int(name, value, 1, 1 << 31)
    units, slots = tiles * key_blocks, sms * resident
    if tiles >= SPLIT_FILL * slots:
        return tiles
    target = slots if units >= SPLIT_LONG_RANGE * slots else sms
    return max(tiles, min(target, units // SHARE_MIN_KEY_BLOCKS, MAX_PARTS))


def fewer_parts(parts: int, tiles: int, fits) -> int:
    """`parts` where its launch `fits` (a predicate on the block count: the partial states' bytes), else a count
    between `tiles` (a block a tile: no partial state, so it fits) and `parts` that fits, found by bisection: one
    that fits, not always the largest (the partial states grow with the count, but not monotonically: a count that
    aligns shares with tiles cuts fewer of them), `tiles` where the bisection finds none above it."""
    if parts <= tiles or fits(parts):
        return parts
    low, high = tiles, parts  # fits(low) holds (no partial state), fits(high) does not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def tc_plan(problem: AttentionProblem, capability: int, forced: str = "auto") -> Plan:
    """The tensor-core kernel for a 16-bit problem on a device of this compute capability (90 for sm_90): wgmma on
    Hopper, mma.sync from sm_80, or the `forced` one; TargetError (skipped) where none runs."""
    if problem.dim not in TC_DIMS:
        raise TargetError(f"the tensor-core flash kernels are built for d {', '.join(map(str, TC_DIMS))}; "
                          f"d={problem.dim} runs in float32 only", status="skipped")
    if capability < 80:
        raise TargetError(f"the tensor-core flash kernels need sm_80 or newer (mma.sync bf16, cp.async); this "
                          f"device is sm_{capability}", status="skipped")
    if forced == "wgmma" and capability != 90:
        raise TargetError(f"--gpu-tc-path wgmma: wgmma and the sm_90a target exist on sm_90 (Hopper) only; this "
                          f"device is sm_{capability}", status="skipped")
    if capability == 90 and forced != "mma":
        wgmma = FLASH_WGMMA.config(problem)
        return Plan(wgmma.br, wgmma.bc, FLASH_WGMMA.path,
                    f"tensor cores: wgmma (sm_90a), TMA tiles, a producer and {wgmma.consumers} consumer warpgroups, "
                    "fp32 accumulation")
    config = FLASH_TC.config(problem)
    why = "forced by --gpu-tc-path" if capability == 90 else f"no wgmma on sm_{capability}"
    return Plan(config.br, config.bc, FLASH_TC.path, f"tensor cores: mma.sync m16n8k16, fp32 accumulation ({why})")
