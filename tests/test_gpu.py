"""The GPU target: every .cu compiles with nvcc (CI), byte models and dispatch checks (CI), and on a GPU every
kernel against the float64 golden at awkward shapes with poisoned outputs and fresh inputs (marker gpu)."""

import os
import shutil
import subprocess

import numpy as np
import pytest

from conftest import ROOT
from host.errors import SpecError
from host.problem import AttentionProblem
from host.target_api import Inputs, RunContext, RunOptions
from kernels import target

FLASH_INSTANCES = [(128, 64, 64), (64, 64, 64), (32, 64, 64), (64, 32, 128), (32, 32, 128), (16, 32, 256), (8, 8, 59), (16, 64, 16), (128, 8, 1)]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("source", ["naive.cu", "fused.cu", "flash.cu"])
def test_every_kernel_compiles_with_nvcc(source, arch, tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    unit = tmp_path / f"unit_{source}"
    text = f'#include "{ROOT / "kernels" / source}"\n'
    if source == "flash.cu":  # a template: instantiate the tiles and head dimensions we use, d = 59 included
        text += "".join(f"template __global__ void flash_fwd<{br},{bc},{d}>(const float*, const float*, "
                        f"const float*, float*, int, float, int);\n" for br, bc, d in FLASH_INSTANCES)
    unit.write_text(text)
    done = subprocess.run(["nvcc", f"-arch={arch}", "-std=c++17", "-Werror", "all-warnings", f"-I{ROOT / 'kernels'}",
                           "-c", "-o", str(tmp_path / "unit.o"), str(unit)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr


def test_byte_models():
    p = AttentionProblem(batch=2, heads=8, seq=1024, dim=64)
    assert target.model_bytes("naive", p) == 4 * 16 * (4 * 1024 * 64 + 4 * 1024 * 1024)
    assert target.model_bytes("flash", p) == target.model_bytes("fused", p) == p.min_bytes()
    assert target.naive_scores_bytes(p) == 4 * 16 * 1024 * 1024


def test_default_tiles_and_tile_checks():
    long = AttentionProblem(heads=16, seq=4096, dim=64)
    assert target.default_tile(long) == (128, 64)                     # 32 tiles · 16 heads = 512 >= 132
    assert target.default_tile(long.with_(seq=1024)) == (64, 64)      # 8 · 16 = 128 < 132: Br halved once
    assert target.default_tile(long.with_(seq=17, heads=1)) == (32, 64)  # never below 32
    assert target.default_tile(long.with_(dim=128)) == (64, 32)
    assert target.default_tile(long.with_(dim=256)) == (16, 32)
    assert target.default_tile(long.with_(seq=1024), sms=100) == (128, 64)  # 128 >= 100
    with pytest.raises(SpecError, match=r"Br=24 is not supported; allowed: 8, 16, 32, 64, 128"):
        target.check_tile(24, 32)


def test_without_a_gpu_the_target_says_why():
    ok, reason = target.available()
    if not ok:
        assert reason and ("CuPy" in reason or "CUDA" in reason)


def fresh_problem(seq, dim, causal, heads=2):
    return AttentionProblem(batch=1, heads=heads, seq=seq, dim=dim, causal=causal,
                            seed=int.from_bytes(os.urandom(4), "little"))


def options(kernel, **extra):
    return RunOptions(context=RunContext("test", "test", "test"), kernel=kernel, warmup=1, iters=2, extra=extra)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["naive", "fused", "flash"])
@pytest.mark.parametrize("seq", [1, 17, 97, 1025])
@pytest.mark.parametrize("dim", [16, 59, 64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_kernels_match_the_golden(kernel, seq, dim, causal):
    problem = fresh_problem(seq, dim, causal)
    [row] = target.run(problem, Inputs(problem), options(kernel))
    assert row.status == "ok" and row.rel_l2 <= 1e-5, (row.rel_l2, row.max_abs)


@pytest.mark.gpu
@pytest.mark.parametrize("br,bc", [(8, 8), (16, 64), (64, 16), (128, 32), (32, 128)])
def test_flash_tiles_match_the_golden(br, bc):
    for causal in (False, True):
        problem = fresh_problem(97, 64, causal)
        [row] = target.run(problem, Inputs(problem), options("flash", br=br, bc=bc))
        assert (row.br, row.bc) == (br, bc) and row.rel_l2 <= 1e-5


@pytest.mark.gpu
def test_naive_reports_oom_with_the_bytes_it_needs():
    problem = AttentionProblem(batch=64, heads=64, seq=16384, dim=16)  # S alone: 4 TiB
    with pytest.raises(Exception) as info:
        target.Launcher("naive", problem, Inputs(problem.with_(batch=1, heads=1)), 64, 64)
    assert getattr(info.value, "status", "") == "oom" and str(target.naive_scores_bytes(problem)) in str(info.value)


@pytest.mark.gpu
def test_fused_refuses_beyond_its_cap():
    cap = target.fused_cap()
    problem = AttentionProblem(seq=cap + 1, dim=16)
    with pytest.raises(SpecError, match=f"N={cap + 1} exceeds"):
        target.Launcher("fused", problem, Inputs(problem), 64, 64)


@pytest.mark.gpu
def test_poisoned_output_is_fully_written():
    problem = fresh_problem(1025, 59, True)
    launcher = target.Launcher("flash", problem, Inputs(problem), 64, 64)
    launcher.launch()
    import cupy

    assert not bool(cupy.isnan(launcher.out).any())
    assert np.isfinite(cupy.asnumpy(launcher.out)).all()
