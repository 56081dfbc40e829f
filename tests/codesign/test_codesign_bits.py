"""The datapath's bits (codesign/bits.py) against the Q15 contract's model (host/q15.py) at the same Bc, for any array
shape (Bc and R×C drawn independently: C below, equal to and above Bc): values and row shifts identical on 10,000
random and adversarial heads at the widths `exact_width` predicts, and the accumulators' wrap and saturate checked
against a plain per-MAC loop."""

from __future__ import annotations

import numpy as np
import pytest

from codesign.bits import accumulate, exact_width, run_head
from codesign.datapath import Datapath
from host import q15
from host.errors import SpecError

CASES_PER_SEED, SEEDS = 500, 20  # 10,000 heads in all
FAST_SEEDS = 2  # 1,000 of them in the fast loop (`-m "not slow"`), about 3 s a seed
DIMS = (1, 2, 3, 16, 17, 59, 64, 128, 256)
SHAPES = ("uniform", "normal", "extremes", "equal scores", "zeros", "one hot")


def _tensor(rng: np.random.Generator, kind: str, seq: int, dim: int) -> np.ndarray:
    if kind == "uniform":
        return rng.integers(-32768, 32768, (seq, dim)).astype(np.int16)
    if kind == "normal":
        return np.clip(rng.normal(0, 8000, (seq, dim)), -32768, 32767).astype(np.int16)
    if kind == "extremes":
        return rng.choice(np.array([-32768, 32767, -32767, 0], dtype=np.int16), (seq, dim))
    if kind == "equal scores":  # every key row the same: all scores of a query row equal
        return np.repeat(rng.integers(-32768, 32768, (1, dim)).astype(np.int16), seq, axis=0)
    if kind == "zeros":
        return np.zeros((seq, dim), dtype=np.int16)
    out = np.zeros((seq, dim), dtype=np.int16)  # one hot: a single large element per row
    out[np.arange(seq), rng.integers(0, dim, seq)] = rng.choice(np.array([-32768, 32767], dtype=np.int16), seq)
    return out


def _case(rng: np.random.Generator):
    seq = int(rng.choice([1, 2, 5, 17, 33, 64, 97, 150])) if rng.random() < 0.5 else int(rng.integers(1, 130))
    dim = int(rng.choice(DIMS))
    rows = int(rng.integers(1, 70)) if rng.random() < 0.9 else int(rng.integers(70, 257))
    cols = int(rng.integers(1, 70)) if rng.random() < 0.9 else int(rng.integers(70, 257))
    draw = rng.random()  # the key block, independent of the array: the contract's 64, small, or wide
    bc = q15.BC if draw < 0.3 else int(rng.integers(1, 70)) if draw < 0.9 else int(rng.integers(70, 257))
    q, k, v = (_tensor(rng, str(rng.choice(SHAPES)), seq, dim) for _ in range(3))
    exp_q, exp_k = (int(rng.integers(-8, 5)) for _ in range(2))
    try:
        scale = q15.score_scale(exp_q, exp_k, dim)
    except SpecError:  # an exponent pair whose shift leaves the contract's range: use unit exponents
        scale = q15.score_scale(0, 0, dim)
    params = q15.Q15Params(seq, dim, bool(rng.integers(2)), bc, *scale)
    return q, k, v, params, rows, cols


def contract_width(dim: int, cols: int) -> int:
    """The accumulator width the contract predicts for bit-exactness: QKᵀ sums d products ≤ 2³⁰ and P·V sums Bc
    products ≤ 32767·32768 (docs/codesign.md "Accumulator width")."""
    return max(exact_width(dim, 1 << 30), exact_width(cols, 32767 * 32768))


@pytest.mark.parametrize("seed", [seed if seed < FAST_SEEDS else pytest.param(seed, marks=pytest.mark.slow)
                                  for seed in range(SEEDS)])
def test_datapath_bits_equal_the_contract_at_the_predicted_width(seed):
    rng = np.random.default_rng(seed)
    for _ in range(CASES_PER_SEED):
        q, k, v, params, rows, cols = _case(rng)
        overflow = str(rng.choice(["wrap", "saturate"]))
        datapath = Datapath(rows=rows, cols=cols, acc_bits=contract_width(params.dim, params.bc),
                            overflow=overflow, dataflow=str(rng.choice(["os", "ws", "is"])))
        got = run_head(q, k, v, params, datapath)
        want = q15.attention_q15(q, k, v, params)
        assert got.overflows == 0, (params, datapath)
        if not got.out.same_bits(want):
            where = np.argwhere(got.out.o != want.o)[:5].tolist()
            rows_off = np.flatnonzero(got.out.shift != want.shift)[:5].tolist()
            pytest.fail(f"{params} on {datapath.name}: {len(np.argwhere(got.out.o != want.o))} values differ, "
                        f"first at {where}; row shifts differ at {rows_off}")


