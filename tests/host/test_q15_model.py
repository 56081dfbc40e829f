"""host/q15.py, the Q15 contract's model: quantisation, score scale, the exp step, accuracy and bad input."""

import math

import numpy as np
import pytest

from host import q15
from host.errors import SpecError
from host.problem import AttentionProblem
from host.reference import errors, golden


def test_quantize_round_trip_and_saturation():
    x = np.array([0.0, 0.5, -0.5, 1.0, -1.0, 0.999, 1e-9])
    q, s = q15.quantize(x)
    assert s == 0  # max|x| = 1 = 2^0
    assert q.tolist() == [0, 16384, -16384, 32767, -32768, 32735, 0]  # +1.0 saturates to 32767
    assert np.max(np.abs(q15.dequantize(q, s) - x)) <= 2.0 ** -15 + 1e-12
    assert q15.quantize(np.array([3.0, -0.1]))[1] == 2
    assert q15.quantize(np.zeros(4))[1] == 0


def test_quantize_rounds_half_up():
    q, _ = q15.quantize(np.array([0.5, -0.5, 1.5, -1.5]) * 2.0 ** -15, exponent=0)
    assert q.tolist() == [1, 0, 2, -1]


@pytest.mark.parametrize("bad", [np.array([np.inf]), np.array([np.nan, 1.0]), np.array([2.0 ** 30])])
def test_quantize_refuses_what_it_cannot_represent(bad):
    with pytest.raises(SpecError):
        q15.quantize(bad)


@pytest.mark.parametrize("exp_q,exp_k,dim", [(0, 0, 1), (2, 2, 64), (-3, 1, 59), (3, 3, 256), (-10, -10, 7)])
def test_score_scale_is_a_normalised_mantissa_close_to_the_real_factor(exp_q, exp_k, dim):
    mult, shift = q15.score_scale(exp_q, exp_k, dim)
    assert q15.MULT_MIN <= mult <= q15.MULT_MAX and q15.SHIFT_MIN <= shift <= q15.SHIFT_MAX
    factor = 2.0 ** (exp_q + exp_k - 14) * math.log2(math.e) / math.sqrt(dim)
    assert abs(mult * 2.0 ** -shift / factor - 1) <= 2.0 ** -15


def test_score_scale_refuses_exponents_beyond_the_shift_range():
    with pytest.raises(SpecError, match=r"sQ=24, sK=24.*allowed: 1\.\.62"):
        q15.score_scale(24, 24, 64)


def test_exp2_table_values_and_error_bound():
    assert q15.EXP2_TABLE[0] == 1 << 24 and len(q15.EXP2_TABLE) == 64
    delta = np.arange(0, 16 << 16, dtype=np.int64)
    p = q15.exp2_q15(delta)
    exact = np.minimum(2.0 ** (-delta / 65536.0) * 32768, 32767)
    # interpolation (<= 1.5e-5 relative, <= 0.49 LSB) plus the final rounding (0.5 LSB)
    assert np.max(np.abs(p - exact)) <= 0.97  # docs/q15.md states the measured 0.969
    assert np.all(np.diff(p) <= 0), "monotone non-increasing"
    assert q15.exp2_q15(np.array([16 << 16, 1 << 30])).tolist() == [0, 0]


def test_round_shift_rounds_half_up_for_both_signs():
    assert q15.round_shift(np.array([5, -5, 6, -6, 7, -7]), 1).tolist() == [3, -2, 3, -3, 4, -3]


@pytest.mark.parametrize("seq", [1, 17, 97, 256])
@pytest.mark.parametrize("dim", [32, 64])
@pytest.mark.parametrize("causal", [False, True])
def test_accuracy_against_the_float64_golden(seq, dim, causal):
    problem = AttentionProblem(heads=2, seq=seq, dim=dim, causal=causal, seed=seq)
    for bc in (1, 16, 64):
        _, out = q15.run_problem(problem, bc=bc)
        assert errors(out, golden(problem)).rel_l2 <= 5e-3


