"""The golden and the float32 reference: softmax properties, masking, blocking, precision agreement, tolerances."""

import tracemalloc
import types

import numpy as np
import pytest

from host.problem import AttentionProblem
from host.reference import attention, errors, golden
from host.verdict import check_float

SHAPES = [(1, 1), (17, 59), (97, 1), (1025, 59)]  # (seq, dim)


def naive(q, k, v, causal):
    """The textbook formula with the whole N×N matrix, float64: an independent check of the blocked code."""
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v.astype(np.float64)


@pytest.mark.parametrize("seq,dim", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_blocked_golden_matches_the_textbook_formula(seq, dim, causal):
    q, k, v = AttentionProblem(batch=2, heads=2, seq=seq, dim=dim, causal=causal).inputs()
    for block in (None, 1, 7):
        np.testing.assert_allclose(attention(q, k, v, causal, np.float64, block=block), naive(q, k, v, causal),
                                   rtol=0, atol=1e-12)


def probabilities(seq, causal):
    """P itself: with dim = seq and V = I, O equals P."""
    q, k, _ = AttentionProblem(seq=seq, dim=seq, causal=causal, seed=3).inputs()
    eye = np.broadcast_to(np.eye(seq, dtype=np.float32), q.shape)
    return attention(q, k, eye, causal, np.float64)[0, 0]  # (N, N)


@pytest.mark.parametrize("causal", [False, True])
def test_rows_of_p_sum_to_one_and_causal_hides_the_future(causal):
    p = probabilities(17, causal)
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, atol=1e-12)
    assert np.all(p >= 0)
    if causal:
        assert np.all(p[np.triu_indices(17, k=1)] == 0)
        assert np.all(np.diag(p) > 0)  # the diagonal is kept


def test_causal_row_zero_is_v_row_zero():
    problem = AttentionProblem(heads=3, seq=97, dim=59, causal=True)
    q, k, v = problem.inputs()
    out = attention(q, k, v, True, np.float64)
    np.testing.assert_allclose(out[:, :, 0], v[:, :, 0], rtol=0, atol=1e-15)


def test_key_permutation_invariance_without_causal():
    q, k, v = AttentionProblem(heads=2, seq=97, dim=59).inputs()
    perm = np.random.default_rng(5).permutation(97)
    np.testing.assert_allclose(attention(q, k[:, :, perm], v[:, :, perm], False),
                               attention(q, k, v, False), rtol=0, atol=1e-13)


@pytest.mark.parametrize("seq,dim", SHAPES)
def test_float32_agrees_with_float64(seq, dim):
    problem = AttentionProblem(heads=2, seq=seq, dim=dim, causal=True)
    q, k, v = problem.inputs()
    out = attention(q, k, v, True, np.float32)
    assert out.dtype == np.float32
    assert check_float(out, problem, golden(problem)).status == "ok"  # the one tolerance: host/verdict.py


def numpy_as_a_device():
    """numpy under another name: attention takes its device path (each slab a query block of every head)."""
    return types.SimpleNamespace(**{name: getattr(np, name) for name in dir(np) if not name.startswith("__")})


@pytest.mark.parametrize("seq,dim", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_the_device_path_computes_the_same_golden(seq, dim, causal):
    q, k, v = AttentionProblem(batch=2, heads=3, seq=seq, dim=dim, causal=causal).inputs()
    for block in (None, 1, 5):
        np.testing.assert_allclose(attention(q, k, v, causal, np.float64, block=block, xp=numpy_as_a_device()),
                                   naive(q, k, v, causal), rtol=0, atol=1e-12)


def test_threads_do_not_change_a_bit():
    q, k, v = AttentionProblem(heads=4, seq=1025, dim=59).inputs()
    one = attention(q, k, v, False, np.float32, threads=1)
    assert np.array_equal(one, attention(q, k, v, False, np.float32, threads=2))


@pytest.mark.slow
def test_long_sequence_never_builds_the_n_by_n_matrix():
    problem = AttentionProblem(seq=16384, dim=8, causal=True)
    q, k, v = problem.inputs()
    tracemalloc.start()
    attention(q, k, v, True, np.float64)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 16384 * 16384 * 8 / 16, f"peak {peak / 2**20:.0f} MiB is too close to an N×N float64 matrix"


def test_error_metrics():
    gold = np.array([[3.0, 4.0]])
    m = errors(np.array([[3.0, 4.5]], dtype=np.float32), gold)
    assert m.max_abs == 0.5 and m.rel_l2 == pytest.approx(0.1) and m.worst == (0, 1)
    assert errors(np.array([[np.nan, 4.0]]), gold).max_abs == float("inf")
