"""The GPU kernels on LLM inference shapes (issue 32): q_len queries against a longer KV cache (the causal mask
aligned to the bottom right) and grouped K/V heads, every kernel and dtype against the float64 golden at awkward
shapes, on the real device (marker gpu) and on the numpy fake; the split-KV decode path with forced block counts
(segments with no key of a row among them), its schedule and planner derived by hand, and its byte model."""

import dataclasses
import os

import pytest

from host.problem import AttentionProblem
from host.target_api import Inputs, RunContext, RunOptions
from kernels import shares, target
from kernels.plan import WGMMA_SPLIT_AUTO
from host.errors import SpecError
from kernels.variants import (SPLIT_TC, SPLIT_TC_FEW_ROWS, SPLIT_TF32, SPLIT_WGMMA, has_partials, head_rows,
                              packed_tiles, variant)

DEVICES = [pytest.param("cuda", marks=pytest.mark.gpu), "fake"]


def fresh(seq, q_len, heads, kv_heads, dim, causal, dtype="float32", batch=1):
    return AttentionProblem(batch=batch, heads=heads, kv_heads=kv_heads, seq=seq, q_len=q_len, dim=dim, causal=causal,
                            dtype=dtype, seed=int.from_bytes(os.urandom(4), "little"))


def options(kernel, device, **settings):
    return RunOptions(context=RunContext("test", "test", "test"), kernel=kernel, warmup=1, iters=2,
                      settings=target.Settings(device=device, **settings))


