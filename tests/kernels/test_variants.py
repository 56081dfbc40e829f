"""kernels/variants.py: every variant's record gives the launches the launcher built before the records existed (the
same name expression, threads, shared memory and grid), each expected value derived by hand in a comment from the
kernel's launch as kernels/cuda.py wrote it; and a plan path picks the variant kernels/cuda.py picked."""

import dataclasses

import pytest

from host.errors import SpecError
from host.problem import AttentionProblem
from kernels import variants
from kernels.variants import FLASH, FLASH_TC, FLASH_TF32, FLASH_WGMMA, FUSED, NAIVE, Launch

FLASH_ARGS = ("q", "k", "v", "out", "nq", "n", "group", "scale_log2", "causal")
SPLIT_ARGS = ("q", "k", "v", "out", "o_part", "lse", "nq", "qlen", "n", "group", "heads", "parts", "scale_log2",
              "causal")
# the mma.sync 16-bit kernel's: the split tiles' tickets (its in-place merge) after the partial states
TC_ARGS = ("q", "k", "v", "out", "o_part", "lse", "tickets", "nq", "qlen", "n", "group", "heads", "parts",
           "scale_log2", "causal")
MAP_ARGS = ("q_map", "k_map", "v_map", "out", "nq", "n", "group", "heads", "scale_log2", "causal")


def square(n, d, causal=False, **more):
    """The integer arguments of a launch of a square problem: N query rows a head, each its own query (qlen N),
    N keys, one query head per K/V head."""
    return (("nq", n), ("qlen", n), ("n", n), ("group", 1), ("d", d), ("causal", int(causal)), *more.items())


def problem(batch, heads, seq, dim, causal=False, dtype="float32"):
    return AttentionProblem(batch=batch, heads=heads, seq=seq, dim=dim, causal=causal, dtype=dtype)


# naive: 16×16 thread tiles; T = ⌈N/16⌉; scores grid (T, T, B·H), softmax (N, B·H) × 256 threads, P·V (⌈d/16⌉, T, B·H)
@pytest.mark.parametrize("shape, scores_grid, softmax_grid, pv_grid", [
    ((1, 2, 17, 59), (2, 2, 2), (17, 2), (4, 2, 2)),          # T = ⌈17/16⌉ = 2; ⌈59/16⌉ = 4; B·H = 2
    ((2, 3, 1025, 64), (65, 65, 6), (1025, 6), (4, 65, 6)),   # T = ⌈1025/16⌉ = 65; ⌈64/16⌉ = 4; B·H = 6
    ((1, 1, 1, 16), (1, 1, 1), (1, 1), (1, 1, 1)),            # one of everything
])
def test_naive_launches(shape, scores_grid, softmax_grid, pv_grid):
    p = problem(*shape)
    ints = square(shape[2], shape[3])
    assert NAIVE.launches(p, 0, 0) == (
        Launch("naive_scores", scores_grid, (16, 16), 0, ("q", "k", "s", "nq", "n", "group", "d", "scale", "causal"),
               ints),
        Launch("naive_softmax", softmax_grid, (256,), 0, ("s", "nq", "n"), ints),
        Launch("naive_pv", pv_grid, (16, 16), 0, ("s", "v", "out", "nq", "n", "group", "d"), ints))
    assert NAIVE.expressions(p, 0, 0) == ()  # extern "C" kernels: no name expressions
    assert NAIVE.smem(p, 0, 0) == 0


# fused: one block of 256 threads per (query row, head); shared memory 4·(N + 32) bytes
@pytest.mark.parametrize("shape, grid, smem", [
    ((1, 2, 17, 59), (17, 2), 196),          # 4·(17 + 32) = 196
    ((1, 16, 4096, 64), (4096, 16), 16512),  # 4·4128 = 16,512
    ((2, 1, 20000, 16), (20000, 2), 80128),  # 4·20,032 = 80,128: over 48 KB, the launcher raises the opt-in
])
def test_fused_launches(shape, grid, smem):
    p = problem(*shape)
    assert FUSED.launches(p, 0, 0) == (
        Launch("fused_row", grid, (256,), smem, ("q", "k", "v", "out", "nq", "n", "group", "d", "scale_log2", "causal"),
               square(shape[2], shape[3])),)
    assert FUSED.expressions(p, 0, 0) == ()


