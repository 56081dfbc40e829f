"""The gpu target's q15 kernel: its rows through the target and host.compare on the fake (CI: the model stands in
for kernels/q15.cu, so the plumbing, poison, verdict and fields are checked) and on a GPU (marker gpu), and on a GPU
the kernel's bits against host/q15.py on awkward shapes with random and extreme int16 inputs."""

import argparse
import os

import numpy as np
import pytest

from helpers import q15_warp
from host import q15
from host.errors import TargetError
from host.problem import AttentionProblem
from host.target_api import Inputs, RunContext, RunOptions
from kernels import target
from kernels.q15_launch import q15_launch

DEVICES = [pytest.param("cuda", marks=pytest.mark.gpu), "fake"]
KINDS = ("random", "min", "max", "zero_rows", "mixed")


def options(device, warmup=1, iters=2):
    return RunOptions(context=RunContext("test", "test", "test"), kernel="q15", warmup=warmup, iters=iters,
                      settings=target.Settings(device=device))


def fresh_problem(seq, dim, causal, heads=2, **shape):
    return AttentionProblem(batch=1, heads=heads, seq=seq, dim=dim, causal=causal, dtype="q15",
                            seed=int.from_bytes(os.urandom(4), "little"), **shape)


def quantized_inputs(problem: AttentionProblem, kind: str, rng: np.random.Generator) -> q15.Quantized:
    """int16 Q, K, V of the problem's shapes: uniform over the whole range, all −32768, all 32767, random with every
    fourth query row and key's value zero, or a mix of the extremes; a random score scale the contract allows."""
    def draw(shape):
        if kind == "min":
            return np.full(shape, -32768, dtype=np.int16)
        if kind == "max":
            return np.full(shape, 32767, dtype=np.int16)
        x = rng.integers(-32768, 32768, shape).astype(np.int16)
        if kind == "zero_rows":
            x[..., ::4, :] = 0
        if kind == "mixed":
            x = np.choose(rng.integers(0, 3, shape), [x, np.int16(-32768), np.int16(32767)]).astype(np.int16)
        return x

    q, k, v = draw(problem.shape), draw(problem.kv_shape), draw(problem.kv_shape)
    exponents = tuple(int(e) for e in rng.integers(-4, 5, 3))
    mult, shift = q15.score_scale(exponents[0], exponents[1], problem.dim)
    params = q15.Q15Params(problem.seq, problem.dim, problem.causal, q15.BC, mult, shift)
    return q15.Quantized(q, k, v, exponents, params)


def gpu_bits(problem: AttentionProblem, quantized: q15.Quantized) -> q15.Q15Out:
    from kernels.cuda import CudaDevice

    launch = CudaDevice.q15_launcher(problem, quantized)
    launch.launch()
    CudaDevice.synchronize()
    return launch.output()


