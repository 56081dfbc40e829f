"""kernels/q15.cu's fragment layouts and algorithm, emulated lane by lane in numpy (tests/helpers/q15_warp.py) without
a GPU: the byte split and the four int8 MMAs recombine to the exact int64 Q·Kᵀ and P·V through the kernel's shared
tiles and fragment loads (the permuted key order of Vᵀ included), and the kernel's whole block loop gives
host/q15.py's bits on awkward shapes and extremes."""

import numpy as np
import pytest

from helpers import q15_warp as warp
from host import q15

EXTREMES = ("random", "min", "max", "zeros", "alternating")


def int16(rng: np.random.Generator, shape: tuple[int, ...], kind: str) -> np.ndarray:
    """Random int16 of a kind: uniform over the whole range, all −32768, all 32767, zeros, or ±32768 / 32767
    alternating."""
    if kind == "random":
        return rng.integers(-32768, 32768, shape).astype(np.int16)
    if kind == "alternating":
        return np.where(np.indices(shape).sum(0) % 2, -32768, 32767).astype(np.int16)
    return np.full(shape, {"min": -32768, "max": 32767, "zeros": 0}[kind], dtype=np.int16)


def unscramble(z: np.ndarray) -> np.ndarray:
    """(32 lanes, tiles, 4) in the accumulator layout → (16, 8·tiles): element e of tile j is row g + 8·(e/2),
    column 8j + 2t + (e mod 2)."""
    out = np.zeros((16, 8 * z.shape[1]), dtype=np.int64)
    for e in range(4):
        out[(warp.G + 8 * (e >> 1))[:, None], 8 * np.arange(z.shape[1])[None, :] + (2 * warp.T + (e & 1))[:, None]] = \
            z[:, :, e]
    return out


def test_the_key_slots_are_a_permutation_matching_the_accumulators():
    """q15_key_slot maps the 32 keys of a step one to one onto the 32 k-slots, and each lane's slots 4t.. and
    16 + 4t.. hold exactly the keys its accumulators hold (8j + 2t, 8j + 2t + 1)."""
    keys = np.arange(32)
    slots = warp.key_slot(keys)
    assert sorted(slots.tolist()) == list(range(32))
    for t in range(4):
        mine = {8 * j + 2 * t + b for j in range(4) for b in range(2)}
        held = {int(keys[slots == s][0]) for s in [4 * t + i for i in range(4)] + [16 + 4 * t + i for i in range(4)]}
        assert held == mine


@pytest.mark.parametrize("dim", [1, 59, 64, 128, 256])
@pytest.mark.parametrize("kind", EXTREMES)
def test_scores_through_four_int8_mmas_are_the_exact_products(dim, kind):
    rng = np.random.default_rng(dim)
    dim_pad = -(-dim // 32) * 32
    q, k = int16(rng, (16, dim), kind), int16(rng, (64, dim), "random" if kind == "zeros" else kind)
    z = warp.scores(warp.row_tiles(q, dim_pad), warp.row_tiles(k, dim_pad), dim_pad)
    np.testing.assert_array_equal(unscramble(z), q.astype(np.int64) @ k.astype(np.int64).T)


@pytest.mark.parametrize("dim", [1, 59, 64, 256])
@pytest.mark.parametrize("kind", EXTREMES)
def test_p_times_v_through_the_permuted_keys_is_exact(dim, kind):
    """P (0..32767) in the accumulator layout, re-packed as the A operand without moving between lanes, times Vᵀ
    stored in the permuted key order: the exact Σ p·v."""
    rng = np.random.default_rng(100 + dim)
    dim_pad = -(-dim // 32) * 32
    p = rng.integers(0, 32768, (32, 8, 4)) if kind == "random" else np.full((32, 8, 4), 32767)
    v = int16(rng, (64, dim), kind)
    got = warp.pv(p, warp.vt_tiles(v, dim_pad), dim_pad)
    np.testing.assert_array_equal(unscramble(got)[:, :dim], unscramble(p) @ v.astype(np.int64))


def quantized_head(rng, seq: int, dim: int, rows: int, kind: str) -> tuple[np.ndarray, ...]:
    q, k, v = int16(rng, (rows, dim), kind), int16(rng, (seq, dim), kind), int16(rng, (seq, dim), kind)
    if kind == "zeros":  # zero query rows against random keys and values
        k, v = int16(rng, (seq, dim), "random"), int16(rng, (seq, dim), "random")
    return q, k, v


@pytest.mark.parametrize("seq,dim,rows,causal", [(1, 59, 1, False), (17, 59, 17, True), (97, 64, 97, False),
                                                 (97, 64, 97, True), (130, 32, 16, True), (200, 256, 1, True),
                                                 (65, 128, 33, False)])
@pytest.mark.parametrize("kind", EXTREMES)
def test_the_emulated_kernel_gives_the_models_bits(seq, dim, rows, causal, kind):
    """The kernel's block loop (16-row warps, 64-key blocks, the mask aligned to the bottom right for q_len < seq,
    warps past their last key skipping) on the emulated MMAs equals attention_q15 at row0 = seq − q_len."""
    rng = np.random.default_rng(seq * dim + rows)
    q, k, v = quantized_head(rng, seq, dim, rows, kind)
    mult, shift = q15.score_scale(int(rng.integers(-3, 4)), int(rng.integers(-3, 4)), dim)
    params = q15.Q15Params(seq, dim, causal, q15.BC, mult, shift)
    got = warp.kernel_head(q, k, v, params)
    want = q15.attention_q15(q, k, v, params, seq - rows)
    assert got.same_bits(want), got.first_difference(want)


def test_the_emulation_can_fail(monkeypatch):
    """A kernel whose rescales do not round (the check is not vacuous): its bits differ from the model's."""
    rng = np.random.default_rng(7)
    q, k, v = quantized_head(rng, 200, 64, 32, "random")
    params = q15.Q15Params(200, 64, False, q15.BC, *q15.score_scale(2, 2, 64))
    want = q15.attention_q15(q, k, v, params, 200 - 32)
    exact = q15.round_shift
    monkeypatch.setattr(q15, "round_shift", lambda x, s: np.asarray(x) >> 15 if np.ndim(s) == 0 and s == 15
                        else exact(x, s))
    assert not warp.kernel_head(q, k, v, params).same_bits(want)