# FFMA flash: flash_fwd<Br,Bc,d>, 128 threads, grid ⌈N/Br⌉·B·H, smem 4·(Br·QP + Bc·KP + Bc·d + Br·(Bc+4) + 3·Br)
@pytest.mark.parametrize("shape, tile, expression, grid, smem", [
    # QP = 64, KP = 68: 4·(128·64 + 64·68 + 64·64 + 128·68 + 3·128) = 4·(8192 + 4352 + 4096 + 8704 + 384) = 102,912;
    # ⌈4096/128⌉ = 32 tiles × 16 heads = 512
    ((1, 16, 4096, 64), (128, 64), "flash_fwd<128,64,64>", 512, 102912),
    # d = 59: QP = KP = 60: 4·(8·60 + 8·60 + 8·59 + 8·12 + 24) = 4·(480 + 480 + 472 + 96 + 24) = 6,208; ⌈17/8⌉·2 = 6
    ((1, 2, 17, 59), (8, 8), "flash_fwd<8,8,59>", 6, 6208),
    # QP = 128, KP = 132: 4·(64·128 + 32·132 + 32·128 + 64·36 + 192) = 4·(8192 + 4224 + 4096 + 2304 + 192) = 76,032;
    # ⌈1000/64⌉ = 16 × 3 = 48
    ((3, 1, 1000, 128), (64, 32), "flash_fwd<64,32,128>", 48, 76032),
])
def test_ffma_flash_launches(shape, tile, expression, grid, smem):
    for causal in (False, True):  # the mask is an argument, not a variant
        p = problem(*shape, causal=causal)
        assert FLASH.launches(p, *tile) == (Launch(expression, (grid,), (128,), smem, FLASH_ARGS,
                                                   square(shape[2], shape[3], causal)),)
        assert FLASH.expressions(p, *tile) == (expression,)
        assert FLASH.smem(p, *tile) == smem == variants.flash_smem_bytes(*tile, shape[3])


# 3xTF32: flash_tf32_fwd<d,warps,Bc,m_tiles,q_in_regs>, 32·warps threads, Br = 16·m_tiles·warps,
# smem 4·(Br·(d+8) + 2·Bc·(d+8) + 2·Bc·(d+4)), grid ⌈N/Br⌉·B·H; the launch per (d, causal) from TF32_CONFIGS
@pytest.mark.parametrize("shape, causal, tile, expression, threads, grid, smem", [
    # (4 warps, Bc 32, 2 m-tiles, Q in shared): Br = 128; 4·(128·72 + 64·72 + 64·68) = 4·(9216 + 4608 + 4352) = 72,704
    ((1, 16, 4096, 64), False, (128, 32), "flash_tf32_fwd<64,4,32,2,false>", 128, 512, 72704),
    # (4, 32, 1, Q in registers): Br = 64; 4·(64·72 + 4608 + 4352) = 4·13,568 = 54,272; ⌈4097/64⌉ = 65
    ((1, 1, 4097, 64), True, (64, 32), "flash_tf32_fwd<64,4,32,1,true>", 128, 65, 54272),
    # (8, 64, 1, Q in shared), both masks: Br = 128; 4·(128·136 + 128·136 + 128·132) = 4·51,712 = 206,848; 1 × 2
    ((1, 2, 17, 128), False, (128, 64), "flash_tf32_fwd<128,8,64,1,false>", 256, 2, 206848),
    ((1, 2, 17, 128), True, (128, 64), "flash_tf32_fwd<128,8,64,1,false>", 256, 2, 206848),
])
def test_tf32_flash_launches(shape, causal, tile, expression, threads, grid, smem):
    p = problem(*shape, causal=causal)
    config = FLASH_TF32.config(p)
    assert (config.br, config.bc) == tile  # the planner's tile (target.fp32_plan) is the record's
    # a prefill launch: a block a tile, every launch head (B·H) on the grid, parts 0
    assert FLASH_TF32.launches(p, *tile) == (Launch(expression, (grid,), (threads,), smem, SPLIT_ARGS,
                                                    square(shape[2], shape[3], causal, heads=shape[0] * shape[1],
                                                           parts=0)),)


