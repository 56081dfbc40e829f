"""float32 flash on the tensor cores by 3xTF32 (kernels/flash_tf32.cu) and the GPU target's choice between it and
the FFMA kernel (kernels/flash.cu): it compiles for sm_80 and sm_90 without spills (CI, where nvcc is), the dispatch
and its reasons and refusals on the numpy fake (CI), and on a GPU (marker gpu) both fp32 paths at each d and mask at
awkward N against the float64 golden (the row's verdict) and against torch SDPA EFFICIENT's own fp32 error on the
same inputs."""

import argparse
import os
import shutil
import subprocess

import numpy as np
import pytest

from helpers import ROOT, run_module
from host.errors import SpecError, TargetError
from host.problem import AttentionProblem
from host.reference import errors
from host.target_api import Inputs, RunContext, RunOptions
from kernels import target
from kernels.variants import FLASH_TF32, SPLIT_TF32, TF32_CONFIGS
from kernels.fake import FakeDevice


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_3xtf32_kernel_compiles_without_spills(tmp_path, arch):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    unit = tmp_path / "unit_flash_tf32.cu"
    text = f'#include "{ROOT / "kernels" / "flash_tf32.cu"}"\n'
    # the launcher's own name expressions (kernels/variants.py), each distinct instance once
    launches = sorted({chosen.expressions(AttentionProblem(seq=1, dim=d, causal=causal), config.br, config.bc)[0]
                       for chosen in (FLASH_TF32, SPLIT_TF32) for (d, causal), config in chosen.configs})
    # (64, 4, 32, 2, false), (64, 4, 32, 1, true), (128, 8, 64, 1, false); split-KV (64 and 128, 4, 32, 1, false)
    assert len(launches) == 5
    for expression in launches:
        text += (f"template __global__ void {expression}(const float*, const float*, const float*, float*, float*, "
                 "float*, int, int, int, int, int, int, float, int);\n")
    unit.write_text(text)
    done = subprocess.run(["nvcc", f"-arch={arch}", "-std=c++17", "-Werror", "all-warnings", "-Xptxas", "-v", "-c",
                           "-o", str(tmp_path / "unit.o"), str(unit)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    spills = [int(line.split("bytes spill stores")[0].split(",")[-1]) for line in done.stderr.splitlines()
              if "bytes spill stores" in line]
    assert spills == [0] * len(launches), done.stderr


def options(device, kernel="flash", **settings):
    return RunOptions(context=RunContext("test", "test", "test"), kernel=kernel, warmup=1, iters=2,
                      settings=target.Settings(device=device, **settings))


def fresh(seq, dim, causal, heads=2):
    return AttentionProblem(batch=1, heads=heads, seq=seq, dim=dim, causal=causal,
                            seed=int.from_bytes(os.urandom(4), "little"))


@pytest.mark.parametrize("capability,dim,settings,path,note", [
    (90, 64, {}, "3xtf32", "3xTF32 (mma.sync m16n8k8"),
    (80, 128, {}, "3xtf32", "as torch's EFFICIENT kernel"),
    (90, 64, {"fp32_path": "simt"}, "simt", "fp32 FFMA (--gpu-fp32-path simt)"),
    (90, 64, {"tile": (64, 32)}, "simt", "fp32 FFMA (--gpu-tile forces the FFMA kernel)"),
    (90, 59, {}, "simt", "fp32 FFMA (3xTF32 is built for d 64, 128; d=59)"),
    (75, 64, {}, "simt", "3xTF32 needs sm_80 or newer (mma.sync TF32, cp.async); this device is sm_75"),
])
def test_the_fp32_dispatch(capability, dim, settings, path, note):
    problem = fresh(100, dim, False)
    plan = target.fp32_plan(problem, capability, target.Settings(device="fake", **settings))
    assert plan.path == path and note in plan.note
    if path == "3xtf32":
        warps, bc, m_tiles, _ = TF32_CONFIGS[dim, False]
        assert (plan.br, plan.bc) == (16 * m_tiles * warps, bc)


@pytest.mark.parametrize("capability,dim,match", [
    (75, 64, "--gpu-fp32-path 3xtf32: 3xTF32 needs sm_80 or newer"),
    (90, 59, r"--gpu-fp32-path 3xtf32: 3xTF32 is built for d 64, 128; d=59")])
def test_a_forced_3xtf32_row_is_skipped_with_its_reason(capability, dim, match, monkeypatch):
    monkeypatch.setattr(FakeDevice, "CAPABILITY", capability)
    problem = fresh(40, dim, True)
    with pytest.raises(TargetError, match=match) as info:
        target.run(problem, Inputs(problem), options("fake", fp32_path="3xtf32"))
    assert info.value.status == "skipped"


@pytest.mark.parametrize("kernel", ["naive", "fused"])
def test_a_forced_3xtf32_skips_flash_alone(kernel):
    # d 48 has no 3xTF32 kernel, so flash is skipped; naive and fused do not take the option and run
    problem = fresh(64, 48, False, heads=1)
    [row] = target.run(problem, Inputs(problem), options("fake", kernel=kernel, fp32_path="3xtf32"))
    assert row.status == "ok", row.message
    # a fake row of any kernel says so (naive and fused said nothing: the console read like a GPU's)
    assert row.message == f"fake GPU: numpy on the CPU (float32) in place of kernels/{kernel}.cu; no GPU ran"


@pytest.mark.parametrize("dim,tile,stands_in_for", [(64, None, "flash_tf32 (kernels/flash_tf32.cu, path 3xtf32)"),
                                                    (59, None, "flash (kernels/flash.cu, path simt)"),
                                                    (64, (32, 16), "flash (kernels/flash.cu, path simt)")])
def test_fake_fp32_rows_say_numpy_ran_in_the_tile_of_the_gpus_kernel(dim, tile, stands_in_for):
    problem = fresh(37, dim, True)
    [row] = target.run(problem, Inputs(problem), options("fake", tile=tile))
    assert row.status == "ok" and f"numpy on the CPU (float32) in the tile of {stands_in_for}" in row.message
    assert "tensor cores" not in row.message and "FFMA" not in row.message, row.message
    if tile:
        assert (row.br, row.bc) == tile
    [naive] = target.run(problem, Inputs(problem), options("fake", kernel="naive"))
    assert "3xTF32" not in naive.message and "FFMA" not in naive.message  # the choice is flash's alone


def test_the_fp32_path_option():
    parser = argparse.ArgumentParser()
    target.add_options(parser.add_argument_group("gpu"))
    assert target.settings(parser.parse_args(["--gpu-fp32-path", "simt"])).fp32_path == "simt"
    assert target.settings(parser.parse_args([])).fp32_path == "auto"
    with pytest.raises(SpecError, match="--gpu-fp32-path 'tf32' is unknown; allowed: auto, 3xtf32, simt"):
        target.Settings(fp32_path="tf32")
    done = run_module("host.compare", "--targets", "gpu", "--gpu-device", "fake", "--gpu-fp32-path", "3xtf32",
                      "--gpu-tile", "64x32", "--out", "/tmp/kbench-no-out", timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "--gpu-tile sets the FFMA flash kernel's tile; --gpu-fp32-path 3xtf32 runs with its fixed tile" in lines[0]


@pytest.mark.gpu
@pytest.mark.parametrize("fp32_path", ["3xtf32", "simt"])
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", [1, 17, 1000, 4097])
def test_fp32_flash_against_the_golden_and_torch(fp32_path, dim, causal, seq):
    torch = pytest.importorskip("torch")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    problem = fresh(seq, dim, causal)
    inputs = Inputs(problem)
    settings = target.Settings(fp32_path=fp32_path)
    [row] = target.run(problem, inputs, options("cuda", fp32_path=fp32_path))
    assert row.status == "ok", row.message  # within the fp32 tolerance of host/verdict.py
    assert ("3xTF32" if fp32_path == "3xtf32" else "FFMA") in row.message
    dev = target.backend(settings)
    plan = target.launch_plan(problem, settings, dev)
    launch = target.launcher("flash", problem, inputs, plan.br, plan.bc, dev, plan.path)
    launch.launch()
    ours = errors(launch.output(), inputs.golden).rel_l2
    q, k, v = (torch.from_numpy(x).cuda() for x in (inputs.q, inputs.k, inputs.v))
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal).cpu().numpy()
    reference = errors(theirs, inputs.golden).rel_l2
    assert np.isfinite(ours) and ours <= 2 * reference, (ours, reference)
