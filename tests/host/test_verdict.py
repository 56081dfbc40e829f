"""host/verdict.py: the derived float tolerance holds for correct float32 computations and rejects real mistakes;
Q15 outputs must be bit-exact with the model and inside the contract's worst-case bound."""

import numpy as np
import pytest

from host import q15
from host.errors import SpecError
from host.problem import AttentionProblem
from host.reference import attention, golden
from host.verdict import SAFETY, check_float, check_q15, float_bracket
from kernels import fake

SHAPES = [(17, 59, True), (97, 16, False), (256, 256, False), (1025, 64, True), (2048, 1, False)]


def fake_flash(problem, q, k, v, br=64, bc=64):
    """The fake GPU's flash algorithm (float32, online softmax over key tiles) on (B, H, N, d) inputs."""
    shape = (problem.batch * problem.heads, problem.seq, problem.dim)
    out = np.empty(shape, dtype=np.float32)
    fake.flash(q.reshape(shape), k.reshape(shape), v.reshape(shape), out, problem, br, bc)
    return out.reshape(problem.shape)


@pytest.mark.parametrize("seq,dim,causal", SHAPES)
def test_correct_float32_computations_use_a_fraction_of_the_bracket(seq, dim, causal):
    """The docstring's measurement, repeated: the float32 reference and the tiled online softmax stay within 0.4
    (rel-L2) and 0.8 (max-abs) of the rounding bracket u·(1 + √d + √N), so SAFETY = 8 leaves them a margin of 10 or
    more."""
    problem = AttentionProblem(heads=2, seq=seq, dim=dim, causal=causal, seed=3)
    q, k, v = problem.inputs()
    gold = golden(problem)
    bracket = float_bracket(problem)
    for out in (attention(q, k, v, causal, np.float32), fake_flash(problem, q, k, v)):
        verdict = check_float(out, problem, gold)
        assert verdict.status == "ok" and verdict.message == ""
        assert verdict.metrics.rel_l2 <= 0.4 * bracket
        assert verdict.metrics.max_abs <= 0.8 * bracket * np.abs(gold).max()


def test_the_limits_follow_the_formula():
    problem = AttentionProblem(seq=1024, dim=64)
    assert float_bracket(problem) == 2.0**-24 * (1 + 8 + 32)
    half = problem.with_(dtype="float16")
    assert float_bracket(half) == 2.0**-11 + 2.0**-24 * (1 + 8 + 32)  # fp16 storage, fp32 accumulation
    gold = golden(AttentionProblem(seq=4, dim=4))
    verdict = check_float(gold.astype(np.float32), AttentionProblem(seq=4, dim=4), gold)
    assert verdict.rel_l2_limit == SAFETY * float_bracket(AttentionProblem(seq=4, dim=4))
    with pytest.raises(SpecError, match="dtype='q15' has no float tolerance"):
        float_bracket(problem.with_(dtype="q15"))


@pytest.mark.parametrize("change,needle", [
    (lambda o: o * np.float32(1 + 1e-4), "rel_l2"),             # a stale factor of 1e-4 everywhere
    (lambda o: np.where(np.arange(o.size).reshape(o.shape) == 77, o + 1e-3, o), "max_abs"),  # one element
    (lambda o: np.where(np.arange(o.size).reshape(o.shape) == 5, np.nan, o), "rel_l2 inf"),   # a NaN
])
def test_small_mistakes_are_wrong_and_say_where(change, needle):
    problem = AttentionProblem(heads=2, seq=128, dim=64, causal=True)
    q, k, v = problem.inputs()
    gold = golden(problem)
    verdict = check_float(change(attention(q, k, v, True, np.float32)), problem, gold)
    assert verdict.status == "wrong" and needle in verdict.message and "worst O(" in verdict.message
    assert verdict.as_fields()["status"] == "wrong" and verdict.as_fields()["rel_l2"] == verdict.metrics.rel_l2


def quantized_case(seq, dim, causal, seed=0):
    problem = AttentionProblem(heads=2, seq=seq, dim=dim, causal=causal, seed=seed)
    q, k, v = problem.inputs()
    quantized = q15.prepare(problem, q, k, v)
    return problem, (q, k, v), quantized, golden(problem)


@pytest.mark.parametrize("seq,dim,causal", [(1, 1, False), (17, 59, True), (64, 16, False), (97, 32, True)])
def test_the_model_is_ok_and_inside_its_bound(seq, dim, causal):
    problem, (q, k, v), quantized, gold = quantized_case(seq, dim, causal)
    out = quantized.expected()
    bound = q15.error_bound(q, k, v, quantized)
    verdict = check_q15(out, q15.Q15Out(out.o.copy(), out.shift.copy()), quantized.dequantize(out), gold, bound)
    assert verdict.status == "ok" and verdict.bit_exact is True and verdict.max_abs_limit == bound
    assert verdict.metrics.max_abs <= bound


def test_one_flipped_bit_is_wrong_and_named():
    problem, (q, k, v), quantized, gold = quantized_case(33, 8, False)
    expected = quantized.expected()
    out = q15.Q15Out(expected.o.copy(), expected.shift.copy())
    out.o[0, 1, 4, 2] ^= 1
    verdict = check_q15(out, expected, quantized.dequantize(out), gold, q15.error_bound(q, k, v, quantized))
    assert verdict.status == "wrong" and verdict.bit_exact is False
    assert "1 of 528 values differ" in verdict.message and "O(0, 1, 4, 2)" in verdict.message


def test_one_wrong_row_shift_is_wrong_and_named():
    problem, (q, k, v), quantized, gold = quantized_case(33, 8, False)
    expected = quantized.expected()
    out = q15.Q15Out(expected.o.copy(), expected.shift.copy())
    out.shift[0, 0, 7] += 1
    verdict = check_q15(out, expected, quantized.dequantize(out), gold, q15.error_bound(q, k, v, quantized))
    assert verdict.status == "wrong" and verdict.bit_exact is False
    assert "1 of 66 row shifts differ" in verdict.message and "g(0, 0, 7)" in verdict.message


def test_garbage_that_matches_a_broken_model_still_breaks_the_bound():
    """If the model and the kernel were wrong together (here: both output zeros), bit-exactness holds and the
    contract's bound is what catches it, at sizes where the worst case is below max|O|."""
    problem, (q, k, v), quantized, gold = quantized_case(16, 16, False)
    zeros = q15.Q15Out(np.zeros(problem.shape, dtype=np.int16), np.zeros(problem.shape[:-1], dtype=np.uint8))
    bound = q15.error_bound(q, k, v, quantized)
    verdict = check_q15(zeros, zeros, quantized.dequantize(zeros), gold, bound)
    assert bound < np.abs(gold).max() and verdict.status == "wrong" and "contract's bound" in verdict.message