# mma.sync: flash_tc_fwd<type,d,warps,Bc,m_tiles>, 32·warps threads, Br = 16·m_tiles·warps, smem 2·(Br + 4·Bc)·d
@pytest.mark.parametrize("shape, causal, dtype, tile, expression, threads, grid, smem", [
    # (4 warps, Bc 64, 2 m-tiles): Br = 128; 2·(128 + 256)·64 = 49,152; ⌈4096/128⌉·16 = 512
    ((1, 16, 4096, 64), False, "float16", (128, 64), "flash_tc_fwd<__half,64,4,64,2>", 128, 512, 49152),
    ((1, 16, 4096, 64), True, "bfloat16", (128, 64), "flash_tc_fwd<__nv_bfloat16,64,4,64,2>", 128, 512, 49152),
    # (8, 64, 2): Br = 256; 2·(256 + 256)·128 = 131,072; ⌈1000/256⌉ = 4 × 3 = 12
    ((3, 1, 1000, 128), False, "bfloat16", (256, 64), "flash_tc_fwd<__nv_bfloat16,128,8,64,2>", 256, 12, 131072),
    # (8, 128, 1) with the mask: Br = 128; 2·(128 + 512)·128 = 163,840; ⌈130/128⌉ = 2 × 2 = 4
    ((1, 2, 130, 128), True, "float16", (128, 128), "flash_tc_fwd<__half,128,8,128,1>", 256, 4, 163840),
])
def test_mma_sync_flash_launches(shape, causal, dtype, tile, expression, threads, grid, smem):
    p = problem(*shape, causal=causal, dtype=dtype)
    config = FLASH_TC.config(p)
    assert (config.br, config.bc) == tile  # the planner's tile (target.tc_plan)
    assert FLASH_TC.launches(p, *tile) == (Launch(expression, (grid,), (threads,), smem, TC_ARGS,
                                                  square(shape[2], shape[3], causal, heads=shape[0] * shape[1],
                                                         parts=0)),)


# wgmma: flash_wgmma_fwd<kind,d,Bc,consumers,stages,schedule> (kind 0 fp16, 1 bf16), 128·consumers + 128 threads,
# Br = 64·consumers, smem 2·d·(64·consumers + 2·stages·Bc) + 8·(1 + 3·stages) + 1024; the launch per d, either mask
@pytest.mark.parametrize("shape, causal, dtype, expression, grid, bc, smem", [
    # d 64 (Bc 192, 2 consumers, 3 stages, schedule 2): 2·64·(128 + 6·192) + 8·10 + 1024 = 163,840 + 1104 = 164,944
    ((1, 16, 4096, 64), False, "float16", "flash_wgmma_fwd<0,64,192,2,3,2>", 512, 192, 164944),
    ((1, 16, 4096, 64), True, "bfloat16", "flash_wgmma_fwd<1,64,192,2,3,2>", 512, 192, 164944),
    # d 128 (Bc 128): 2·128·896 + 80 + 1024 = 229,376 + 1104 = 230,480 (under the H200's 232,448 opt-in);
    # ⌈97/128⌉·2 = 2
    ((1, 2, 97, 128), True, "bfloat16", "flash_wgmma_fwd<1,128,128,2,3,2>", 2, 128, 230480),
])
def test_wgmma_flash_launches(shape, causal, dtype, expression, grid, bc, smem):
    p = problem(*shape, causal=causal, dtype=dtype)
    config = FLASH_WGMMA.config(p)
    assert (config.br, config.bc) == (128, bc)  # Br = 64 · 2 consumers
    assert FLASH_WGMMA.launches(p, 128, bc) == (Launch(expression, (grid,), (384,), smem, MAP_ARGS,  # 2·128 + 128
                                                       square(shape[2], shape[3], causal,
                                                              heads=shape[0] * shape[1])),)
    assert FLASH_WGMMA.sm90a and not FLASH_TC.sm90a