@pytest.mark.parametrize("seq,dim,causal,rows,cols,bc", [
    (1, 1, False, 1, 1, 64), (1, 256, True, 32, 32, 64), (17, 59, True, 5, 3, 64), (97, 64, False, 32, 32, 64),
    (1025, 64, True, 32, 32, 64), (256, 256, False, 256, 256, 256), (300, 16, True, 7, 256, 64),
    (64, 32, True, 64, 1, 64), (200, 17, True, 16, 48, 64), (130, 8, False, 3, 128, 5), (97, 3, True, 8, 8, 1),
])
def test_awkward_shapes_at_forty_bits(seq, dim, causal, rows, cols, bc):
    rng = np.random.default_rng(seq * 1000 + dim)
    q, k, v = (np.clip(rng.normal(0, 9000, (seq, dim)), -32768, 32767).astype(np.int16) for _ in range(3))
    params = q15.Q15Params(seq, dim, causal, bc, *q15.score_scale(0, 0, dim))
    got = run_head(q, k, v, params, Datapath(rows=rows, cols=cols, acc_bits=40))
    want = q15.attention_q15(q, k, v, params)
    np.testing.assert_array_equal(got.out.o, want.o)
    np.testing.assert_array_equal(got.out.shift, want.shift)


@pytest.mark.parametrize("acc_bits,overflow", [(40, "wrap"), (30, "wrap"), (30, "saturate"), (26, "saturate")])
def test_every_array_shape_gives_one_output_at_the_contracts_bc(acc_bits, overflow):
    # Bc is the contract's, not the array's: 1×1, tall, wide, C below, dividing, equal to and above Bc = 64 all give
    # the same values and row shifts, exact or not (narrow accumulators overflow in reduction order on every shape).
    rng = np.random.default_rng(acc_bits)
    seq, dim = 150, 24
    q, k, v = (np.clip(rng.normal(0, 12000, (seq, dim)), -32768, 32767).astype(np.int16) for _ in range(3))
    q[::2] //= 256  # near-uniform weights on these rows: averages of many values, small outputs, larger shifts
    for causal in (False, True):
        params = q15.Q15Params(seq, dim, causal, q15.BC, *q15.score_scale(3, 3, dim))  # peaked rows: large outputs
        heads = [run_head(q, k, v, params, Datapath(rows=r, cols=c, acc_bits=acc_bits, overflow=overflow))
                 for r, c in ((1, 1), (32, 32), (7, 64), (64, 16), (16, 100), (3, 256))]
        assert all(head.out.same_bits(heads[0].out) for head in heads[1:])
        if not causal:  # causal tiles compute (and discard) masked scores, as many as their height makes
            assert all(head.overflows == heads[0].overflows for head in heads)
        assert len(set(heads[0].out.shift.tolist())) > 1  # the row shifts are not all one value
        if acc_bits == 40:
            assert heads[0].out.same_bits(q15.attention_q15(q, k, v, params))
        else:
            assert heads[0].overflows > 0


def test_exact_width_by_hand():
    # QKᵀ: d products of at most 2³⁰ (−32768·−32768). d = 16: 2³⁴ needs 35 magnitude bits + sign = 36.
    assert exact_width(16, 1 << 30) == 36
    # d = 64: 2³⁶ → 38; d = 256: 2³⁸ → 40 (the contract's 40-bit accumulator, docs/q15.md §2).
    assert exact_width(64, 1 << 30) == 38 and exact_width(256, 1 << 30) == 40
    # d = 59: 59·2³⁰ < 2³⁶ (64·2³⁰) but ≥ 2³⁵ → 36 magnitude bits + sign = 37.
    assert exact_width(59, 1 << 30) == 37
    # P·V over Bc = 32 keys: 32·32767·32768 = 34,358,689,792 < 2³⁵ = 34,359,738,368 → 35 bits + sign = 36.
    assert exact_width(32, 32767 * 32768) == 36


