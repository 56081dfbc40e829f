"""Streamed heads in the Q15 model (host/q15.py StreamState): K and V taken one key range at a time, in increasing
key order with the same Bc partition, give the one-pass output bit for bit; chunks that would change the partition
or the order are refused."""

from __future__ import annotations

import numpy as np
import pytest

from host.errors import SpecError
from host.q15 import BC_MAX, MULT_MAX, MULT_MIN, SHIFT_MAX, SHIFT_MIN, Q15Params, StreamState, attention_q15

CASES = 2000


def _head(rng: np.random.Generator, seq: int, dim: int, extreme: bool):
    if extreme:  # saturating scores and full-scale values: the rescale and division paths at their limits
        q = rng.choice(np.array([-32768, 32767], dtype=np.int16), (seq, dim))
        return q, q.copy(), rng.choice(np.array([-32768, 32767], dtype=np.int16), (seq, dim))
    return tuple(rng.integers(-32768, 32768, (seq, dim)).astype(np.int16) for _ in range(3))


def _chunks(rng: np.random.Generator, seq: int, bc: int) -> list[int]:
    """Chunk starts: random multiples of Bc, always 0 first."""
    blocks = -(-seq // bc)
    cuts = sorted(set(rng.choice(np.arange(1, blocks), size=min(blocks - 1, rng.integers(0, 6)), replace=False)
                      .tolist())) if blocks > 1 else []
    return [0, *(c * bc for c in cuts)]


def _streamed(q, k, v, params: Q15Params, row0: int, starts: list[int]) -> np.ndarray:
    state = StreamState.start(q, row0, params)
    ends = [*starts[1:], params.seq]
    for key0, key1 in zip(starts, ends):
        state.absorb(k[key0:key1], v[key0:key1], key0)
    return state.finish()


def test_streamed_heads_equal_one_pass_on_random_and_extreme_cases():
    rng = np.random.default_rng(15)
    mid_chunk_causal = 0
    for case in range(CASES):
        seq = int(rng.choice([1, 2, 17, 31, 64, 97, 130, int(rng.integers(1, 260))]))
        dim = int(rng.choice([1, 8, 16, 59, 64]))
        bc = int(rng.choice([1, 3, 16, 32, BC_MAX, int(rng.integers(1, BC_MAX + 1))]))
        causal = bool(rng.integers(0, 2))
        q, k, v = _head(rng, seq, dim, extreme=case % 10 == 0)
        row0 = int(rng.integers(0, seq))
        rows = int(rng.integers(1, seq - row0 + 1))
        params = Q15Params(seq, dim, causal, bc, int(rng.integers(MULT_MIN, MULT_MAX + 1)),
                           int(rng.integers(SHIFT_MIN, SHIFT_MAX + 1)))
        starts = _chunks(rng, seq, bc)
        last_row = row0 + rows - 1
        mid_chunk_causal += causal and any(s <= last_row < e - 1 for s, e in zip(starts, [*starts[1:], seq]))
        expected = attention_q15(q[row0:row0 + rows], k, v, params, row0)
        got = _streamed(q[row0:row0 + rows], k, v, params, row0, starts)
        assert np.array_equal(got, expected), (case, seq, dim, bc, causal, row0, rows, starts)
    assert mid_chunk_causal > 100  # causal row ranges whose last key falls inside a chunk were among the cases


def test_a_chunk_off_the_block_grid_or_out_of_order_is_refused():
    rng = np.random.default_rng(1)
    q, k, v = _head(rng, 100, 8, False)
    params = Q15Params(100, 8, False, 16, MULT_MIN, SHIFT_MIN)
    state = StreamState.start(q[:4], 0, params)
    with pytest.raises(SpecError, match="a chunk of 20 keys is not whole blocks of Bc=16"):
        state.absorb(k[:20], v[:20], 0)
    with pytest.raises(SpecError, match="the next chunk must start at key 0"):
        state.absorb(k[16:32], v[16:32], 16)
    state.absorb(k[:32], v[:32], 0)
    with pytest.raises(SpecError, match="has taken keys 0..31 of 100: send the rest first"):
        state.finish()
    state.absorb(k[32:], v[32:], 32)  # the rest: 68 keys, not whole blocks, allowed as the last chunk
    assert np.array_equal(state.finish(), attention_q15(q[:4], k, v, params, 0))
