"""The GPU target's launch planner: which flash kernel runs a problem on a device (the tensor-core path of a 16-bit
problem, 3xTF32 or FFMA in float32), its tile, and for decode heads the split-KV plan (packed K/V groups, the split
count `kv_splits` derives from the device's SMs and block slots). kernels/target.py checks and launches the plan;
`settings` is its Settings (tc_path, fp32_path, tile), `dev` its device (kernels/cuda.py or kernels/fake.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from host.checks import check_int
from host.errors import SpecError, TargetError
from host.problem import DTYPE_BYTES, AttentionProblem
from kernels.budget import blocks_per_sm
from kernels.halves import HALF_DTYPES
from kernels.variants import (DEFAULT_TILES, FLASH_TC, FLASH_TF32, FLASH_WGMMA, MAX_SPLITS, TC_DIMS, TF32_DIMS,
                              flash_grid, head_rows, variant)

#: Below this many query tiles per SM, halve Br (down to 32) to fill the SMs: the sweep's best at N <= 1024.
MIN_TILES_PER_SM = 1
H200_SMS = 132
#: Heads with fewer queries than this (one prefill query tile of 64 rows) run flash on the split-KV path.
SPLIT_BELOW_ROWS = 64
#: The split-KV planner (`kv_splits`): enough blocks to fill this fraction of the SMs' block slots, and among those
#: the fewest splits that give every SM nearly the same number of blocks (this fraction of the busiest SM's count).
#: FlashAttention-2's rule (waves over SM slots) left 232 blocks on 132 SMs of 2 slots: 100 SMs ran 2, 32 ran 1, and
#: batch-1 decode reached 0.83 of the copy bandwidth (reports/issue-32/gpu/run2_three_stages).
SPLIT_FILL = 0.85
SPLIT_BALANCE = 0.95
#: ... filling every block slot only where each range keeps this many key blocks, else one block an SM: forced
#: counts on the H200 (reports/issue-32/gpu/run5_split_sweep) ran batch-1 decode at 16k keys in 33.8 µs with 16
#: ranges of 16 key blocks (128 blocks) against 38.0 µs with 32 of 8 (256), and at 128k best with 32 of 64.
SPLIT_LONG_RANGE = 32
#: ... and no more splits than keep the partial states' traffic within this share of the K/V bytes (many query rows
#: against a short cache: 64 heads on 1 K/V head at q_len 63 and 1,025 keys wanted 4, whose partials were 6× K and V).
SPLIT_PARTIAL_SHARE = 0.25
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
    (float32), "split-kv" (either, `splits` key ranges); the note goes into the flash row's message."""

    br: int
    bc: int
    path: str = ""
    note: str = ""
    splits: int = 1


def launch_plan(problem: AttentionProblem, settings, dev) -> Plan:
    """The flash launch of this problem on this device: for 16-bit problems the tensor-core path and its tile
    (`tc_plan`); for float32 the 3xTF32 kernel where `fp32_plan` picks it, else the FFMA kernel with the forced
    tile or the default for the device's SM count (the note says when that count is a fallback)."""
    if problem.dtype in HALF_DTYPES:  # the split-KV kernel is the mma.sync one: not where wgmma is forced
        plan = tc_plan(problem, dev.capability(), settings.tc_path)
        return split_plan(problem, plan, dev, settings) if settings.tc_path != "wgmma" else plan
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
    cache) the split-KV plan: its variant's tile, and `kv_splits` key ranges for this device."""
    if problem.queries >= SPLIT_BELOW_ROWS or problem.queries == problem.seq:
        return plan
    chosen = variant("flash", problem.dtype, "split-kv")
    config = chosen.config(problem)
    limits, why = dev.limits()
    rows = head_rows(problem, packed=True)
    blocks = flash_grid(rows.nq, config.br, rows.heads)
    resident = blocks_per_sm(chosen.smem(problem, config.br, config.bc), limits, 32 * config.warps)
    splits = kv_splits(blocks, -(-problem.seq // config.bc), limits.sms, max(resident, 1))
    # the partial states (written and read once in float32) stay a small share of the K/V stream
    partial_per_split = 2 * 4 * problem.batch * problem.heads * problem.queries * (problem.dim + 1)
    kv = 2 * problem.batch * problem.kv_head_count * problem.seq * problem.dim * DTYPE_BYTES[problem.dtype]
    splits = max(1, min(splits, int(SPLIT_PARTIAL_SHARE * kv // partial_per_split)))
    group = problem.heads // problem.kv_head_count
    ranges = (f"keys cut into {splits} ranges ({blocks * splits} blocks), merged by a second launch" if splits > 1
              else f"keys in one range ({blocks} blocks), O written directly")
    note = (f"split-KV decode: {chosen.label.split(' ', 1)[1]}, {group} query head{'s' * (group > 1)} of a K/V head "
            f"packed: {rows.nq} row{'s' * (rows.nq > 1)} a K/V head in {config.br}-row blocks, {ranges}")
    return Plan(config.br, config.bc, "split-kv", "; ".join(filter(None, [note, why])), splits)


def kv_splits(blocks: int, key_blocks: int, sms: int, resident: int) -> int:
    """Key ranges for a launch of `blocks` blocks over `key_blocks` key blocks on `sms` SMs holding `resident`
    blocks each: 1 when the blocks already fill SPLIT_FILL of the slots (sms · resident). Else the blocks are split
    to fill every slot where that leaves each range at least SPLIT_LONG_RANGE key blocks, and one block an SM where
    it would not (short ranges pay their pipeline fill and partial state more than a second block an SM buys);
    among the counts that fill the target (at most MAX_SPLITS, each range at least two key blocks), the smallest that
    balances the SMs to within SPLIT_BALANCE (blocks · s / sms over its ceiling: the busiest SM sets a memory-bound
    launch's time), or the best balanced of them."""
    for name, value in (("blocks", blocks), ("key_blocks", key_blocks), ("sms", sms), ("resident", resident)):
        check_int(name, value, 1, 1 << 31)
    if blocks >= SPLIT_FILL * sms * resident:
        return 1
    counts = range(1, max(1, min(MAX_SPLITS, key_blocks // 2)) + 1)

    def needed(per_sm: int) -> int:  # the fewest splits whose blocks fill SPLIT_FILL of per_sm blocks an SM
        return math.ceil(SPLIT_FILL * sms * per_sm / blocks)

    per_sm = resident if key_blocks / needed(resident) >= SPLIT_LONG_RANGE else 1

    def balance(splits: int) -> float:
        per = blocks * splits / sms
        return per / -(-per // 1)

    enough = [count for count in counts if blocks * count >= SPLIT_FILL * sms * per_sm] or [counts[-1]]
    return next((count for count in enough if balance(count) >= SPLIT_BALANCE), max(enough, key=balance))


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
