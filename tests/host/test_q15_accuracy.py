"""Contract v2's accuracy against fp16 (host/q15_accuracy.py, host/fp16_reference.py): the issue's measure, run here.

Every (inputs, causal, seq, dim) of the issue's grid: the contract's rel-L2 against the float64 golden must be at most
the fp16 emulation's on the same inputs and query rows, both measured in this run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from host.errors import SpecError
from host.fp16_reference import attention_fp16
from host.q15_accuracy import GROUP_ROWS, INPUT_KINDS, compare, golden_rows, make_inputs, row_groups

SEQS = (16, 256, 1024, 4096, 16384, 32768)
DIMS = (16, 64, 128)


@pytest.mark.slow
@pytest.mark.parametrize("kind", INPUT_KINDS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", SEQS)
def test_the_contract_is_at_least_as_accurate_as_fp16(kind, causal, seq):
    for dim in DIMS:
        c = compare(kind, seq, dim, causal)
        assert c.q15_rel_l2 <= c.fp16_rel_l2, (kind, causal, seq, dim, c)


@pytest.mark.parametrize("kind", INPUT_KINDS)
def test_the_contract_is_at_least_as_accurate_as_fp16_on_short_heads(kind):
    """The fast loop's part of the grid above (every row of each head is judged)."""
    for causal in (False, True):
        for seq, dim in ((16, 16), (256, 64), (97, 59)):
            c = compare(kind, seq, dim, causal)
            assert c.rows == seq and c.q15_rel_l2 <= c.fp16_rel_l2, (kind, causal, seq, dim, c)


def test_fp16_emulation_carries_fp16s_error_not_less_and_not_more():
    """fp16 storage rounds to 2^-11 relative: the emulation's rel-L2 on N(0,1) inputs lies near it (the issue quotes
    4.5e-4 at seq 256, d 64), far above float32's and far below a broken softmax's."""
    q, k, v = make_inputs("normal", 256, 64)
    gold = golden_rows(q, k, v, False, 0)
    rel = np.linalg.norm(attention_fp16(q, k, v, False) - gold) / np.linalg.norm(gold)
    assert 2e-4 <= rel <= 1e-3
    # its online softmax is that of one pass: the block size moves the result only by fp16 rounding
    whole = attention_fp16(q, k, v, False, block=256)
    assert np.max(np.abs(whole - attention_fp16(q, k, v, False, block=7))) <= 2.0**-9


def test_fp16_emulation_masks_causally_and_takes_row_ranges():
    q, k, v = make_inputs("normal", 40, 8)
    rows = attention_fp16(q[10:20], k, v, True, row0=10)
    assert np.allclose(rows, golden_rows(q[10:20], k, v, True, 10), atol=5e-3)
    assert np.allclose(attention_fp16(q[:1], k, v, True), v[:1].astype(np.float16), atol=0)  # row 0 sees key 0 only
    with pytest.raises(SpecError, match="inside k, v"):
        attention_fp16(q[30:], k, v, True, row0=31)


def test_row_groups_reach_the_first_and_last_rows():
    assert row_groups(64) == [(0, 64)]
    groups = row_groups(32768)
    assert groups[0][0] == 0 and sum(n for _, n in groups) == 16 * GROUP_ROWS
    assert groups[-1][0] + groups[-1][1] == 32768


def test_peaked_inputs_put_nearly_all_weight_on_key_zero():
    q, k, _ = make_inputs("peaked", 4096, 16)
    s = q.astype(np.float64) @ k.T.astype(np.float64) / math.sqrt(16)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    assert np.min(w[:, 0] / w.sum(axis=1)) > 0.99
    with pytest.raises(SpecError, match="inputs='flat' is unknown; allowed: normal, x0.1, x10, peaked"):
        make_inputs("flat", 4, 4)
