"""The tensor-core flash kernels (kernels/flash_tc.cu, mma.sync; kernels/flash_wgmma.cu, wgmma) and the GPU target's
16-bit path: they compile for sm_90 and sm_90a (CI, where nvcc is), the 16-bit storage helpers round as the hardware
does, the dispatch between the two and the rows run on the numpy fake (CI), and on a GPU (marker gpu) both kernels in
every dtype, d and mask at awkward N against the float64 golden and against torch SDPA's own error in the same dtype
on the same inputs."""

import os
import shutil
import subprocess

import numpy as np
import pytest

from helpers import ROOT
from host.errors import SpecError, TargetError
from host.problem import AttentionProblem
from host.reference import errors
from host.target_api import Inputs, RunContext, RunOptions
from kernels import target
from kernels.variants import (FLASH_TC, FLASH_WGMMA, SPLIT_TC, SPLIT_WGMMA, TC_TYPES, WGMMA_CONFIGS,
                              WGMMA_SPLIT_CONFIGS)
from kernels.fake import FakeDevice
from kernels.halves import from_bits, rounded, to_bits

HALF = ["float16", "bfloat16"]
DEVICES = [pytest.param("cuda", marks=pytest.mark.gpu), "fake"]


def test_the_tensor_core_kernel_compiles_for_sm90(tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    unit = tmp_path / "unit_flash_tc.cu"
    text = f'#include "{ROOT / "kernels" / "flash_tc.cu"}"\n'
    # the launcher's own name expressions (kernels/variants.py), each distinct instance once: the prefill configs
    # and the split-KV ones (a K/V head of 32 packed rows, and of one: the four-key-warp launch)
    launches = sorted({(dtype, chosen.expressions(problem, config.br, config.bc)[0])
                       for chosen in (FLASH_TC, SPLIT_TC) for (d, causal), _ in chosen.configs for dtype in HALF
                       for problem in (AttentionProblem(seq=1, dim=d, causal=causal, dtype=dtype),
                                       AttentionProblem(seq=128, q_len=32, dim=d, causal=causal, dtype=dtype))
                       for config in [chosen.config(problem)]})
    for dtype, expression in launches:
        kind = TC_TYPES[dtype]
        text += (f"template __global__ void {expression}(const {kind}*, const {kind}*, const {kind}*, {kind}*, float*, "
                 "float*, int*, int, int, int, int, int, int, float, int);\n")
    unit.write_text(text)
    done = subprocess.run(["nvcc", "-arch=sm_90", "-std=c++17", "-Werror", "all-warnings", "-Xptxas", "-v", "-c",
                           "-o", str(tmp_path / "unit.o"), str(unit)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    spills = [int(line.split("bytes spill stores")[0].split(",")[-1]) for line in done.stderr.splitlines()
              if "bytes spill stores" in line]
    # (3 distinct launches of TC_CONFIGS + 2 of SPLIT_TC's 64-row one + 2 of its few-row one) × 2 types
    assert len(spills) == len(launches) == 14
    # registers hold each instance's state: at most the 72 bytes the d 128 two-m-tile prefill launch spills at the
    # 255-register cap since the split-KV launches' segment loop (2026-12-03; 28 before it, 48 before the split-KV
    # arguments: the allocator moves with any change of the source, even a constant folded; this launch runs on
    # sm_80 and under --gpu-tc-path mma, not by default on Hopper), none in the split-KV launches (the mangled
    # names of the instances with the segment loop end their template arguments in Lb1ELb0E or Lb1ELb1E: SHARED, and
    # MERGE where a tile has few rows)
    assert max(spills) <= 72, done.stderr
    lines = done.stderr.splitlines()
    split_spills = [int(lines[i + 1].split("bytes spill stores")[0].split(",")[-1]) for i, line in enumerate(lines)
                    if "Function properties for" in line and "Lb1ELb" in line]
    assert len(split_spills) == 8 and max(split_spills) == 0, done.stderr


def build_sm90a(source: str, instances: list[str], tmp_path) -> tuple[str, list[int]]:
    """kernels/`source` built by nvcc for sm_90a with each template instance (`template __global__ void ...;`),
    warnings as errors: (ptxas's report, each function's spill-store bytes); skipped without nvcc."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    unit = tmp_path / f"unit_{source}"
    unit.write_text(f'#include "{ROOT / "kernels" / source}"\n' + "".join(f"{line}\n" for line in instances))
    done = subprocess.run(["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-Werror", "all-warnings",
                           "-Xptxas", "-v", "-c", "-o", str(tmp_path / "unit.o"), str(unit)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stderr, [int(line.split("bytes spill stores")[0].split(",")[-1]) for line in done.stderr.splitlines()
                         if "bytes spill stores" in line]


def test_the_wgmma_kernel_compiles_for_sm90a_without_spills(tmp_path):
    instances = [f"template __global__ void {expression}(const void*, const void*, const void*, unsigned short*, "
                 "int, int, int, int, float, int);"
                 for dtype in HALF for d, config in WGMMA_CONFIGS.items()  # the launcher's own name expressions
                 for expression in FLASH_WGMMA.expressions(AttentionProblem(seq=1, dim=d, dtype=dtype), config.br,
                                                           config.bc)]
    report, spills = build_sm90a("flash_wgmma.cu", instances, tmp_path)
    assert spills == [0] * (2 * len(WGMMA_CONFIGS)), report
    assert "C7514" not in report  # ptxas serialising the asynchronous MMAs (kernels/flash_wgmma.cu)


def test_every_wgmma_launch_of_the_issue_34_sweep_compiles_for_sm90a_without_spills(tmp_path):
    """Each launch kernels.headline --variants wgmma --set i34, persist, early_k and sched3 time (both types; Bc 176 and
    192, the wgmma_ss shapes beyond 64 and 128) at its own name expression: built, no spill, no MMA serialised by ptxas
    (C7514 after a barrier, C7512 for want of registers) nor a setmaxnreg it could not honour (C7508)."""
    from kernels.headline_variants import VARIANT_SETS, configured

    expressions = sorted({expression for dtype in HALF for chosen_set in ("i34", "persist", "early_k", "sched3")
                          for d, configs in VARIANT_SETS["wgmma"][chosen_set].items() for config in configs
                          for expression in configured(FLASH_WGMMA, config, d).expressions(
                              AttentionProblem(seq=1, dim=d, dtype=dtype), config.br, config.bc)})
    assert any(",176," in e for e in expressions) and any(",192," in e for e in expressions)
    assert any(e.endswith(",2,true>") for e in expressions)  # the persistent launches
    assert any(e.endswith(",false,true>") for e in expressions)  # K released after S (EARLY_K)
    instances = [f"template __global__ void {expression}(const void*, const void*, const void*, unsigned short*, "
                 "int, int, int, int, float, int);" for expression in expressions]
    report, spills = build_sm90a("flash_wgmma.cu", instances, tmp_path)
    assert spills == [0] * len(expressions), report
    assert not [code for code in ("C7508", "C7512", "C7514") if code in report], report


def test_the_hopper_split_kernel_compiles_for_sm90a_without_spills(tmp_path):
    """kernels/decode_wgmma.cu at the launcher's own name expressions (both types, both d): built, no spill, no MMA
    serialised by ptxas (C7514), and its consumer given the registers setmaxnreg asks for (no C7508 warning)."""
    instances = [f"template __global__ void {expression}(const void*, const void*, const void*, unsigned short*, "
                 "float*, float*, int*, int, int, int, int, int, float, int);"
                 for dtype in HALF for d, config in WGMMA_SPLIT_CONFIGS.items()
                 for q_len in (16, 1)  # 64 packed rows (the combine launch) and 4 (merged in place: MERGE)
                 for expression in SPLIT_WGMMA.expressions(
                     AttentionProblem(batch=1, heads=4, kv_heads=1, seq=4096, q_len=q_len, dim=d, dtype=dtype),
                     config.br, config.bc, 3)[:1]]
    report, spills = build_sm90a("decode_wgmma.cu", instances, tmp_path)
    assert spills == [0] * (4 * len(WGMMA_SPLIT_CONFIGS)), report
    assert "C7514" not in report and "C7508" not in report


def test_every_launch_of_the_decode_launch_sweep_compiles_for_sm90a_without_spills(tmp_path):
    """Each launch `kernels.inference_bench --launch-sweep` times (kernels/decode_sweeps.py: key blocks 64 and 128,
    two to six stages, merged in place or not) at its own name expression: built, no spill, no C7508 or C7514."""
    from kernels.decode_sweeps import LAUNCH_CHOICES, launch_choice

    problem = AttentionProblem(batch=1, heads=32, kv_heads=8, seq=16384, q_len=1, dim=128, dtype="float16")
    expressions = sorted({launch_choice(bc, stages, merges).expressions(problem, 64, bc, 132)[0]
                          for _, bc, stages, merges in LAUNCH_CHOICES})
    assert len(expressions) == len(LAUNCH_CHOICES)  # five kernels: Bc 64 at 4, 6, 2 stages, Bc 128, Bc 64 unmerged
    # shared memory by hand (2 B · d · (two 64-row Q tiles + K and V per stage) + 8 B an mbarrier + 1024 to align),
    # against the H100's and H200's opt-in of 232,448 B: Bc 64 at six stages 256 · (128 + 768) + 8 · 22 + 1024 =
    # 230,576; Bc 128 at three 256 · (128 + 768) + 8 · 13 + 1024 = 230,504
    smem = {(bc, stages): launch_choice(bc, stages, True).launches(problem, 64, bc, 132)[0].smem
            for _, bc, stages, _ in LAUNCH_CHOICES}
    assert smem[64, 6] == 230_576 and smem[128, 3] == 230_504 and max(smem.values()) <= 232_448
    instances = [f"template __global__ void {expression}(const void*, const void*, const void*, unsigned short*, "
                 "float*, float*, int*, int, int, int, int, int, float, int);" for expression in expressions]
    report, spills = build_sm90a("decode_wgmma.cu", instances, tmp_path)
    assert spills == [0] * len(expressions), report
    assert "C7514" not in report and "C7508" not in report


def test_bfloat16_rounds_to_nearest_even_by_hand():
    # 1 + 2⁻⁸ lies halfway between bf16's 1 and 1 + 2⁻⁷ (7 fraction bits): ties go to the even one, 1.
    # 1 + 3·2⁻⁸ lies halfway between 1 + 2⁻⁷ and 1 + 2·2⁻⁷: the even one is 1 + 2·2⁻⁷ = 1.015625.
    # 1 + 2⁻⁸ + 2⁻²⁰ is just above halfway: up, to 1 + 2⁻⁷ = 1.0078125.
    x = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-8 + 2.0**-20, -2.5], dtype=np.float32)
    assert rounded(x, "bfloat16").tolist() == [1.0, 1.015625, 1.0078125, -2.5]
    assert to_bits(np.array([1.0], dtype=np.float32), "bfloat16").tolist() == [0x3F80]


def test_float16_bits_are_numpys():
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    np.testing.assert_array_equal(from_bits(to_bits(x, "float16"), "float16"), x.astype(np.float16).astype(np.float32))
    with pytest.raises(ValueError, match="not a 16-bit float"):
        to_bits(x, "float8")


def test_dtypes_option_and_kernel_pairs():
    import argparse

    parser = argparse.ArgumentParser()
    target.add_options(parser.add_argument_group("gpu"))
    args = parser.parse_args(["--gpu-dtype", "fp16,fp32,bf16,fp16"])
    settings = target.settings(args)
    assert settings.dtypes == ("float16", "float32", "bfloat16")
    assert target.kernels(settings) == [("flash", "float16"), ("naive", "float32"), ("fused", "float32"),
                                        ("flash", "float32"), ("flash", "bfloat16")]
    assert parser.parse_args(["--dtype", "bf16"]).gpu_dtype == ("bfloat16",)
    with pytest.raises(SystemExit):
        parser.parse_args(["--gpu-dtype", "fp8"])


def options(device, kernel="flash", warmup=1, iters=2, tc_path="auto"):
    return RunOptions(context=RunContext("test", "test", "test"), kernel=kernel, warmup=warmup, iters=iters,
                      settings=target.Settings(device=device, tc_path=tc_path))


def fresh(seq, dim, causal, dtype, heads=2):
    return AttentionProblem(batch=1, heads=heads, seq=seq, dim=dim, causal=causal, dtype=dtype,
                            seed=int.from_bytes(os.urandom(4), "little"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("tc_path", ["auto", "mma"])
@pytest.mark.parametrize("seq,dim,causal", [(1, 64, False), (17, 128, True), (130, 64, True), (97, 128, False)])
def test_16bit_rows_are_judged_in_their_dtype(device, dtype, tc_path, seq, dim, causal):
    problem = fresh(seq, dim, causal, dtype)
    [row] = target.run(problem, Inputs(problem), options(device, tc_path=tc_path))
    assert row.status == "ok", row.message
    plan = target.tc_plan(problem, target.backend(target.Settings(device)).capability(), tc_path)
    assert row.dtype == dtype and row.kernel == "flash" and (row.br, row.bc) == (plan.br, plan.bc)
    assert row.model_bytes == problem.min_bytes() == 2 * 4 * 2 * seq * dim  # 2 bytes per element
    if device == "fake":  # numpy ran, in the tile of the kernel a GPU would run: no tensor core
        assert "numpy on the CPU (16-bit inputs, P and O, float32 sums) in the tile of" in row.message
        assert f"path {plan.path}" in row.message and "tensor cores" not in row.message
    else:
        assert f"tensor cores: {plan.path}" in row.message
    assert row.rel_l2 > 1e-5  # 16-bit storage shows: not the float32 path


@pytest.mark.parametrize("capability,forced,path,note", [
    (90, "auto", "wgmma", "TMA tiles, a producer and 2 consumer warpgroups"),
    (90, "mma", "mma.sync", "forced by --gpu-tc-path"),
    (80, "auto", "mma.sync", "no wgmma on sm_80"),
    (89, "mma", "mma.sync", "no wgmma on sm_89"),
    (100, "auto", "mma.sync", "no wgmma on sm_100"),
])
def test_the_tensor_core_dispatch(capability, forced, path, note):
    problem = fresh(64, 64, False, "float16")
    plan = target.tc_plan(problem, capability, forced)
    assert plan.path == path and note in plan.note
    # d 64: the Hopper launch's 192-key block (kernels/launch_configs.py WGMMA_CONFIGS), mma.sync's 64
    assert (plan.br, plan.bc) == ((128, 192) if path == "wgmma" else (128, 64))


@pytest.mark.parametrize("capability,forced,match", [
    (75, "auto", "need sm_80 or newer"),
    (80, "wgmma", r"wgmma and the sm_90a target exist on sm_90 \(Hopper\) only; this device is sm_80")])
def test_the_tensor_core_dispatch_skips_with_its_reason(capability, forced, match, monkeypatch):
    monkeypatch.setattr(FakeDevice, "CAPABILITY", capability)
    problem = fresh(40, 64, True, "bfloat16")
    with pytest.raises(TargetError, match=match) as info:
        target.run(problem, Inputs(problem), options("fake", tc_path=forced))
    assert info.value.status == "skipped"


def test_the_tc_path_option():
    from helpers import run_module

    import argparse

    parser = argparse.ArgumentParser()
    target.add_options(parser.add_argument_group("gpu"))
    assert target.settings(parser.parse_args(["--gpu-tc-path", "mma", "--gpu-dtype", "fp16"])).tc_path == "mma"
    assert target.settings(parser.parse_args([])).tc_path == "auto"
    with pytest.raises(SpecError, match="--gpu-tc-path 'hmma' is unknown; allowed: auto, wgmma, mma"):
        target.Settings(tc_path="hmma")
    done = run_module("host.compare", "--targets", "gpu", "--gpu-device", "fake", "--gpu-tc-path", "tma",
                      "--out", "/tmp/kbench-no-out", timeout=60)
    assert done.returncode == 2 and "invalid choice: 'tma'" in done.stderr


@pytest.mark.parametrize("device", ["fake"])
def test_16bit_refusals(device):
    problem = fresh(33, 59, False, "float16")
    with pytest.raises(TargetError, match="built for d 64, 128; d=59 runs in float32 only") as info:
        target.run(problem, Inputs(problem), options(device))
    assert info.value.status == "skipped"
    problem = fresh(33, 64, False, "bfloat16")
    with pytest.raises(SpecError, match="kernel 'naive' computes in float32 only"):
        target.run(problem, Inputs(problem), options(device, kernel="naive"))


def test_a_16bit_sweep_through_compare(tmp_path):
    from host.compare import main
    from host.results_file import ResultsFile

    code = main(["--targets", "gpu", "--gpu-device", "fake", "--gpu-dtype", "fp16,bf16", "--seq", "33",
                 "--dim", "64,16", "--heads", "1", "--causal", "0", "--out", str(tmp_path)])
    rows = ResultsFile(tmp_path / "results.csv").read()
    assert code == 0
    assert sorted((r.dtype, r.dim, r.status) for r in rows) == [
        ("bfloat16", 16, "skipped"), ("bfloat16", 64, "ok"), ("float16", 16, "skipped"), ("float16", 64, "ok")]


def test_the_fake_rounds_p_and_o_like_the_tensor_core_kernel():
    problem = AttentionProblem(heads=1, seq=40, dim=64, dtype="bfloat16", seed=3)
    plan = target.tc_plan(problem, FakeDevice.capability())
    launch = target.launcher("flash", problem, Inputs(problem), plan.br, plan.bc,
                             target.backend(target.Settings(device="fake")), plan.path)
    launch.launch()
    out = launch.output()
    assert np.array_equal(out, rounded(out, "bfloat16"))  # O leaves in bf16


@pytest.mark.gpu
@pytest.mark.parametrize("tc_path", ["auto", "mma"])
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", [1, 17, 1000, 4097])
def test_tensor_cores_against_the_golden_and_torch(tc_path, dtype, dim, causal, seq):
    torch = pytest.importorskip("torch")
    problem = fresh(seq, dim, causal, dtype)
    inputs = Inputs(problem)
    [row] = target.run(problem, inputs, options("cuda", tc_path=tc_path))
    assert row.status == "ok", row.message
    dev = target.backend(target.Settings())
    plan = target.tc_plan(problem, dev.capability(), tc_path)
    assert f"tensor cores: {plan.path}" in row.message
    launch = target.launcher("flash", problem, inputs, plan.br, plan.bc, dev, plan.path)
    launch.launch()
    ours = errors(launch.output(), inputs.golden).rel_l2
    kind = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    q, k, v = (torch.from_numpy(x).cuda().to(kind) for x in (inputs.q, inputs.k, inputs.v))
    theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal).float().cpu().numpy()
    reference = errors(theirs, inputs.golden).rel_l2
    assert np.isfinite(ours) and ours <= 2 * reference, (ours, reference)


def test_bfloat16_keeps_nan_and_float16_overflows_to_inf_quietly(recwarn):
    nans = np.array([0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001], dtype=np.uint32).view(np.float32)
    assert np.isnan(from_bits(to_bits(nans, "bfloat16"), "bfloat16")).all()  # no carry into exponent or sign
    assert from_bits(to_bits(np.array([70000.0], dtype=np.float32), "float16"), "float16").tolist() == [np.inf]
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_a_tile_without_float32_is_refused_in_one_line():
    from helpers import run_module

    done = run_module("host.compare", "--targets", "gpu", "--gpu-device", "fake", "--gpu-dtype", "fp16",
                      "--gpu-tile", "64x32", "--out", "/tmp/kbench-no-out", timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "--gpu-tile sets the float32 flash kernel's tile" in lines[0]
    done = run_module("host.compare", "--targets", "gpu", "--gpu-device", "fake", "--gpu-dtype", "fp16",
                      "--kernels", "naive", "--out", "/tmp/kbench-no-out", timeout=60)
    assert done.returncode == 2 and "targets gpu run no kernel 'naive'" in done.stderr
    assert "allowed: flash" in done.stderr


@pytest.mark.parametrize("kernel", ["naive", "fused"])
def test_more_heads_than_a_grid_axis_holds_skips_naive_and_fused_in_one_line(kernel):
    problem = AttentionProblem(batch=17, heads=4096, seq=1, dim=64)  # 69,632 (batch, head) pairs
    with pytest.raises(TargetError, match=rf"{kernel} puts batch·heads = 69632 on a grid axis that holds "
                                          r"1\.\.65535 \(CUDA's grid y and z limit\); flash takes them") as info:
        target.launcher(kernel, problem, None, 128, 64, target.backend(target.Settings(device="fake")))
    assert info.value.status == "skipped"


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_flash_takes_more_heads_than_a_grid_axis_holds(dtype):
    # flash puts its blocks on the grid's x axis (2^31 − 1): 2,048 sequences of 32 heads decode in one launch
    problem = AttentionProblem(batch=2048, heads=32, kv_heads=8, seq=2, q_len=1, dim=64, dtype=dtype)
    [row] = target.run(problem, Inputs(problem), options("fake"))
    assert row.status == "ok", row.message


def test_more_flash_blocks_than_a_grid_holds_is_refused_in_one_line():
    # flash puts ⌈N / Br⌉ tiles × batch·heads on the grid's x axis (kernels/tile_order.cuh): 2^20 × 4096 = 2^32 blocks
    problem = AttentionProblem(batch=1, heads=4096, seq=1 << 20, dim=8)
    dev = target.backend(target.Settings(device="fake"))
    with pytest.raises(SpecError, match=r"flash Br=1 at q_len=1048576, batch·heads=4096 needs 4294967296 blocks; "
                                        r"allowed: 1\.\.2147483647 \(CUDA's grid x limit\)"):
        target.launcher("flash", problem, None, 1, 64, dev, "simt")


def test_the_hopper_build_hands_nvrtc_every_header_its_source_includes():
    """NVRTC builds the Hopper sources (hopper.SOURCES) from text with no include path: a header one of them (or a
    header of it) includes and kernels/hopper.py does not hand over fails only on a Hopper GPU (it did, once
    kv_rows.cuh was added)."""
    import re

    from kernels import hopper

    wanted, todo = set(), list(hopper.SOURCES)
    while todo:
        text = (ROOT / "kernels" / todo.pop()).read_text()
        for name in re.findall(r'^#include "([^"]+)"', text, flags=re.MULTILINE):
            if name not in wanted:
                wanted.add(name)
                todo.append(name)
    assert wanted == set(hopper.HEADERS)
