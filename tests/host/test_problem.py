"""AttentionProblem: validation with the bad value in the message, seeded inputs, FLOP and byte formulas."""

import numpy as np
import pytest

from host.errors import SpecError
from host.problem import LIMITS, AttentionProblem


@pytest.mark.parametrize("field,value", [("seq", 0), ("dim", 0), ("dim", 257), ("heads", -1), ("batch", 0),
                                         ("seq", 1.5), ("seed", -3), ("dim", True)])
def test_bad_values_are_refused_with_the_value_and_the_range(field, value):
    with pytest.raises(SpecError) as info:
        AttentionProblem(**{field: value})
    message = str(info.value)
    assert f"{field}={value!r}" in message or f"{field}={value}" in message
    low, high = LIMITS[field]
    assert f"{low}..{high}" in message


def test_bad_dtype_names_the_allowed_ones():
    with pytest.raises(ValueError, match=r"dtype='int8'.*float32, float16, bfloat16, q15"):
        AttentionProblem(dtype="int8")


def test_problem_is_frozen_and_with_revalidates():
    p = AttentionProblem(seq=17, dim=59)
    with pytest.raises(AttributeError):
        p.seq = 5  # type: ignore[misc]
    assert p.with_(seq=97).seq == 97
    with pytest.raises(SpecError):
        p.with_(seq=0)


def test_inputs_are_seeded_float32_and_shaped():
    p = AttentionProblem(batch=2, heads=3, seq=17, dim=59, seed=7)
    q, k, v = p.inputs()
    for x in (q, k, v):
        assert x.dtype == np.float32 and x.shape == (2, 3, 17, 59)
    q2, _, _ = p.inputs()
    assert np.array_equal(q, q2)
    q3, _, _ = p.with_(seed=8).inputs()
    assert not np.array_equal(q, q3)
    assert not np.array_equal(q, k)


def test_flops_follow_the_flashattention_convention():
    p = AttentionProblem(batch=2, heads=16, seq=1024, dim=64)
    assert p.flops() == 4 * 2 * 16 * 1024 * 1024 * 64
    assert p.with_(causal=True).flops() == p.flops() / 2


def test_min_bytes_count_q_k_v_and_o_once_in_the_dtype():
    p = AttentionProblem(batch=1, heads=2, seq=97, dim=59)
    assert p.min_bytes() == 4 * 2 * 97 * 59 * 4
    assert p.with_(dtype="float16").min_bytes() == p.min_bytes() // 2
