"""kernels/q15.cu's own source, every block of a launch, run on the host (tests/helpers/q15_block.py: each thread a
fiber, the MMAs by the PTX ISA's fragment layouts, shared memory and buffers of exactly the launcher's sizes) gives
host/q15.py's bits: several warps a block, tiles and tails of keys and queries, grouped heads, batch, the causal mask
at the bottom right, extremes. Skipped without g++."""

import shutil

import numpy as np
import pytest

from helpers import q15_block
from host import q15
from host.problem import AttentionProblem

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return q15_block.build(tmp_path_factory.mktemp("q15_block"))


def inputs(problem: AttentionProblem, kind: str, seed: int) -> q15.Quantized:
    rng = np.random.default_rng(seed)

    def draw(shape):
        if kind in ("min", "max", "zeros"):
            return np.full(shape, {"min": -32768, "max": 32767, "zeros": 0}[kind], dtype=np.int16)
        x = rng.integers(-32768, 32768, shape).astype(np.int16)
        if kind == "mixed":
            x = np.choose(rng.integers(0, 3, shape), [x, np.int16(-32768), np.int16(32767)]).astype(np.int16)
        return x

    exponents = tuple(int(e) for e in rng.integers(-4, 5, 3))
    params = q15.Q15Params(problem.seq, problem.dim, problem.causal, q15.BC,
                           *q15.score_scale(exponents[0], exponents[1], problem.dim))
    return q15.Quantized(draw(problem.shape), draw(problem.kv_shape), draw(problem.kv_shape), exponents, params)


CASES = [  # batch, heads, kv_heads, seq, q_len, dim, causal, kind
    (1, 4, 2, 17, 17, 59, True, "mixed"), (1, 2, 1, 97, 97, 64, False, "random"), (1, 2, 2, 1, 1, 32, False, "max"),
    (1, 2, 1, 97, 97, 64, True, "min"), (1, 2, 1, 130, 130, 256, True, "random"),
    (1, 3, 3, 70, 70, 96, False, "zeros"), (2, 4, 2, 200, 16, 128, True, "mixed"),
    (2, 4, 1, 150, 1, 160, False, "random"), (1, 2, 1, 129, 65, 224, True, "max"),
]


@pytest.mark.parametrize("batch,heads,kv_heads,seq,q_len,dim,causal,kind", CASES)
def test_the_kernels_own_source_gives_the_models_bits(program, batch, heads, kv_heads, seq, q_len, dim, causal, kind):
    problem = AttentionProblem(batch=batch, heads=heads, kv_heads=kv_heads, seq=seq, q_len=q_len, dim=dim,
                               causal=causal, dtype="q15")
    quantized = inputs(problem, kind, seq * dim + q_len)
    got, want = q15_block.run(program, problem, quantized), quantized.expected()
    assert got.same_bits(want), got.first_difference(want)


def test_the_emulation_catches_a_wrong_key_order_and_a_divergent_barrier(tmp_path):
    """Not vacuous: Vᵀ's keys in the unpermuted order give other bits; a __syncthreads only some warps reach is a
    reported deadlock."""
    source = (q15_block.ROOT / "kernels" / "q15.cu").read_text()
    problem = AttentionProblem(heads=2, seq=97, dim=64, causal=False, dtype="q15")
    quantized = inputs(problem, "random", 3)
    slot = "const int slot = (key & ~31) + q15_key_slot(key & 31);"
    assert slot in source
    wrong = q15_block.build(tmp_path, source.replace(slot, "const int slot = key;"))
    assert not q15_block.run(wrong, problem, quantized).same_bits(quantized.expected())
    skip = "if (j0 >= warp_key_end) continue;"
    assert skip in source
    hang = q15_block.build(tmp_path, source.replace(skip, "if (warp == 1) __syncthreads();\n        " + skip))
    with pytest.raises(RuntimeError, match="deadlock"):
        q15_block.run(hang, problem, quantized)