@pytest.mark.gpu
@pytest.mark.parametrize("seq", [1, 17, 97, 1025])
@pytest.mark.parametrize("dim", [59, 64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_the_kernel_is_bit_exact_on_awkward_shapes(seq, dim, causal, kind):
    problem = fresh_problem(seq, dim, causal, heads=4, kv_heads=2)
    quantized = quantized_inputs(problem, kind, np.random.default_rng(problem.seed))
    got, want = gpu_bits(problem, quantized), quantized.expected()
    assert got.same_bits(want), f"seed {problem.seed}, {kind}: {got.first_difference(want)}"


@pytest.mark.gpu
@pytest.mark.parametrize("seq", [97, 1025, 4099])
@pytest.mark.parametrize("q_len", [1, 16])
@pytest.mark.parametrize("dim", [59, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", ["random", "mixed"])
def test_decode_shapes_with_grouped_heads_are_bit_exact(seq, q_len, dim, causal, kind):
    """q_len queries at the bottom right of seq keys (row0 = seq − q_len), 8 query heads on 2 K/V heads, batch 2."""
    problem = AttentionProblem(batch=2, heads=8, kv_heads=2, seq=seq, q_len=q_len, dim=dim, causal=causal,
                               dtype="q15", seed=seq + q_len)
    quantized = quantized_inputs(problem, kind, np.random.default_rng(problem.seed))
    got, want = gpu_bits(problem, quantized), quantized.expected()
    assert got.same_bits(want), got.first_difference(want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seq,dim,causal,shape", [(1, 64, False, {}), (17, 59, True, {}),
                                                  (130, 128, True, {"q_len": 16, "kv_heads": 1}),
                                                  (97, 256, False, {"q_len": 1})])
def test_rows_carry_the_q15_verdict_and_figures(device, seq, dim, causal, shape):
    problem = fresh_problem(seq, dim, causal, **shape)
    [row] = target.run(problem, Inputs(problem.with_(dtype="float32")), options(device))
    assert row.status == "ok", row.message
    assert (row.target, row.kernel, row.dtype, row.numerics) == ("gpu", "q15", "q15", q15.NUMERICS)
    assert row.bit_exact is True and row.rel_l2 < 5e-3 and row.p50_ms > 0 and row.gflops > 0
    launch = q15_launch(problem)
    assert (row.br, row.bc) == (launch.rows, q15.BC)
    assert row.model_bytes == problem.min_bytes() + problem.batch * problem.heads * problem.queries
    assert (device == "fake") == ("fake" in row.device) == (row.energy_source == "")
    assert launch.function in row.message


def test_a_kernel_off_by_one_bit_is_a_wrong_row_naming_the_difference(monkeypatch, tmp_path):
    from host.compare import main
    from host.results_file import ResultsFile
    from kernels import fake

    def off_by_one(quantized):
        out = quantized.expected()
        out.o[0, 1, -1, 2] += 1
        return out

    monkeypatch.setattr(fake, "q15_model", off_by_one)
    code = main(["--targets", "gpu", "--gpu-device", "fake", "--kernels", "q15", "--seq", "33", "--dim", "16",
                 "--heads", "2", "--causal", "1", "--out", str(tmp_path)])
    [row] = ResultsFile(tmp_path / "results.csv").read()
    assert code == 1 and row.status == "wrong" and row.bit_exact is False
    assert "not bit-exact with host/q15.py (1 of 1056 values differ: O(0, 1, 32, 2)" in row.message


def test_a_row_left_unwritten_is_an_error(monkeypatch):
    from kernels import fake

    monkeypatch.setattr(fake.FakeQ15Launcher, "launch", lambda self: None)
    problem = fresh_problem(20, 8, False)
    with pytest.raises(TargetError, match=r"q15 left row \(0, 0, 0\) unwritten \(its shift is still the poison 255\)"):
        target.run(problem, Inputs(problem.with_(dtype="float32")), options("fake"))


def test_q15_runs_where_asked_for():
    """--kernels q15 or --gpu-dtype ...,q15 puts it in the gpu target's table; a default sweep leaves it out; seq past
    the contract is a skipped shape."""
    parser = argparse.ArgumentParser()
    target.add_options(parser.add_argument_group("gpu"))
    parser.add_argument("--kernels", type=lambda text: tuple(text.split(",")), default=None)

    def pairs(*argv):
        return target.kernels(target.settings(parser.parse_args(list(argv))))

    assert ("q15", "q15") not in pairs()
    assert pairs("--kernels", "q15")[-1] == ("q15", "q15") == pairs("--gpu-dtype", "fp16,q15")[-1]
    assert pairs("--gpu-dtype", "q15") == [("q15", "q15")]
    assert target.supports(AttentionProblem(seq=q15.SEQ_MAX, dtype="q15")) == (True, "")
    ok, why = target.supports(AttentionProblem(seq=q15.SEQ_MAX + 1, dtype="q15"))
    assert not ok and "past the Q15 contract's 32768 keys" in why


def test_launch_geometry():
    """D rounded up to 32; 4 warps to D 64, 2 above; tiles of 16·warps rows times B·H; shared memory by hand:
    D 64, 4 warps: A 64·64·8 = 32,768, table 256, Q 2·64·80 = 10,240, K 2·64·80 = 10,240, Vᵀ 2·64·80 = 10,240."""
    small = q15_launch(AttentionProblem(batch=2, heads=3, seq=100, dim=59, dtype="q15"))
    assert (small.dim_pad, small.warps, small.rows, small.grid) == (64, 4, 64, 2 * 2 * 3)
    assert small.smem == 32768 + 256 + 3 * 10240 and small.function == "q15_attention<64,4>"
    large = q15_launch(AttentionProblem(seq=1, dim=256, dtype="q15"))
    # 32·256·8 = 65,536; Q 2·32·272 = 17,408; K 2·64·272 = 34,816; Vᵀ 2·256·80 = 40,960
    assert (large.warps, large.smem) == (2, 65536 + 256 + 17408 + 34816 + 40960)
    assert large.smem <= 227 * 1024  # the H100's and H200's opt-in shared memory per block


def test_the_fake_is_the_emulated_kernel_on_a_small_head():
    """The fake's model and the lane-level emulation of kernels/q15.cu (tests/helpers/q15_warp.py) agree on a grouped
    decode head: what the fake's rows stand for is what the kernel computes."""
    problem = AttentionProblem(batch=1, heads=2, kv_heads=1, seq=70, q_len=5, dim=40, causal=True, dtype="q15")
    quantized = quantized_inputs(problem, "mixed", np.random.default_rng(5))
    want = quantized.expected()
    for h in range(2):
        got = q15_warp.kernel_head(*quantized.head(0, h), quantized.params)
        assert got.same_bits(q15.Q15Out(want.o[0, h], want.shift[0, h]))
