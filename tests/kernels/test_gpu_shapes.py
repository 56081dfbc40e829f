"""The GPU kernels on LLM inference shapes (issue 32): q_len queries against a longer KV cache (the causal mask
aligned to the bottom right) and grouped K/V heads, every kernel and dtype against the float64 golden at awkward
shapes, on the real device (marker gpu) and on the numpy fake; the split-KV decode path with forced split counts
(ranges with no key of a row among them), its planner's split counts derived by hand, and its byte model."""

import os

import pytest

from host.problem import AttentionProblem
from host.target_api import Inputs, RunContext, RunOptions
from kernels import target
from host.errors import SpecError
from kernels.variants import SPLIT_TC, SPLIT_TC_FEW_ROWS, SPLIT_TF32, head_rows, variant

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
    # a decode head (fewer than 64 queries, against a longer cache) takes the split-KV path, which is mma.sync: on
    # the planner's choice and where mma.sync is forced, not where wgmma is
    assert ("split-kv" in row.message.lower()) == (tc_path != "wgmma" and q_len < min(64, seq)), row.message


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("splits", [2, 3, 7])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("q_len", [1, 5])
def test_forced_split_counts_combine_to_the_golden(device, dtype, splits, causal, q_len):
    """Split counts the planner would not pick, among them more ranges than key blocks (ranges past the keys, and
    with the mask ranges after a row's last key): each row's combine must weigh the empty ones at zero. q_len 1 packs
    4 rows (the 16-bit few-row launch, its key warps merged in the block), q_len 5 packs 20 (the 64-row one)."""
    problem = fresh(320 if dtype == "float32" else 450, q_len, 8, 2, 64, causal, dtype)
    chosen = variant("flash", dtype, "split-kv")
    config = chosen.config(problem)
    dev = target.backend(target.Settings(device=device))
    launch = target.launcher("flash", problem, Inputs(problem), config.br, config.bc, dev, "split-kv", splits)
    launch.launch()
    out = launch.output()
    target.check_output("flash", out)
    from host.verdict import check_float

    verdict = check_float(out, problem, Inputs(problem).golden)
    assert verdict.passed, verdict.message


def test_a_split_launch_packs_the_group_and_adds_the_combine():
    # Llama 3 8B decode, batch 2: 32 query heads on 8 K/V heads, so a launch head holds G = 4 query heads' 1 query
    # each: 2·8 = 16 launch heads of 4 rows; 4 ≤ 16 rows: the few-row launch, one 16-row tile each, its 4 warps
    # splitting each 64-key block (template <..., 3 stages, 4 key warps>); 8 splits on grid y; the combine merges
    # B·H·q_len = 64 rows, 4 a block: 16 blocks
    problem = AttentionProblem(batch=2, heads=32, kv_heads=8, seq=4096, q_len=1, dim=128, dtype="float16")
    assert head_rows(problem, packed=True) == (16, 4, 1, 1) and head_rows(problem) == (64, 1, 1, 4)
    assert SPLIT_TC.config(problem) == SPLIT_TC_FEW_ROWS and SPLIT_TC_FEW_ROWS.br == 16
    kernel, combine = SPLIT_TC.launches(problem, 16, 64, 8)
    assert kernel.function == "flash_tc_fwd<__half,128,4,64,1,3,4>"
    assert kernel.grid == (16, 8) and dict(kernel.ints) == {"nq": 4, "qlen": 1, "n": 4096, "group": 1, "d": 128,
                                                            "causal": 0, "splits": 8}
    assert combine.grid == (16,) and combine.source == "split_combine.cu" and dict(combine.ints) == {"rows": 64,
                                                                                                      "splits": 8}
    assert combine.function == "split_combine<__half,128>"
    assert SPLIT_TF32.launches(problem.with_(dtype="float32"), 64, 32, 2)[1].function == "split_combine<float,128>"
    assert len(SPLIT_TC.launches(problem, 16, 64, 1)) == 1  # one range: O written directly, no combine
    # 16 queries: G·q_len = 64 packed rows, the 64-row launch (4 warps of 16 rows, 3 stages): ⌈64/64⌉ · 16 = 16
    wide = problem.with_(q_len=16)
    [kernel] = SPLIT_TC.launches(wide, 64, 64, 1)
    assert kernel.function == "flash_tc_fwd<__half,128,4,64,1,3>" and kernel.grid == (16, 1)


def test_a_tile_other_than_the_launch_configurations_is_refused():
    """The grid is sized from the Br given, the kernel's rows from its configuration: another Br would index past
    the heads (a review found the launcher accepted Br 16 for the 64-row launch)."""
    problem = AttentionProblem(heads=8, kv_heads=2, seq=450, q_len=5, dim=64, dtype="float16")  # 20 packed rows
    with pytest.raises(SpecError, match=r"runs Br=64, Bc=64 at d 64 \(kernels/variants.py\); asked for Br=16, Bc=64"):
        SPLIT_TC.launches(problem, 16, 64, 3)
    with pytest.raises(SpecError, match=r"asked for Br=64, Bc=32"):
        target.launcher("flash", problem, None, 64, 32, target.backend(target.Settings("fake")), "split-kv", 3)


def test_the_benchmarks_alternative_launch_is_a_64_row_one():
    from kernels.inference_bench import ALTERNATIVE

    # 2 m-tiles · 4 warps / 2 key warps · 16 = 64 rows; 64 keys split between 2 key warps: 32 each
    assert ALTERNATIVE.br == 64 and ALTERNATIVE.bc // ALTERNATIVE.key_warps == 32