# issue 34's larger key blocks (kernels/wgmma.cuh wgmma_ss for N 96, 160, 176, 192): Bc 176 at d 128, 2 stages:
# 2·128·(128 + 4·176) + 8·7 + 1024 = 256·832 + 1080 = 212,992 + 1080 = 214,072; Bc 192: 256·(128 + 768) + 1080 =
# 229,376 + 1080 = 230,456 (under the H200's 232,448 opt-in; 3 stages, 256·1280 = 327,680, would not be);
# d 64, Bc 192, 3 stages: 128·(128 + 1152) + 8·10 + 1024 = 163,840 + 1104 = 164,944. Grid ⌈4096/128⌉·16 = 512.
@pytest.mark.parametrize("dim, config, expression, smem", [
    (128, variants.WgmmaConfig(176, 2, 2, 2), "flash_wgmma_fwd<0,128,176,2,2,2>", 214072),
    (128, variants.WgmmaConfig(192, 2, 2, 2), "flash_wgmma_fwd<0,128,192,2,2,2>", 230456),
    (64, variants.WgmmaConfig(192, 2, 3, 2), "flash_wgmma_fwd<0,64,192,2,3,2>", 164944),
])
def test_wgmma_launches_at_the_larger_key_blocks(dim, config, expression, smem):
    chosen = dataclasses.replace(FLASH_WGMMA, configs=((dim, config),))
    p = problem(1, 16, 4096, dim, dtype="float16")
    assert chosen.launches(p, 128, config.bc) == (Launch(expression, (512,), (384,), smem, MAP_ARGS,
                                                         square(4096, dim, heads=16)),)
    with pytest.raises(SpecError, match=rf"runs Br=128, Bc={config.bc} at d {dim} .*asked for Br=128, Bc=128"):
        chosen.launches(p, 128, 128)


# EARLY_K: K released after S (one more mbarrier a stage): Bc 192 at d 128, 2 stages: 230,456 + 2·8 = 230,472, the
# template's PERSISTENT flag written out (false) before it
def test_a_wgmma_launch_that_releases_k_early():
    chosen = dataclasses.replace(FLASH_WGMMA, configs=((128, variants.WgmmaConfig(192, 2, 2, 2, 0, True)),))
    p = problem(1, 16, 4096, 128, dtype="bfloat16")
    assert chosen.launches(p, 128, 192) == (Launch("flash_wgmma_fwd<1,128,192,2,2,2,false,true>", (512,), (384,),
                                                   230472, MAP_ARGS, square(4096, 128, heads=16)),)
    with pytest.raises(SpecError, match=r"wgmma early_k=1 must be True or False"):
        variants.check_wgmma_config(variants.WgmmaConfig(192, 2, 2, 2, 0, 1), 128)


# persistent: at most `blocks` blocks walking the tiles, the template's last argument true, one more mbarrier (Q's
# empty one): Bc 176 at d 128, 2 stages: 214,072 + 8 = 214,080; 512 tiles at N 4096, 16 heads on 132 blocks; 2 tiles
# (⌈97/128⌉ · 2 heads) on 2
@pytest.mark.parametrize("seq, heads, grid", [(4096, 16, 132), (97, 2, 2)])
def test_a_persistent_wgmma_launch_walks_the_tiles_on_fewer_blocks(seq, heads, grid):
    chosen = dataclasses.replace(FLASH_WGMMA, configs=((128, variants.WgmmaConfig(176, 2, 2, 2, 132)),))
    p = problem(1, heads, seq, 128, dtype="float16")
    assert chosen.launches(p, 128, 176) == (Launch("flash_wgmma_fwd<0,128,176,2,2,2,true>", (grid,), (384,), 214080,
                                                   MAP_ARGS, square(seq, 128, heads=heads)),)


@pytest.mark.parametrize("dim, config, match", [
    (128, (80, 2, 2, 2), "wgmma Bc=80 has no wgmma_ss shape in kernels/wgmma.cuh; allowed: 64, 96, 128, 160, 176, "
                         "192"),
    (128, (256, 2, 2, 2), "wgmma Bc=256 has no wgmma_ss shape"),
    (64, (128, 5, 2, 2), r"wgmma consumers=5 is out of range; allowed: 1\.\.4"),
    (64, (128, 2, 1, 2), r"wgmma stages \(schedule 2\)=1 is out of range; allowed: 2\.\.16"),
    (64, (128, 2, 2, 4), "wgmma schedule=4 is unknown; allowed: 0, 1, 2, 3"),
    # schedule 3 releases a stage a block after schedule 2 does: two stages would wait for each other (deadlock)
    # unless K is released after S (early_k, built below)
    (64, (128, 2, 2, 3), r"wgmma stages \(schedule 3\)=2 is out of range; allowed: 3\.\.16"),
    (96, (128, 2, 2, 2), "kernels/flash_wgmma.cu is built for d 64, 128; d=96"),
])
def test_a_wgmma_launch_the_kernel_does_not_build_is_refused_with_its_record(dim, config, match):
    with pytest.raises(SpecError, match=match):
        dataclasses.replace(FLASH_WGMMA, configs=((dim, variants.WgmmaConfig(*config)),))
    # one stage is enough where each block's S, softmax and P·V run in turn (schedule 0)
    dataclasses.replace(FLASH_WGMMA, configs=((64, variants.WgmmaConfig(128, 2, 1, 0)),))
    # two under schedule 3 where K is released after S
    dataclasses.replace(FLASH_WGMMA, configs=((128, variants.WgmmaConfig(176, 2, 2, 3, 0, True)),))