def test_bc_one_block_covering_all_keys_is_plain_two_pass_softmax():
    """With Bc >= seq there is no rescale: the output is the exactly rounded ratio of exact integer sums."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.integers(-32768, 32768, (13, 5), dtype=np.int16) for _ in range(3))
    mult, shift = q15.score_scale(0, 0, 5)
    out = q15.attention_q15(q, k, v, q15.Q15Params(13, 5, False, 64, mult, shift))
    z = np.clip(q15.round_shift((q.astype(np.int64) @ k.astype(np.int64).T) * mult, shift), -2**31, 2**31 - 1)
    p = q15.exp2_q15(z.max(axis=1, keepdims=True) - z)
    assert out.same_bits(q15.divide_q15(p @ v.astype(np.int64), p.sum(axis=1, keepdims=True)))


def test_causal_row_zero_is_v_row_zero_exactly():
    rng = np.random.default_rng(2)
    q, k, v = (rng.integers(-32768, 32768, (9, 4), dtype=np.int16) for _ in range(3))
    out = q15.attention_q15(q, k, v, q15.Q15Params(9, 4, True, 3, *q15.score_scale(0, 0, 4)))
    assert out.shift[0] == 0 and np.array_equal(out.o[0], v[0])  # V's full-scale row needs no shift


def reference_division(acc: int, l: int, g: int) -> int:
    """docs/q15.md §6 for one element, in Python integers: A·2^g / l with l normalised to 16 bits."""
    s = max(0, l.bit_length() - 16)
    l_n = (l + (1 << (s - 1))) >> s if s else l
    t = s - g
    a_n = ((acc + (1 << (t - 1))) >> t if t > 0 else acc) if t >= 0 else acc << -t
    mag = (abs(a_n) + (l_n >> 1)) // l_n
    return max(-32768, min(32767, -mag if a_n < 0 else mag))


def test_output_shift_puts_each_row_peak_in_the_top_two_octaves():
    """g = clamp(bitlen(l) - bitlen(peak) + 14, 0, 31): every row's largest |o| lands in [2^13, 2^15] unless the
    cap or the floor holds it, and each element equals the specification's division in exact integers."""
    rng = np.random.default_rng(5)
    rows, dim = 4000, 7
    l = rng.integers(1, 1 << 30, (rows, 1)) >> rng.integers(0, 30, (rows, 1))
    l = np.maximum(l, 1)
    ratio = np.exp2(-rng.uniform(0, 40, (rows, 1)))  # |O| / max|V| from 1 down to 2^-40
    acc = np.round(rng.uniform(-1, 1, (rows, dim)) * ratio * 32768 * l).astype(np.int64)
    acc[0] = 0  # an all-zero row: g = 0
    acc[1] = 32768 * l[1]  # |A| / l = 2^15 exactly: g = 0, saturated
    out = q15.divide_q15(acc, l)
    for i in range(rows):
        peak = int(np.abs(acc[i]).max())
        g = 0 if peak == 0 else max(0, min(31, int(l[i, 0]).bit_length() - peak.bit_length() + 14))
        assert out.shift[i] == g
        assert [reference_division(int(a), int(l[i, 0]), g) for a in acc[i]] == out.o[i].tolist()
        top = int(np.abs(out.o[i].astype(np.int64)).max())
        if peak and 0 < g < 31:
            assert 1 << 13 <= top <= 1 << 15, (i, g, top)
    assert out.shift[0] == 0 and not out.o[0].any()
    assert out.shift[1] == 0 and (out.o[1] == 32767).all()
    assert out.shift.max() == 31 and out.shift.dtype == np.uint8