def test_one_bit_short_of_the_predicted_width_changes_the_output_when_wrapping():
    # Query 0 and key 0 all −32768: their score's accumulator reaches d·2³⁰ = 2³⁶ at d 64, the most a 38-bit
    # accumulator holds. One bit less wraps it to −2³⁶: key 0 goes from dominating to vanishing, the output from
    # v0 to v1.
    seq, dim = 2, 64
    q = np.zeros((seq, dim), dtype=np.int16)
    q[0] = -32768
    k = np.zeros((seq, dim), dtype=np.int16)
    k[0] = -32768
    v = np.zeros((seq, dim), dtype=np.int16)
    v[0], v[1] = 10000, -10000
    params = q15.Q15Params(seq, dim, False, 2, *q15.score_scale(0, 0, dim))  # score ±11.5 in log2 units
    want = q15.attention_q15(q, k, v, params)
    exact = run_head(q, k, v, params, Datapath(rows=2, cols=2, acc_bits=38))
    short = run_head(q, k, v, params, Datapath(rows=2, cols=2, acc_bits=37))
    assert exact.out.same_bits(want)
    assert exact.overflows == 0 and short.overflows == 1
    assert want.o[0, 0] > 9000 and short.out.o[0, 0] < -9000


def _per_mac(a: np.ndarray, b: np.ndarray, bits: int, overflow: str) -> np.ndarray:
    """The accumulator one product at a time, in increasing k, as plain Python integers."""
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    out = np.zeros((a.shape[0], b.shape[1]), dtype=np.int64)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            total = 0
            for step in range(a.shape[1]):
                total += int(a[i, step]) * int(b[step, j])
                total = min(max(total, low), high) if overflow == "saturate" else (total - low) % (1 << bits) + low
            out[i, j] = total
    return out


@pytest.mark.parametrize("bits", [16, 24, 31, 33, 36])
@pytest.mark.parametrize("overflow", ["wrap", "saturate"])
def test_accumulators_match_one_mac_at_a_time(bits, overflow):
    rng = np.random.default_rng(bits)
    a = rng.choice(np.array([-32768, 32767, 12345, -1, 0], dtype=np.int16), (6, 40))
    b = rng.integers(-32768, 32768, (40, 5)).astype(np.int16)
    got, overflowed = accumulate(a, b, bits, overflow)
    want = _per_mac(a, b, bits, overflow)
    np.testing.assert_array_equal(got, want)
    exact = a.astype(np.int64) @ b.astype(np.int64)
    assert overflowed == int(np.count_nonzero(want != exact))


def test_a_key_block_outside_the_models_range_is_refused_in_one_line():
    q = np.zeros((4, 2), dtype=np.int16)
    params = q15.Q15Params(4, 2, False, 8, *q15.score_scale(0, 0, 2))
    object.__setattr__(params, "bc", q15.MODEL_BC_MAX + 1)  # past Q15Params' own check, as a stale caller could be
    with pytest.raises(SpecError, match=r"^bc=257 is outside the datapath model's key blocks; allowed: 1\.\.256$"):
        run_head(q, q, q, params, Datapath(cols=16))


def test_inputs_must_be_int16_of_the_heads_shape():
    params = q15.Q15Params(4, 2, False, 4, *q15.score_scale(0, 0, 2))
    good = np.zeros((4, 2), dtype=np.int16)
    with pytest.raises(SpecError, match=r"k is int32 \(4, 2\); allowed: int16 \(4, 2\)"):
        run_head(good, good.astype(np.int32), good, params, Datapath(cols=4))
    with pytest.raises(SpecError, match=r"v is int16 \(3, 2\)"):
        run_head(good, good, good[:3], params, Datapath(cols=4))


def test_saturating_results_in_many_small_passes_equal_one_pass(monkeypatch):
    from codesign import bits

    rng = np.random.default_rng(5)
    a = rng.integers(-32768, 32768, (9, 40)).astype(np.int16)
    b = rng.integers(-32768, 32768, (40, 7)).astype(np.int16)
    whole, overflowed = accumulate(a, b, 33, "saturate")
    monkeypatch.setattr(bits, "SATURATE_CHUNK", 80)  # 2 results per pass
    parts, overflowed_parts = accumulate(a, b, 33, "saturate")
    np.testing.assert_array_equal(parts, whole)
    np.testing.assert_array_equal(whole, _per_mac(a, b, 33, "saturate"))
    assert overflowed == overflowed_parts > 0