@pytest.mark.parametrize("kernel, dtype, path, chosen", [
    ("naive", "float32", "simt", NAIVE), ("naive", "float32", "3xtf32", NAIVE), ("fused", "float32", "", FUSED),
    ("flash", "float32", "simt", FLASH), ("flash", "float32", "mma.sync", FLASH),  # the launcher's default path
    ("flash", "float32", "3xtf32", FLASH_TF32),
    ("flash", "float16", "wgmma", FLASH_WGMMA), ("flash", "bfloat16", "mma.sync", FLASH_TC),
    ("flash", "float16", "simt", FLASH_TC),  # any path but wgmma: mma.sync, as kernels/cuda.py chose
])
def test_a_plan_path_picks_the_variant_the_launcher_picked(kernel, dtype, path, chosen):
    assert variants.variant(kernel, dtype, path) is chosen


def test_a_variant_refuses_what_no_kernel_runs():
    with pytest.raises(SpecError, match="kernel 'softmax' is unknown; allowed: naive, fused, flash"):
        variants.variant("softmax", "float32", "simt")
    with pytest.raises(SpecError, match="kernel 'naive' computes in float32 only; float16 runs on flash"):
        variants.variant("naive", "float16", "simt")
    with pytest.raises(SpecError, match=r"kernels/flash_tc.cu is built for d 64, 128; d=32"):
        FLASH_TC.launches(problem(1, 1, 64, 32, dtype="float16"), 128, 64)


def test_every_variant_is_listed_once_with_its_source():
    assert {name: v.source for name, v in variants.VARIANTS.items()} == {
        "naive": "naive.cu", "fused": "fused.cu", "flash": "flash.cu", "flash_tf32": "flash_tf32.cu",
        "flash_tc": "flash_tc.cu", "flash_wgmma": "flash_wgmma.cu", "split_tc": "flash_tc.cu",
        "split_tf32": "flash_tf32.cu", "split_wgmma": "decode_wgmma.cu"}
    def tile(v, p):  # a tensor-core variant runs its configuration's tile only; the others take any
        config = v.config(p) if hasattr(v, "config") else None
        return (config.br, config.bc) if config else (64, 64)

    # the split-KV variants on 3 blocks sharing 2 tiles × 4 or 8 key blocks (a tile cut: the combine's arguments too)
    assert all(set(launch.args) <= set(variants.ARGS) for v in variants.VARIANTS.values()
               for p in [problem(1, 2, 256 if getattr(v, "split", False) else 64, 64, dtype=v.dtypes[0])]
               for launch in v.launches(p, *tile(v, p), 3 if getattr(v, "split", False) else 0))
    # a cut tile: the combine launch after the split one (here 256 packed rows a head), except where a 16-bit kernel
    # merges in place: at most 16 packed rows a tile (one query of 2 heads on one K/V head)
    splits = (variants.SPLIT_TC, variants.SPLIT_TF32, variants.SPLIT_WGMMA)
    assert {v.name: len(v.launches(p, *tile(v, p), 3))
            for v in splits for p in [problem(1, 2, 256, 64, dtype=v.dtypes[0])]} == \
        {"split_tc": 2, "split_tf32": 2, "split_wgmma": 2}
    assert {v.name: len(v.launches(p, *tile(v, p), 3))
            for v in splits for p in [AttentionProblem(heads=2, kv_heads=1, seq=256, q_len=1, dim=64,
                                                       dtype=v.dtypes[0])]} == \
        {"split_tc": 1, "split_tf32": 2, "split_wgmma": 1}