def test_row_shift_keeps_the_error_flat_where_v1_grew_with_seq():
    """v1 rounded O in V's scale (rel-L2 7.1e-4 at seq 256, 1.4e-3 at 1024, d 64, N(0,1)); v2's row shift follows
    |O|, so the error at 4096 stays within 1.5x of 256's and below v1's figure at 256."""
    rel = [errors(q15.run_problem(AttentionProblem(heads=2, seq=seq, dim=64, seed=1))[1],
                  golden(AttentionProblem(heads=2, seq=seq, dim=64, seed=1))).rel_l2 for seq in (256, 4096)]
    assert rel[1] <= 1.5 * rel[0] and max(rel) < 7.1e-4


@pytest.mark.parametrize("kwargs,needle", [
    (dict(seq=0), "seq=0 is out of range; allowed: 1..32768"),
    (dict(dim=300), "dim=300 is out of range; allowed: 1..256"),
    (dict(bc=257), "bc=257 is out of range; allowed: 1..256"),
    (dict(score_mult=5), "score_mult=5"),
    (dict(score_shift=63), "score_shift=63"),
])
def test_bad_parameters_name_the_value(kwargs, needle):
    with pytest.raises(ValueError, match=needle.replace(".", r"\.")):
        q15.Q15Params(**{**dict(seq=4, dim=4, causal=False, bc=2, score_mult=20000, score_shift=20), **kwargs})


def test_bad_buffers_name_the_shapes_and_dtypes():
    params = q15.Q15Params(4, 3, False, 2, 20000, 20)
    good = np.zeros((4, 3), dtype=np.int16)
    with pytest.raises(ValueError, match=r"k has shape \(5, 3\); allowed: \(4, 3\)"):
        q15.attention_q15(good, np.zeros((5, 3), np.int16), good, params)
    with pytest.raises(ValueError, match=r"v has dtype float32; allowed: int16"):
        q15.attention_q15(good, good, good.astype(np.float32), params)
    with pytest.raises(ValueError, match=r"rows 3\.\.6 are outside 0\.\.3"):
        q15.attention_q15(good, good, good, params, row0=3)


def test_every_target_gets_the_contracts_block():
    problem = AttentionProblem(seq=8, dim=4)
    assert q15.prepare(problem, *problem.inputs()).params.bc == q15.BC == 64 and q15.CONTRACT_VERSION == 2



def test_the_worked_example_of_the_contract():
    """docs/q15.md §9: the numbers there, worked by hand in exact integers, are the model's."""
    q = np.array([[12000, -9000]], np.int16)
    k = np.array([[-16384, 4096], [8192, 8192], [20000, -3000]], np.int16)
    v = np.array([[3000, -1200], [-2500, 900], [400, 1800]], np.int16)
    mult, shift = q15.score_scale(0, 0, 2)
    assert (mult, shift) == (16714, 28)
    state = q15.StreamState.start(q, 0, q15.Q15Params(3, 2, False, 2, mult, shift))
    state.absorb(k[:2], v[:2], 0)
    assert (int(state.m[0, 0]), int(state.l[0, 0]), state.acc[0].tolist()) == (1530, 60414, [1023500, -3686100])
    state.absorb(k[2:], v[2:], 2)
    assert (int(state.l[0, 0]), state.acc[0].tolist()) == (84267, [13979280, 55838393])
    out = state.finish()
    assert out.o.tolist() == [[5309, 21204]] and out.shift.tolist() == [5]
    one_block = q15.attention_q15(q, k, v, q15.Q15Params(3, 2, False, 3, mult, shift))
    assert one_block.o.tolist() == [[5308, 21204]] and one_block.shift.tolist() == [5]


def test_first_difference_names_the_first_differing_value_or_shift():
    model = q15.Q15Out(np.array([[1, 2], [3, 4]], np.int16), np.array([0, 5], np.uint8))
    assert q15.Q15Out(model.o.copy(), model.shift.copy()).first_difference(model) == "no difference"
    other = q15.Q15Out(np.array([[1, 2], [3, 9]], np.int16), np.array([0, 6], np.uint8))
    assert other.first_difference(model) == "O(1, 1) = 9, model 4"
    assert q15.Q15Out(model.o, other.shift).first_difference(model) == "g(1) = 6, model 5"