# slots = SMs · resident; no split when blocks ≥ 0.85 · slots. Else the target is every slot (per_sm = resident)
# when the fewest splits that fill it, n = ⌈0.85 · slots / blocks⌉, leave key_blocks / n ≥ 32 key blocks a range,
# else one block an SM (per_sm = 1); among s ≤ min(128, key_blocks / 2) with blocks · s ≥ 0.85 · SMs · per_sm, the
# smallest whose balance b(s) = (blocks·s / SMs) / ⌈blocks·s / SMs⌉ ≥ 0.95
@pytest.mark.parametrize("blocks,key_blocks,sms,resident,splits", [
    # batch-1 decode at 128k: n = ⌈224.4 / 8⌉ = 29, 2048 / 29 = 70.6 ≥ 32: every slot; s ≥ 28.05, so 29..128;
    # b(29) = 1.758/2 = 0.879, b(30) = 0.909, b(31) = 0.939, b(32) = 256/132 = 1.939 → 0.970: s = 32
    (8, 2048, 132, 2, 32),
    # at 64k: 1024 / 29 = 35.3 ≥ 32: the same, s = 32
    (8, 1024, 132, 2, 32),
    # at 16k: 256 / 29 = 8.8 < 32: one block an SM; s ≥ 112.2 / 8 = 14.03; b(15) = 120/132 = 0.909,
    # b(16) = 128/132 = 0.970: s = 16 (the H200 ran 16 in 33.8 µs, 32 in 38.0: run5_split_sweep)
    (8, 256, 132, 2, 16),
    # at 4k: 64 / 29 = 2.2 < 32: one block an SM, s = 16 as above (counts up to 64 / 2 = 32)
    (8, 64, 132, 2, 16),
    # batch 2 at 128k: n = 15, 2048 / 15 = 136.5: every slot; s ≥ 14.03; b(15) = 240/132 = 1.818 → 0.909,
    # b(16) = 1.939 → 0.970: s = 16
    (16, 2048, 132, 2, 16),
    # batch 8 at 4k: n = 4, 64 / 4 = 16 < 32: one block an SM; s ≥ 112.2 / 64 = 1.75; b(2) = 128/132 = 0.970: s = 2
    (64, 64, 132, 2, 2),
    (300, 64, 132, 2, 1),  # 300 ≥ 224.4: no split
    (4, 1, 132, 2, 1),     # a single key block: nothing to split (at most key_blocks / 2 ranges, at least 1)
    (4, 10, 132, 2, 5),    # too few key blocks to fill one block an SM: the most ranges allowed, 10 / 2
])
def test_split_counts_by_hand(blocks, key_blocks, sms, resident, splits):
    assert target.kv_splits(blocks, key_blocks, sms, resident) == splits


def test_split_counts_refuse_an_empty_launch():
    with pytest.raises(SpecError, match=r"blocks=0 is out of range"):
        target.kv_splits(0, 10, 132, 2)


def test_the_partial_states_cap_the_split_count():
    # 64 query heads on 1 K/V head, q_len 63, 1,025 keys, bf16: 4,032 packed rows, 63 tiles of 64 rows: the fill rule
    # asks for 4 splits (63·4 = 252 ≥ 224.4, balance 252/132 → 0.955); K and V are 2·1025·128·2 = 524,800 B, one
    # split's partials 2·4·64·63·129 = 4,161,024 B: a quarter of K/V allows 0 whole splits, so 1
    problem = AttentionProblem(heads=64, kv_heads=1, seq=1025, q_len=63, dim=128, dtype="bfloat16")
    plan = target.launch_plan(problem, target.Settings(device="fake"), target.backend(target.Settings("fake")))
    assert plan.path == "split-kv" and plan.splits == 1 and "O written directly" in plan.note


def test_the_split_byte_model_adds_the_partial_states():
    problem = AttentionProblem(batch=1, heads=32, kv_heads=8, seq=4096, q_len=1, dim=128, dtype="float16")
    # K, V: 2 · 8 heads · 4096 · 128 · 2 B = 16,777,216; Q, O: 2 · 32 · 128 · 2 = 16,384; partials written and read
    # once in float32: 2 · 4 · 8 splits · 32 rows · 129 = 264,192
    assert target.model_bytes("flash", problem) == 16_777_216 + 16_384
    assert target.model_bytes("flash", problem, splits=8) == 16_777_216 + 16_384 + 264_192
    # naive: 4·(2·BH·M·d + 2·BHkv·N·d + 4·BH·M·N) = 4·(8,192 + 8,388,608 + 524,288)
    assert target.model_bytes("naive", problem.with_(dtype="float32")) == 4 * (8_192 + 8_388_608 + 524_288)


def test_a_decode_row_names_its_split_plan():
    problem = fresh(4096, 1, 32, 8, 128, False, "float16")
    plan = target.launch_plan(problem, target.Settings(device="fake"), target.backend(target.Settings("fake")))
    # 4 packed rows: the few-row launch (one 16-row block, four key warps); batch 1 has 8 launch heads of one tile,
    # so 8 blocks over 64 key blocks, split 16 ways (test_split_counts_by_hand's 4k case)
    assert plan.path == "split-kv" and plan.splits == 16 and (plan.br, plan.bc) == (16, 64)
    assert "4 query heads of a K/V head packed: 4 rows a K/V head in 16-row blocks, keys cut into 16 ranges (128 " \
           "blocks), merged by a second launch" in plan.note
    square = problem.with_(q_len=None)
    assert target.launch_plan(square, target.Settings(device="fake"),
                              target.backend(target.Settings("fake"))).path == "wgmma"