# (seq, q_len, heads, kv_heads): one query against 17 and 97 keys, a chunk of 3 and of 17, a prefill chunk of 97
# queries against 1025 keys (more than one query tile and key block), and square prefill with grouped heads
SHAPES = [(17, 1, 6, 2), (97, 3, 6, 3), (97, 17, 4, 1), (1025, 97, 4, 2), (97, 97, 6, 2)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", ["naive", "fused", "flash"])
@pytest.mark.parametrize("seq,q_len,heads,kv_heads", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_float32_kernels_take_every_shape(device, kernel, seq, q_len, heads, kv_heads, causal):
    for dim in (59, 64):  # the FFMA kernel at an odd d; 3xTF32 (and its split-KV variant) at 64
        problem = fresh(seq, q_len, heads, kv_heads, dim, causal)
        [row] = target.run(problem, Inputs(problem), options(kernel, device))
        assert row.status == "ok", row.message
        assert (row.q_len, row.kv_heads) == (problem.q_len, problem.kv_heads)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("seq,q_len,heads,kv_heads", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tc_path", ["auto", "mma", "wgmma"])
def test_16bit_flash_takes_every_shape(device, dtype, seq, q_len, heads, kv_heads, causal, tc_path):
    problem = fresh(seq, q_len, heads, kv_heads, 128 if seq == 97 else 64, causal, dtype)
    [row] = target.run(problem, Inputs(problem), options("flash", device, tc_path=tc_path))
    assert row.status == "ok", row.message
    # a decode head (fewer than 64 queries, against a longer cache) takes a split-KV path: the Hopper one (wgmma)
    # where wgmma is forced, or by default on a device whose prefill plan is wgmma (Hopper; the fake plans as one),
    # else mma.sync's; the message names it (the plan's note on a GPU, the variant's path on the fake)
    message = row.message.lower()
    decode = q_len < min(64, seq)
    assert ("split-kv" in message or "split-wgmma" in message) == decode, row.message
    if decode:
        settings = target.Settings(device=device)
        hopper = target.launch_plan(problem.with_(q_len=None), settings, target.backend(settings)).path == "wgmma"
        wgmma = tc_path == "wgmma" or (tc_path == "auto" and WGMMA_SPLIT_AUTO and hopper)
        assert ("wgmma" in message) == wgmma, row.message


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("parts", [1, 3, 7, 13, "units"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("q_len", [1, 5])
@pytest.mark.parametrize("path", ["split-kv", "split-wgmma"])
def test_forced_block_counts_combine_to_the_golden(device, dtype, parts, causal, q_len, path):
    """Block counts the planner would not pick: one block for every tile (whole tiles, no combine), shares that
    cut tiles anywhere, and one block a unit (every segment a single key block, with the mask segments after a row's
    last key): each row's combine must weigh the empty ones at zero. 2 launch heads of one tile each over 10 (fp32,
    Bc 32) or 8 (Bc 64) key blocks: 20 or 16 units. q_len 1 packs 4 rows (the 16-bit few-row launch, its key warps
    merged in the block), q_len 5 packs 20 (the 64-row one). The Hopper split kernel (16-bit, sm_90) takes both in
    64-row tiles over 8 key blocks of 64: 16 units, its Q tiles, stages and partial slots carried across segments;
    at d 64 and at d 128, whose ring of 4 K/V stages (8 at d 64) a share of more than 4 key blocks goes round."""
    from host.verdict import check_float

    if path == "split-wgmma" and dtype == "float32":
        pytest.skip("the Hopper split kernel is 16-bit")
    dev = target.backend(target.Settings(device=device))
    if path == "split-wgmma" and dev.capability() != 90:
        pytest.skip(f"the Hopper split kernel needs sm_90; this device is sm_{dev.capability()}")
    for dim in (64, 128) if path == "split-wgmma" else (64,):
        problem = fresh(320 if dtype == "float32" else 450, q_len, 8, 2, dim, causal, dtype)
        chosen = variant("flash", dtype, path)
        config = chosen.config(problem)
        count = 2 * -(-problem.seq // config.bc) if parts == "units" else parts
        launch = target.launcher("flash", problem, Inputs(problem), config.br, config.bc, dev, path, count)
        launch.launch()
        out = launch.output()
        target.check_output("flash", out)
        verdict = check_float(out, problem, Inputs(problem).golden)
        assert verdict.passed, f"d {dim}: {verdict.message}"


def test_shares_and_segments_by_hand():
    # 3 tiles × 5 key blocks = 15 units over 4 blocks: shares start at ⌊15c/4⌋ = 0, 3, 7, 11 (end 15). Block 1's share
    # (units 3..6) is tile 0's key blocks 3, 4 (its share began in tile 0: slot 2) and tile 1's 0, 1 (slot 3)
    assert shares.segments(3, 5, 4) == [(0, 0, 0, 3, 0), (1, 0, 3, 5, 2), (1, 1, 0, 2, 3), (2, 1, 2, 5, 4),
                                        (2, 2, 0, 1, 5), (3, 2, 1, 5, 6)]
    assert shares.partial_segments(3, 5, 4) == 6
    # a block a tile: every share is one whole tile, O written directly; one block: all three tiles whole
    assert [seg.slot for seg in shares.segments(3, 5, 3)] == [-1, -1, -1]
    assert shares.segments(3, 5, 1) == [(0, 0, 0, 5, -1), (0, 1, 0, 5, -1), (0, 2, 0, 5, -1)]
    with pytest.raises(SpecError, match=r"parts=16 is out of range"):
        shares.segments(3, 5, 16)  # more blocks than units: a share would be empty


def test_a_split_launch_packs_the_group_and_merges_where_a_tile_is_cut():
    # Llama 3 8B decode, batch 2: 32 query heads on 8 K/V heads, so a launch head holds G = 4 query heads' 1 query
    # each: 2·8 = 16 launch heads of 4 rows; 4 ≤ 16 rows: the few-row launch, one 16-row tile each, its 4 warps
    # splitting each 64-key block (template <..., 3 stages, 4 key warps>); 16 tiles × 64 key blocks = 1,024 units
    problem = AttentionProblem(batch=2, heads=32, kv_heads=8, seq=4096, q_len=1, dim=128, dtype="float16")
    assert head_rows(problem, packed=True) == (16, 4, 1, 1) and head_rows(problem) == (64, 1, 1, 4)
    assert SPLIT_TC.config(problem) == SPLIT_TC_FEW_ROWS and SPLIT_TC_FEW_ROWS.br == 16
    assert packed_tiles(problem, 16) == 16  # one ticket a tile for the in-place merge
    # 8 blocks: 128 units each, two whole tiles: no tile cut, nothing to merge
    [kernel] = SPLIT_TC.launches(problem, 16, 64, 8)
    assert not has_partials(problem, 16, 64, 8)
    # the segment loop and the in-place merge compiled in (SHARED, MERGE)
    assert kernel.function == "flash_tc_fwd<__half,128,4,64,1,3,4,true,true>"
    assert kernel.grid == (8,) and dict(kernel.ints) == {"nq": 4, "qlen": 1, "n": 4096, "group": 1, "d": 128,
                                                         "causal": 0, "heads": 16, "parts": 8}
    assert "tickets" in kernel.args
    # 24 blocks: shares of 42 or 43 units cut tiles; the 16-bit mma.sync kernel merges them itself: one launch
    assert has_partials(problem, 16, 64, 24)
    [kernel] = SPLIT_TC.launches(problem, 16, 64, 24)
    assert kernel.grid == (24,)
    # and so does the Hopper split kernel (64-row tiles, Bc 64 at d 128, 4 stages; MERGE)
    [kernel] = SPLIT_WGMMA.launches(problem, 64, 64, 24)
    assert kernel.function == "decode_wgmma_fwd<0,128,64,4,true>" and "tickets" in kernel.args
    # fp32: the 64-row 3xTF32 launch, Bc 32: 16 tiles × 128 key blocks; 3 blocks cut tiles, and the combine launch
    # merges them: it looks at B·H·q_len = 64 rows, 4 a block: 16 blocks
    kernel, combine = SPLIT_TF32.launches(problem.with_(dtype="float32"), 64, 32, 3)
    assert kernel.grid == (3,) and combine.grid == (16,) and combine.source == "split_combine.cu"
    assert dict(combine.ints) == {"rows": 64, "nq": 4, "n": 4096, "heads": 16, "parts": 3}
    assert combine.function == "split_combine<float,128,64,32>" and "tickets" not in kernel.args
    assert len(SPLIT_TF32.launches(problem.with_(dtype="float32"), 64, 32, 2)) == 1  # 8 whole tiles each
    # 16 queries: G·q_len = 64 packed rows, the 64-row launch (4 warps of 16 rows, 3 stages): 16 tiles, a block each;
    # over MERGE_MAX_ROWS = 16 rows a tile no in-place merge (the instance without it) ...
    wide = problem.with_(q_len=16)
    [kernel] = SPLIT_TC.launches(wide, 64, 64, 16)
    assert kernel.function == "flash_tc_fwd<__half,128,4,64,1,3,1,true>" and kernel.grid == (16,)
    # ... and where its tiles are cut, the combine launch: 2·32·16 = 1,024 rows, 4 a block
    kernel, combine = SPLIT_WGMMA.launches(wide, 64, 64, 24)
    assert kernel.function == "decode_wgmma_fwd<0,128,64,4>" and combine.grid == (256,)
    assert dict(combine.ints) == {"rows": 1024, "nq": 64, "n": 4096, "heads": 16, "parts": 24}
    with pytest.raises(SpecError, match=r"parts=1025 is out of range"):
        SPLIT_TC.launches(problem, 16, 64, 1025)  # one block a unit at most


def test_a_tile_other_than_the_launch_configurations_is_refused():
    """The grid is sized from the Br given, the kernel's rows from its configuration: another Br would index past
    the heads (a review found the launcher accepted Br 16 for the 64-row launch)."""
    problem = AttentionProblem(heads=8, kv_heads=2, seq=450, q_len=5, dim=64, dtype="float16")  # 20 packed rows
    with pytest.raises(SpecError, match=r"runs Br=64, Bc=64 at d 64 \(kernels/variants.py\); asked for Br=16, Bc=64"):
        SPLIT_TC.launches(problem, 16, 64, 3)
    with pytest.raises(SpecError, match=r"asked for Br=64, Bc=32"):
        target.launcher("flash", problem, None, 64, 32, target.backend(target.Settings("fake")), "split-kv", 3)


def test_the_benchmark_times_the_other_split_kernel_beside_the_planned_one():
    from kernels.inference_bench import OTHER_SETTINGS

    # q_len 16 of Llama 3 8B (32 heads on 8): 4 · 16 = 64 packed rows, over the few-row launch's 16: on sm_90 the
    # bench's `other us` column runs the split kernel the plan did not take, as its own plan would
    problem = AttentionProblem(batch=8, heads=32, kv_heads=8, seq=4096, q_len=16, dim=128, dtype="float16")
    auto = target.Settings(device="fake")
    planned = target.launch_plan(problem, auto, target.backend(auto)).path
    other = dataclasses.replace(OTHER_SETTINGS[planned], device="fake")
    assert {planned, target.launch_plan(problem, other, target.backend(other)).path} == {"split-kv", "split-wgmma"}


# kv_parts: a block a tile where the tiles fill 0.85 of the slots (SMs · resident = 264); else a block a slot where
# each share then holds 32 key blocks (units ≥ 32 · 264 = 8,448), else one an SM (132); at most one a 4 key blocks,
# at least one a tile
@pytest.mark.parametrize("tiles,key_blocks,sms,resident,parts", [
    (8, 2048, 132, 2, 264),  # batch-1 decode at 128k: 16,384 units ≥ 8,448: a block a slot
    (8, 1024, 132, 2, 132),  # at 64k: 8,192 < 8,448: one an SM (the H200: 88.3 µs against 94.2 on 264)
    (8, 256, 132, 2, 132),   # at 16k: 2,048 units: one an SM (37.3 µs against 40.2)
    (8, 64, 132, 2, 128),    # at 4k: 512 units / 4 = 128 blocks of 4 key blocks
    (512, 64, 132, 2, 512),  # batch 64 at 4k: 512 ≥ 224.4 tiles: a block a tile
    (224, 64, 132, 2, 264),  # 224 < 224.4 tiles: shared, 14,336 units ≥ 8,448: a block a slot
    (4, 1, 132, 2, 4),       # 4 units, under 4 key blocks a block: still a block a tile, never fewer
    (8, 2, 132, 2, 8),       # 16 units: 4 blocks of 4 would run two tiles each one after another; a block a tile
    (2, 10, 132, 2, 5),      # 20 units: 5 blocks of 4
])
def test_block_counts_by_hand(tiles, key_blocks, sms, resident, parts):
    assert target.kv_parts(tiles, key_blocks, sms, resident) == parts


def test_block_counts_refuse_an_empty_launch():
    with pytest.raises(SpecError, match=r"tiles=0 is out of range"):
        target.kv_parts(0, 10, 132, 2)


def test_the_partial_states_cap_the_block_count():
    # 64 query heads on 1 K/V head, q_len 63, 1,025 keys, bf16: 4,032 packed rows, 63 tiles of 64 rows over 17 key
    # blocks = 1,071 units; kv_parts gives one block an SM (1,071 < 8,448), 132 shares of 8 or 9 units, nearly every
    # one a partial segment of 64 rows · 129 floats · 8 B = 66,048 B: far over a quarter of K and V (2·1025·128·2 =
    # 524,800 B: room for 1 partial segment); any count between 63 and 132 cuts more than one tile, so a block a
    # tile (63): no tile cut, no partial state
    problem = AttentionProblem(heads=64, kv_heads=1, seq=1025, q_len=63, dim=128, dtype="bfloat16")
    assert target.partial_bytes(problem, 64, 64, 132) > 0.25 * 524_800
    assert all(target.partial_bytes(problem, 64, 64, parts) > 66_048 for parts in range(64, 133))
    # the same on either split kernel: mma.sync's (two blocks an SM: kv_parts gives 132 the same way) and the
    # Hopper one (one block an SM: 132 slots)
    for tc_path, path in (("mma", "split-kv"), ("wgmma", "split-wgmma")):
        settings = target.Settings(device="fake", tc_path=tc_path)
        plan = target.launch_plan(problem, settings, target.backend(settings))
        assert plan.path == path and plan.parts == 63 and "no tile split, O written directly" in plan.note
    assert target.partial_bytes(problem, 64, 64, 63) == 0


def test_the_split_byte_model_adds_the_partial_states():
    problem = AttentionProblem(batch=1, heads=32, kv_heads=8, seq=4096, q_len=1, dim=128, dtype="float16")
    # K, V: 2 · 8 heads · 4096 · 128 · 2 B = 16,777,216; Q, O: 2 · 32 · 128 · 2 = 16,384. 128 blocks over 8 tiles ×
    # 64 key blocks: shares of 4 key blocks, 16 a tile, none whole: 128 partial segments of a tile's 4 rows, written
    # and read once in float32: 2 · 4 · 129 · 4 rows · 128 = 528,384
    assert target.model_bytes("flash", problem) == 16_777_216 + 16_384
    plan = target.Plan(16, 64, "split-kv", parts=128)
    assert target.model_bytes("flash", problem, plan) == 16_777_216 + 16_384 + 528_384
    # naive: 4·(2·BH·M·d + 2·BHkv·N·d + 4·BH·M·N) = 4·(8,192 + 8,388,608 + 524,288)
    assert target.model_bytes("naive", problem.with_(dtype="float32")) == 4 * (8_192 + 8_388_608 + 524_288)


def test_a_decode_row_names_its_split_plan():
    problem = fresh(4096, 1, 32, 8, 128, False, "float16")
    plan = target.launch_plan(problem, target.Settings(device="fake"), target.backend(target.Settings("fake")))
    # on Hopper (the fake plans as one) the Hopper split kernel: 64-row tiles, Bc 64 at d 128; batch 1 has 8 launch
    # heads of one tile (4 packed rows) over 64 key blocks: 512 units; one block an SM would give 132, but at most
    # one a 4 key blocks: 128, each tile cut 16 ways and merged in place
    assert plan.path == "split-wgmma" and plan.parts == 128 and (plan.br, plan.bc) == (64, 64)
    assert "tensor-core flash (wgmma), 4 query heads of a K/V head packed: 4 rows a K/V head in 64-row tiles, 8 " \
           "tiles × 64 key blocks shared by 128 blocks, 8 tiles split, merged in place (the block finishing a " \
           "tile's last piece)" in plan.note
    # under --gpu-tc-path mma: the few-row launch (16-row tiles, four key warps), the same 128 blocks (test_block_
    # counts_by_hand's 4k case)
    mma = target.Settings(device="fake", tc_path="mma")
    plan = target.launch_plan(problem, mma, target.backend(mma))
    assert plan.path == "split-kv" and plan.parts == 128 and (plan.br, plan.bc) == (16, 64)
    assert "4 query heads of a K/V head packed: 4 rows a K/V head in 16-row tiles, 8 tiles × 64 key blocks shared " \
           "by 128 blocks, 8 tiles split, merged in place (the block finishing a tile's last piece)" in plan.note
    # the fp32 split kernel keeps the combine launch
    plan = target.launch_plan(problem.with_(dtype="float32"), target.Settings(device="fake"),
                              target.backend(target.Settings("fake")))
    assert plan.path == "split-kv" and "split, merged by a second launch" in plan.note
    square = problem.with_(q_len=None)
    assert target.launch_plan(square, target.Settings(device="fake"),
                              target.backend(target.Settings("fake"))).path == "wgmma"


def test_a_large_batch_decode_takes_a_block_a_tile_past_the_planners_cap():
    # a review found batch 4096 refused once the grid was one-dimensional: 4096 · 32 launch heads of one query (no
    # grouping), one 16-row tile each: 131,072 tiles ≥ 0.85 of the slots, so a block a tile, past MAX_PARTS = 65,536
    # and within CUDA's grid x limit
    # (the mma.sync launch, --gpu-tc-path mma; on Hopper the Hopper split kernel's 64-row tiles are as many here)
    problem = AttentionProblem(batch=4096, heads=32, seq=2, q_len=1, dim=128, dtype="float16")
    mma = target.Settings(device="fake", tc_path="mma")
    plan = target.launch_plan(problem, mma, target.backend(mma))
    assert plan.path == "split-kv" and plan.parts == 131_072 and "no tile split, O written directly" in plan.note
    [kernel] = SPLIT_TC.launches(problem, plan.br, plan.bc, plan.parts)
    assert kernel.grid == (131_072,)
    plan = target.launch_plan(problem, target.Settings(device="fake"), target.backend(target.Settings("fake")))
    assert plan.path == "split-wgmma" and plan.parts == 131_072 and "no tile split" in plan.note
