"""Streamed heads (docs/q15.md §7): K and V taken one key range at a time, in increasing key order with the same Bc
partition, give the one-pass output bit for bit, in the Q15 model (host/q15.py StreamState) and in the C kernel's
streamed entry (q15attn_stream, host build); chunks that would change the partition or the order, and a state
carried into other rows, are refused."""

from __future__ import annotations

import numpy as np
import pytest

from mcu import q15_c
from host.errors import SpecError, TargetError
from host.q15 import BC_MAX, MULT_MAX, MULT_MIN, SHIFT_MAX, SHIFT_MIN, Q15Out, Q15Params, StreamState, attention_q15

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


def _ranges(params: Q15Params, row0: int, rows: int, starts: list[int]) -> list[tuple[int, int]]:
    """(key0, key1) of each chunk, up to the rows' last key (row0 + rows with the causal mask)."""
    end = row0 + rows if params.causal else params.seq
    starts = [s for s in starts if s < end]
    return list(zip(starts, [*starts[1:], end]))


def _streamed(q, k, v, params: Q15Params, row0: int, starts: list[int]) -> np.ndarray:
    state = StreamState.start(q, row0, params)
    for key0, key1 in _ranges(params, row0, q.shape[0], starts):
        state.absorb(k[key0:key1], v[key0:key1], key0)
    return state.finish()


def _streamed_c(q, k, v, params: Q15Params, row0: int, starts: list[int]) -> Q15Out:
    rows = q15_c.StreamedRows(params, q, row0)
    out = None
    for key0, key1 in _ranges(params, row0, q.shape[0], starts):
        assert out is None  # only the last chunk returns the output
        out = rows.take(k[key0:key1], v[key0:key1], key0)
    return out


@pytest.mark.slow  # 6 s of host/q15.py on the 2-core machine, 45 s at a load of 8
def test_streamed_heads_equal_one_pass_on_random_and_extreme_cases():
    rng = np.random.default_rng(15)
    mid_chunk_causal = 0
    for case in range(CASES):
        seq = int(rng.choice([1, 2, 17, 31, 64, 97, 130, int(rng.integers(1, 260))]))
        dim = int(rng.choice([1, 8, 16, 59, 64, 65, 128]))  # above 64: one row at a time
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
        assert got.same_bits(expected), (case, seq, dim, bc, causal, row0, rows, starts)
        got_c = _streamed_c(q[row0:row0 + rows], k, v, params, row0, starts)
        assert got_c.same_bits(expected), ("C", case, seq, dim, bc, causal, row0, rows, starts)  # values and shifts
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
    with pytest.raises(SpecError, match="have taken keys 0..31 of 0..99: send the rest first"):
        state.finish()
    state.absorb(k[32:], v[32:], 32)  # the rest: 68 keys, not whole blocks, allowed as the last chunk
    assert state.finish().same_bits(attention_q15(q[:4], k, v, params, 0))


def test_causal_rows_take_keys_only_up_to_their_last_row():
    rng = np.random.default_rng(2)
    q, k, v = _head(rng, 100, 8, False)
    params = Q15Params(100, 8, True, 16, MULT_MIN, 24)
    expected = attention_q15(q[20:40], k, v, params, 20)
    state = StreamState.start(q[20:40], 20, params)
    with pytest.raises(SpecError, match="end by 39"):
        state.absorb(k[:48], v[:48], 0)
    state.absorb(k[:32], v[:32], 0)
    state.absorb(k[32:40], v[32:40], 32)  # 8 keys: not a whole block, but the rows' last
    assert state.finish().same_bits(expected)


def test_the_c_kernel_refuses_chunks_and_states_that_would_mix():
    """Each refusal names the bad value and what is allowed, and leaves the state as it was: the head then goes on."""
    rng = np.random.default_rng(3)
    q, k, v = _head(rng, 100, 8, False)
    params = Q15Params(100, 8, False, 16, MULT_MIN, 24)
    rows = q15_c.StreamedRows(params, q[:6], 0)
    with pytest.raises(TargetError, match=r"keys 0..19 are not a chunk of these rows' keys 0..99; allowed: key0 a "
                                          r"multiple of bc=16, whole blocks of bc unless the chunk ends at key 99"):
        rows.take(k[:20], v[:20], 0)
    with pytest.raises(TargetError, match=r"the state does not hold rows 0..5 with these parameters and keys 0..15"):
        rows.take(k[16:32], v[16:32], 16)  # nothing taken yet: key 16 cannot be next
    assert rows.take(k[:32], v[:32], 0) is None
    with pytest.raises(TargetError, match=r"keys 0..63 are not a chunk|the state does not hold rows 0..5 with these "
                                          r"parameters and keys 0..63"):
        rows.take(k[64:96], v[64:96], 64)  # a chunk skipped
    other = q15_c.StreamedRows(params, q[6:12], 6)
    other.state[:] = rows.state  # another set of rows handed this one's state
    with pytest.raises(TargetError, match=r"the state does not hold rows 6..11"):
        other.take(k[32:64], v[32:64], 32)
    assert rows.take(k[32:64], v[32:64], 32) is None
    out = rows.take(k[64:], v[64:], 64)
    assert out.same_bits(attention_q15(q[:6], k, v, params, 0))
    status, nrows, nkeys, message = q15_c.check_stream_buffers(params.__dict__, 0, 0, (96, 512, 512, 96, 6, 100))
    assert (nrows, nkeys) == (6, 32) and message == "len(state)=100 but 6 rows of dim=8 need 512"
    assert q15_c.check_stream_buffers(params.__dict__, 0, 0, (96, 512, 512, 96, 5, 512))[3] == \
        "len(oshift)=5 is too small; allowed: at least 6 bytes (one shift per row, 6 rows)"
    assert q15_c.check_stream_buffers(params.__dict__, 0, 0, (96, 512, 512, 96, 0, 512))[3] == \
        "oshift is missing (0 bytes); allowed: at least 6 bytes (one shift per row, 6 rows)"
    assert q15_c.check_stream_buffers(params.__dict__, 0, 0, (96, 512, 512, 96, 12, 512), typecodes="hhhhhh")[3] \
        == "oshift has typecode 'h'; allowed: 'B' (bytearray or array('B'), uint8)"
    assert q15_c.check_stream_buffers(params.__dict__, 0, 0, (96, 512, 512, 96, 6, 512))[:3] == (0, 6, 32)
    assert q15_c.state_bytes(8, 6) == 32 + 6 * 8 * (8 + 2)  # header, then 2·ceil(dim/2) + 2 int64 per row
    assert q15_c.state_bytes(59, 1) == 32 + 8 * (60 + 2)
