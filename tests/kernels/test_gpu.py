"""The GPU target: every .cu compiles with nvcc (CI), byte models and dispatch checks (CI), and on a GPU every
kernel against the float64 golden at awkward shapes with poisoned outputs and fresh inputs (marker gpu)."""

import os
import shutil
import subprocess

import numpy as np
import pytest

from helpers import ROOT
from host.errors import SpecError, TargetError
from host.problem import AttentionProblem
from host.target_api import Inputs, RunContext, RunOptions
from kernels import target
from kernels.variants import FLASH, TC_DIMS

FLASH_INSTANCES = [(128, 64, 64), (64, 64, 64), (32, 64, 64), (64, 32, 128), (32, 32, 128), (16, 32, 256), (8, 8, 59),
                   (16, 64, 16), (128, 8, 1)]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("source", ["naive.cu", "fused.cu", "flash.cu", "split_combine.cu", "stream_read.cu"])
def test_every_kernel_compiles_with_nvcc(source, arch, tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    unit = tmp_path / f"unit_{source}"
    text = f'#include "{ROOT / "kernels" / source}"\n'
    if source == "flash.cu":  # a template: instantiate the tiles and head dimensions we use, d = 59 included
        text += "".join(f"template __global__ void {FLASH.expressions(AttentionProblem(seq=1, dim=d), br, bc)[0]}("
                        "const float*, const float*, const float*, float*, int, int, int, float, int);\n"
                        for br, bc, d in FLASH_INSTANCES)
    if source == "split_combine.cu":  # each output type at both dimensions and every tile the split-KV kernels use
        text += "".join(f"template __global__ void split_combine<{kind},{d},{br},{bc}>(const float*, const float*, "
                        f"{kind}*, int, int, int, int, int);\n"
                        for kind, br, bc in (("float", 64, 32), ("__half", 16, 64), ("__half", 64, 64),
                                             ("__nv_bfloat16", 16, 64), ("__nv_bfloat16", 64, 64)) for d in TC_DIMS)
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


# The same tests run on the real device (marker gpu) and on the numpy fake (always): the fake implements the
# launcher's contract, so planning, NaN poison, out-of-memory, verdict and row fields run in CI without a GPU.
DEVICES = [pytest.param("cuda", marks=pytest.mark.gpu), "fake"]


def fresh_problem(seq, dim, causal, heads=2):
    return AttentionProblem(batch=1, heads=heads, seq=seq, dim=dim, causal=causal,
                            seed=int.from_bytes(os.urandom(4), "little"))


def options(kernel, device, tile=None, warmup=1, iters=2):
    return RunOptions(context=RunContext("test", "test", "test"), kernel=kernel, warmup=warmup, iters=iters,
                      settings=target.Settings(device=device, tile=tile))


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["naive", "fused", "flash"])
@pytest.mark.parametrize("seq", [1, 17, 97, 1025])
@pytest.mark.parametrize("dim", [16, 59, 64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_kernels_match_the_golden(kernel, seq, dim, causal):
    problem = fresh_problem(seq, dim, causal)
    [row] = target.run(problem, Inputs(problem), options(kernel, "cuda"))
    assert row.status == "ok", row.message


@pytest.mark.gpu
@pytest.mark.parametrize("seq,dim,causal", [(1, 64, False), (17, 59, True), (97, 16, False), (1025, 128, True)])
def test_the_golden_computed_on_the_gpu_is_the_hosts(seq, dim, causal):
    from kernels.cuda import CudaDevice

    problem = fresh_problem(seq, dim, causal, heads=3)
    on_device, on_host = Inputs(problem), Inputs(problem)
    gold = on_device.golden_from(CudaDevice.golden)
    assert "golden" in on_device.__dict__ and gold is on_device.golden  # computed once, kept for later rows
    np.testing.assert_allclose(gold, on_host.golden, rtol=0, atol=1e-12)


def test_a_golden_from_elsewhere_is_used_once_checked_and_optional():
    problem = fresh_problem(17, 5, True)
    calls = []
    host = Inputs(problem).golden
    inputs = Inputs(problem)
    assert inputs.golden_from(lambda i: calls.append(i) or None) is inputs.golden  # None: the host computes it
    np.testing.assert_array_equal(inputs.golden, host)
    assert inputs.golden_from(lambda i: calls.append(i) or host + 1) is inputs.golden  # already there: not asked
    assert len(calls) == 1
    given = Inputs(problem)
    assert given.golden_from(lambda i: host + 1) is given.golden and np.array_equal(given.golden, host + 1)
    with pytest.raises(SpecError, match=r"float32 \(1, 2, 17, 5\); allowed: float64 \(1, 2, 17, 5\)"):
        Inputs(problem).golden_from(lambda i: host.astype(np.float32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel", ["naive", "fused", "flash"])
@pytest.mark.parametrize("seq,dim,causal", [(1, 64, False), (17, 59, True), (97, 16, False), (130, 64, True)])
def test_rows_carry_their_verdict_and_figures(device, kernel, seq, dim, causal):
    problem = fresh_problem(seq, dim, causal)
    [row] = target.run(problem, Inputs(problem), options(kernel, device))
    assert row.status == "ok", row.message
    assert row.target == "gpu" and row.kernel == kernel and (row.seq, row.dim, row.causal) == (seq, dim, causal)
    assert row.iters == 2 and row.warmup == 1 and row.p50_ms > 0 and row.gflops > 0
    assert row.model_bytes == target.model_bytes(kernel, problem) and row.bit_exact is None
    assert (row.br is not None) == (kernel == "flash")
    assert (device == "fake") == ("fake" in row.device)
    assert row.timing_source == {"cuda": "measured: CUDA events, L2 flushed before each call",
                                 "fake": "measured: host wall clock of the numpy fake, no GPU timed"}[device]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("br,bc", [(8, 8), (16, 64), (64, 16), (128, 32), (32, 128)])
def test_flash_tiles_match_the_golden(device, br, bc):
    for causal in (False, True):
        problem = fresh_problem(97, 64, causal)
        [row] = target.run(problem, Inputs(problem), options("flash", device, tile=(br, bc)))
        assert (row.br, row.bc) == (br, bc) and row.status == "ok", row.message


@pytest.mark.parametrize("device", DEVICES)
def test_naive_reports_oom_before_allocating(device):
    problem = AttentionProblem(batch=64, heads=64, seq=16384, dim=16)  # S alone: 4 TiB
    dev = target.backend(target.Settings(device=device))
    with pytest.raises(TargetError) as info:
        target.launcher("naive", problem, Inputs(problem.with_(batch=1, heads=1)), 64, 64, dev)
    assert info.value.status == "oom" and str(target.naive_scores_bytes(problem)) in str(info.value)


def test_an_oom_is_an_oom_row_through_compare(tmp_path):
    from host.compare import main
    from host.results_file import ResultsFile

    # the fake has 1 GiB: naive's S for 4 heads at N = 8192 needs 1 GiB on its own; a sweep that measured nothing fails
    code = main(["--targets", "gpu", "--gpu-device", "fake", "--kernels", "naive", "--seq", "8192", "--dim", "16",
                 "--heads", "4", "--causal", "1", "--out", str(tmp_path)])
    [row] = ResultsFile(tmp_path / "results.csv").read()
    assert code == 1 and row.status == "oom" and "GiB" in row.message and row.p50_ms is None


def test_a_forced_tile_that_does_not_fit_is_a_skipped_row_with_its_bytes(tmp_path):
    """--gpu-tile 128x128 at d 256 needs 4·(128·256 + 128·260 + 128·256 + 128·132 + 3·128) = 464,384 B of shared
    memory (Q, K padded to d + 4, V, S padded to Bc + 4, three floats a row), over the fake's H200 limit: a skipped
    row saying so, as kernels.sweep's cell is, not an error."""
    from host.compare import main
    from host.results_file import ResultsFile

    main(["--targets", "gpu", "--gpu-device", "fake", "--kernels", "flash", "--gpu-tile", "128x128", "--seq", "16",
          "--dim", "256", "--heads", "1", "--causal", "0", "--out", str(tmp_path)])
    [row] = ResultsFile(tmp_path / "results.csv").read()
    assert row.status == "skipped" and "needs 464384 B of shared memory per block" in row.message, row.message


@pytest.mark.parametrize("options,line", [
    (["--gpu-tc-path", "wgmma"], "--gpu-tc-path wgmma chooses the 16-bit rows' kernel; --gpu-dtype has no fp16 or "
                                 "bf16: add one, or drop --gpu-tc-path"),
    (["--gpu-fp32-path", "simt", "--gpu-dtype", "fp16"], "--gpu-fp32-path simt chooses float32 flash's arithmetic; "
                                                         "--gpu-dtype has no fp32: add it, or drop --gpu-fp32-path"),
    (["--gpu-tile", "64x64", "--kernels", "naive,fused"], "--gpu-tile chooses how flash runs; --kernels naive,fused "
                                                          "runs no flash row: add flash, or drop --gpu-tile"),
])
def test_an_option_that_chooses_for_no_row_asked_is_refused(tmp_path, capsys, options, line):
    """The GPU options that pick how a row runs, given where no such row is asked: one line (they were ignored
    without a word), as --gpu-tile without fp32 is."""
    from host.compare import main

    assert main(["--targets", "gpu", "--gpu-device", "fake", "--seq", "16", "--dim", "16", *options, "--out",
                 str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"kbench: error: {line}"


@pytest.mark.parametrize("device", DEVICES)
def test_fused_refuses_beyond_its_cap(device):
    """A shape fused cannot hold here is a skipped row, as a flash tile over shared memory is (it was an error)."""
    dev = target.backend(target.Settings(device=device))
    cap = target.fused_cap(dev)
    problem = AttentionProblem(seq=cap + 1, dim=16)
    with pytest.raises(TargetError, match=f"N={cap + 1} exceeds") as info:
        target.launcher("fused", problem, Inputs(problem), 64, 64, dev)
    assert info.value.status == "skipped"


@pytest.mark.parametrize("device", DEVICES)
def test_poisoned_output_is_fully_written(device):
    problem = fresh_problem(1025 if device == "cuda" else 130, 59, True)
    launch = target.launcher("flash", problem, Inputs(problem), 64, 64, target.backend(target.Settings(device)))
    assert np.isnan(launch.output()).all(), "O is poisoned before the first launch"
    launch.launch()
    assert np.isfinite(launch.output()).all()


def test_a_kernel_that_skips_rows_fails_the_nan_poison_check(monkeypatch):
    from kernels import fake

    def skips_last_row(q, k, v, out, problem, br, bc, parts=0):
        fake.flash(q, k, v, out, problem, br, bc)
        out[:, -1] = np.nan  # as if the last query tile were never launched

    monkeypatch.setitem(fake.KERNEL_MATH, "flash", skips_last_row)
    problem = fresh_problem(33, 16, False)
    with pytest.raises(TargetError, match=r"flash left O\(0, 0, 32, 0\) unwritten"):
        target.run(problem, Inputs(problem), options("flash", "fake"))


def flash_with(mistake):
    """kernels/fake.py's flash algorithm with one mistake a real kernel makes: a missed rescale of the accumulator
    when the running max grows, 1/d instead of 1/√d, or the causal mask shifted by one key."""
    def kernel(q, k, v, out, problem, br, bc, parts=0):
        n = problem.seq
        scale = np.float32((1.0 / problem.dim if mistake == "wrong_scale" else problem.scale) * 1.4426950408889634)
        for i0 in range(0, n, br):
            i1 = min(n, i0 + br)
            m = np.full((q.shape[0], i1 - i0, 1), -np.inf, dtype=np.float32)
            l = np.zeros_like(m)
            acc = np.zeros((q.shape[0], i1 - i0, problem.dim), dtype=np.float32)
            for j0 in range(0, n, bc):
                j1 = min(n, j0 + bc)
                s = np.matmul(q[:, i0:i1], k[:, j0:j1].transpose(0, 2, 1)) * scale
                shift = 1 if mistake == "mask_off_by_one" else 0
                s[:, np.arange(j0, j1)[None, :] > np.arange(i0, i1)[:, None] + shift] = -np.inf
                m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
                alpha = np.exp2(np.where(np.isfinite(m_new), m - m_new, 0))
                p = np.exp2(np.where(np.isfinite(m_new), s - m_new, -np.inf))
                l = l * alpha + p.sum(axis=-1, keepdims=True)
                acc = (acc if mistake == "no_rescale" else acc * alpha) + np.matmul(p, v[:, j0:j1])
                m = m_new
            out[:, i0:i1] = acc / l
    return kernel


@pytest.mark.parametrize("mistake", ["none", "no_rescale", "wrong_scale", "mask_off_by_one"])
def test_a_wrong_kernel_gives_a_wrong_row_with_its_figures(monkeypatch, mistake, tmp_path):
    """Each mistake is judged `wrong` by the verdict, through compare (exit 1); the same code without a mistake
    is `ok` (the check can pass as well as fail)."""
    from host.compare import main
    from host.results_file import ResultsFile
    from kernels import fake

    monkeypatch.setitem(fake.KERNEL_MATH, "flash", flash_with(mistake))
    code = main(["--targets", "gpu", "--gpu-device", "fake", "--kernels", "flash", "--seq", "64,97", "--dim", "32",
                 "--heads", "2", "--causal", "1", "--gpu-tile", "16x16", "--out", str(tmp_path)])
    rows = ResultsFile(tmp_path / "results.csv").read()
    assert len(rows) == 2 and all(row.p50_ms > 0 and row.rel_l2 is not None for row in rows)
    if mistake == "none":
        assert code == 0 and {row.status for row in rows} == {"ok"}
    else:
        assert code == 1 and {row.status for row in rows} == {"wrong"}
        assert all(row.message.startswith("wrong") and "worst O(" in row.message for row in rows)
