"""The Q15 attention contract as a bit-accurate numpy model (docs/q15.md is the specification).

Every Q15 target (the C kernel on the host and on the Cortex-M4, the board twin, the ASIC datapath model and its RTL)
must give exactly the outputs of `attention_q15` (int16 values and each row's output shift, `Q15Out`) for the same
inputs and parameters. This is version 2 of the contract (`CONTRACT_VERSION`): the key block Bc is the contract's
(`BC`, the same for every target) and every output row carries its own exponent. The model is vectorised over query
rows and walks keys in blocks of Bc, as the kernel does; a seq 256, dim 64 head takes a few milliseconds.

Also here: the helpers every Q15 target uses to turn float tensors into Q15 and back (`quantize`, `dequantize`),
the score scale (`score_scale`) and the exp2 step (`exp2_q15`), and `run_problem`, which quantises an
`AttentionProblem`, runs the model head by head and returns the dequantised output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from host.errors import SpecError
from host.checks import check_int
from host.problem import AttentionProblem

#: The contract's version (docs/q15.md): 1 took Bc from the hardware and gave outputs in V's scale; 2 fixes Bc for
#: every target and gives each output row its own exponent.
CONTRACT_VERSION = 2
#: What a Q15 row's `numerics` column says it was computed under (results schema 5).
NUMERICS = f"q15 v{CONTRACT_VERSION}"
#: The contract's key block: every target computes a problem at this Bc (the board's kernel, its twin, the ASIC
#: datapath whatever its array's width, the RTL), so that all give the same bits for one problem.
BC = 64

# The same limits as mcu/native/attention_q15.h.
SEQ_MAX = 32768
DIM_MAX = 256
#: Bc of the C kernel (its block's scores and probabilities live on the stack).
BC_MAX = 64
#: Bc this model and the ASIC datapath model accept (tools that study other blocks than `BC`).
MODEL_BC_MAX = 256
#: An output row's shift g is 0..OUT_SHIFT_MAX: the row is o · 2^(s_V - 15 - g).
OUT_SHIFT_MAX = 31
MULT_MIN, MULT_MAX = 1 << 14, (1 << 15) - 1
SHIFT_MIN, SHIFT_MAX = 1, 62
#: Range of the per-tensor power-of-two exponent s (a tensor is q · 2^(s-15)).
EXP_MIN, EXP_MAX = -24, 24

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
Q15_ONE_CAP = 32767  # a probability of 1.0 (32768) is held to 32767 so that it fits int16

#: 2^(-i/64) in Q0.24 (1.0 = 2^24), i = 0..63, rounded to nearest. The C kernel holds the same 64 literals.
EXP2_TABLE = np.array([round(2.0 ** (-i / 64) * (1 << 24)) for i in range(64)], dtype=np.int64)
EXP2_HALF = 1 << 23  # 2^(-64/64) in Q0.24: the end point after the table's last entry


@dataclass(frozen=True)
class Q15Params:
    """What the kernel is told besides the tensors: shape, masking, key block and the score scale (M, r)."""

    seq: int
    dim: int
    causal: bool
    bc: int
    score_mult: int
    score_shift: int

    def __post_init__(self) -> None:
        check_int("seq", self.seq, 1, SEQ_MAX)
        check_int("dim", self.dim, 1, DIM_MAX)
        check_int("bc", self.bc, 1, MODEL_BC_MAX)
        check_int("score_mult", self.score_mult, MULT_MIN, MULT_MAX)
        check_int("score_shift", self.score_shift, SHIFT_MIN, SHIFT_MAX)


def round_shift(x: np.ndarray, shift: int | np.ndarray) -> np.ndarray:
    """floor(x / 2^shift + 1/2) on int64: add half, then an arithmetic right shift (round half up). shift >= 0."""
    x = np.asarray(x, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    half = np.where(shift > 0, np.left_shift(np.int64(1), np.maximum(shift - 1, 0)), 0)
    return np.right_shift(x + half, shift)


def choose_exponent(x: np.ndarray) -> int:
    """The smallest s in EXP_MIN..EXP_MAX with max|x| <= 2^s (0 for an all-zero tensor)."""
    peak = float(np.max(np.abs(x))) if np.size(x) else 0.0
    if not math.isfinite(peak):
        raise SpecError(f"cannot quantise a tensor holding {peak}; allowed: finite values")
    if peak == 0.0:
        return 0
    mantissa, exponent = math.frexp(peak)  # peak = mantissa · 2^exponent, mantissa in [0.5, 1)
    s = exponent - 1 if mantissa == 0.5 else exponent
    if not EXP_MIN <= s <= EXP_MAX:
        raise SpecError(f"max|x|={peak:g} needs exponent {s}; allowed: {EXP_MIN}..{EXP_MAX}")
    return s


def quantize(x: np.ndarray, exponent: int | None = None) -> tuple[np.ndarray, int]:
    """float → (int16 Q15, s) with x ≈ q · 2^(s-15): q = clamp(floor(x · 2^(15-s) + 1/2), -32768, 32767).

    s is chosen per tensor by `choose_exponent` unless given; values at +2^s saturate to 32767.
    """
    s = choose_exponent(x) if exponent is None else int(exponent)
    check_int("exponent", s, EXP_MIN, EXP_MAX)
    scaled = np.floor(np.asarray(x, dtype=np.float64) * 2.0 ** (15 - s) + 0.5)
    return np.clip(scaled, -32768, 32767).astype(np.int16), s


def dequantize(q: np.ndarray, exponent: int) -> np.ndarray:
    """int16 Q15 with exponent s → float64: q · 2^(s-15)."""
    return np.asarray(q, dtype=np.float64) * 2.0 ** (exponent - 15)


def score_scale(exp_q: int, exp_k: int, dim: int) -> tuple[int, int]:
    """(M, r) such that z = round(acc · M / 2^r) is the score in base-2 units, Q15.16.

    acc = Σ q·k in Q30 units of 2^(sQ+sK); the real score is acc · 2^(sQ+sK-30) / √d, and exp(s) = 2^(s·log2 e), so
    z/2^16 = acc · F with F = 2^(sQ+sK-30) · log2(e) / √d · 2^16 ≈ M · 2^-r, M a 15-bit mantissa in [2^14, 2^15).
    """
    check_int("dim", dim, 1, DIM_MAX)
    factor = 2.0 ** (exp_q + exp_k - 30 + 16) * math.log2(math.e) / math.sqrt(dim)
    mantissa, exponent = math.frexp(factor)  # factor = mantissa · 2^exponent, mantissa in [0.5, 1)
    mult = round(mantissa * (1 << 15))
    if mult == 1 << 15:
        mult, exponent = 1 << 14, exponent + 1
    shift = 15 - exponent
    if not SHIFT_MIN <= shift <= SHIFT_MAX:
        raise SpecError(f"exponents sQ={exp_q}, sK={exp_k} at dim={dim} need score_shift={shift}; "
                        f"allowed: {SHIFT_MIN}..{SHIFT_MAX}")
    return mult, shift


def exp2_q15(delta: np.ndarray) -> np.ndarray:
    """2^(-delta / 2^16) in Q15 for delta >= 0 (int64, Q.16): the table step of the contract.

    delta = n·2^16 + f; f's top 6 bits pick the table entry, its low 10 bits interpolate linearly to the next one
    (the last entry interpolates to 2^-1); the Q0.24 result is shifted right by 9 + n with rounding; n >= 16 gives 0;
    1.0 is held to 32767.
    """
    delta = np.asarray(delta, dtype=np.int64)
    n = delta >> 16
    frac = delta & 0xFFFF
    idx = frac >> 10
    rem = frac & 0x3FF
    t0 = EXP2_TABLE[idx]
    t1 = np.where(idx == 63, EXP2_HALF, EXP2_TABLE[np.minimum(idx + 1, 63)])
    y = t0 - (((t0 - t1) * rem + 512) >> 10)  # Q0.24
    shift = np.minimum(n, 15) + 9
    p = (y + np.left_shift(np.int64(1), shift - 1)) >> shift
    return np.where(n >= 16, 0, np.minimum(p, Q15_ONE_CAP))


class Q15Out(NamedTuple):
    """A Q15 head's output: int16 values (..., d) and each row's shift g (..., uint8, 0..OUT_SHIFT_MAX); a row stands
    for o · 2^(s_V - 15 - g), s_V the exponent of V."""

    o: np.ndarray
    shift: np.ndarray

    def same_bits(self, other: "Q15Out") -> bool:
        """Whether `other` holds the same values and shifts (the contract's bit-exactness)."""
        return bool(np.array_equal(self.o, other.o) and np.array_equal(self.shift, other.shift))

    def first_difference(self, model: "Q15Out") -> str:
        """The first value or row shift where this output differs from the `model`'s, e.g. 'O(3, 5) = 12, model 13'
        or 'g(3) = 4, model 5'; 'no difference' when they are the same bits."""
        for label, got, want in (("O", self.o, model.o), ("g", self.shift, model.shift)):
            differ = np.argwhere(np.asarray(got) != np.asarray(want))
            if len(differ):
                at = tuple(int(i) for i in differ[0])
                return f"{label}({', '.join(map(str, at))}) = {got[at]}, model {want[at]}"
        return "no difference"

    def dequantize(self, exponent: int) -> np.ndarray:
        """The output as float64, for V's exponent s_V."""
        return np.asarray(self.o, dtype=np.float64) * np.exp2(
            exponent - 15 - np.asarray(self.shift, dtype=np.float64))[..., None]


def attention_q15(q: np.ndarray, k: np.ndarray, v: np.ndarray, params: Q15Params, row0: int = 0) -> Q15Out:
    """The contract's output rows row0 .. row0+len(q)-1 for one head.

    q: (rows, dim) int16 query rows; k, v: (seq, dim) int16 (the kernel receives V transposed; the arithmetic is the
    same). Returns the rows' int16 values (rows, dim) and their output shifts (rows,): row i is o_i · 2^(s_V-15-g_i).
    """
    seq, dim = params.seq, params.dim
    q, k, v = (np.asarray(a) for a in (q, k, v))
    for name, array, rows in (("q", q, None), ("k", k, seq), ("v", v, seq)):
        if array.dtype != np.int16:
            raise SpecError(f"{name} has dtype {array.dtype}; allowed: int16 (Q15)")
        if array.ndim != 2 or array.shape[1] != dim or (rows is not None and array.shape[0] != rows):
            want = f"({rows if rows is not None else 'rows'}, {dim})"
            raise SpecError(f"{name} has shape {array.shape}; allowed: {want}")
    nrows = q.shape[0]
    if nrows < 1 or row0 < 0 or row0 + nrows > seq:
        raise SpecError(f"rows {row0}..{row0 + nrows - 1} are outside 0..{seq - 1} (seq={seq})")
    state = StreamState.start(q, row0, params)
    state.absorb(k[:state.key_end], v[:state.key_end], 0)
    return state.finish()


@dataclass
class StreamState:
    """The online softmax of some query rows carried across key chunks: the running max m, sum l and accumulators
    of each row, so a head can take K and V one key range at a time (docs/q15.md §7, "Streamed heads").

    Chunks must start on a key block (a multiple of Bc) and, except the one that reaches the rows' last key, hold
    whole blocks, and they come in increasing key order: then every block is visited with the same partition and in
    the same order as one pass over all keys, and the result is bit-identical to `attention_q15`. The rows' last key
    is seq - 1, or with the causal mask the last row's own position (keys beyond it change nothing)."""

    q: np.ndarray  # (rows, dim) int64
    row0: int
    params: Q15Params
    m: np.ndarray  # (rows, 1) running max of z, Q15.16
    l: np.ndarray  # (rows, 1) running sum of p, Q15 units
    acc: np.ndarray  # (rows, dim) Σ p·v, Q30 units of V's scale
    next_key: int = 0  # the first key the next chunk must start at

    @classmethod
    def start(cls, q: np.ndarray, row0: int, params: Q15Params) -> "StreamState":
        rows = q.shape[0]
        return cls(np.asarray(q).astype(np.int64), row0, params, np.full((rows, 1), INT32_MIN, dtype=np.int64),
                   np.zeros((rows, 1), dtype=np.int64), np.zeros((rows, params.dim), dtype=np.int64))

    @property
    def key_end(self) -> int:
        """The key after the rows' last: seq, or row0 + rows with the causal mask."""
        return self.row0 + self.q.shape[0] if self.params.causal else self.params.seq

    def absorb(self, k: np.ndarray, v: np.ndarray, key0: int) -> None:
        """Take keys key0 .. key0+len(k)-1 (k, v: (keys, dim) int16) into the rows' state."""
        params, nkeys, end = self.params, k.shape[0], self.key_end
        if key0 != self.next_key or nkeys < 1 or key0 + nkeys > end:
            raise SpecError(f"keys {key0}..{key0 + nkeys - 1}: the next chunk must start at key {self.next_key} and "
                            f"end by {end - 1}")
        if key0 + nkeys < end and nkeys % params.bc:
            raise SpecError(f"a chunk of {nkeys} keys is not whole blocks of Bc={params.bc}; allowed: a multiple of "
                            f"{params.bc}, or the rest of the keys")
        k64, v64 = k.astype(np.int64), v.astype(np.int64)
        rows = self.q.shape[0]
        query = np.arange(self.row0, self.row0 + rows)[:, None]  # (rows, 1) global query positions
        for j0 in range(key0, key0 + nkeys, params.bc):
            j1 = min(j0 + params.bc, end)
            kb, vb = k64[j0 - key0:j1 - key0], v64[j0 - key0:j1 - key0]
            z = np.clip(round_shift((self.q @ kb.T) * params.score_mult, params.score_shift),
                        INT32_MIN, INT32_MAX)  # (rows, Bc) Q15.16
            valid = np.arange(j0, j1)[None, :] <= query if params.causal else np.ones(z.shape, dtype=bool)
            has = valid.any(axis=1, keepdims=True)
            block_max = np.where(valid, z, INT32_MIN).max(axis=1, keepdims=True)
            grow = has & (block_max > self.m)
            alpha = np.where(grow, exp2_q15(np.where(grow, block_max - self.m, 0)), 0)
            self.l = np.where(grow, round_shift(self.l * alpha, 15), self.l)
            self.acc = np.where(grow, round_shift(self.acc * alpha, 15), self.acc)
            self.m = np.where(grow, block_max, self.m)
            p = np.where(valid, exp2_q15(np.where(valid, self.m - z, 0)), 0)  # (rows, Bc) Q15
            self.l = self.l + p.sum(axis=1, keepdims=True)
            self.acc = self.acc + p @ vb
        self.next_key = key0 + nkeys

    def finish(self) -> Q15Out:
        """The rows' outputs, once every key has been taken."""
        if self.next_key != self.key_end:
            raise SpecError(f"the rows have taken keys 0..{self.next_key - 1} of 0..{self.key_end - 1}: send the rest "
                            "first")
        return divide_q15(self.acc, self.l)


def bit_length(x: np.ndarray) -> np.ndarray:
    """The bit length of each non-negative int64 (0 for 0), exactly: frexp is exact below 2^53 and the values here
    (l < 2^30, |A| < 2^46) stay below it."""
    return np.frexp(np.asarray(x, dtype=np.float64))[1].astype(np.int64)


def output_shift(acc: np.ndarray, l: np.ndarray) -> np.ndarray:
    """Each row's output shift g (docs/q15.md §6): g = clamp(bitlen(l) − bitlen(max_c |A_c|) + 14, 0, OUT_SHIFT_MAX),
    0 for a row whose accumulators are all 0. It puts the row's largest |A|·2^g / l in [2^13, 2^15)."""
    peak = np.abs(acc).max(axis=-1, keepdims=True)
    g = np.clip(bit_length(l) - bit_length(peak) + 14, 0, OUT_SHIFT_MAX)
    return np.where(peak == 0, 0, g)


def divide_q15(acc: np.ndarray, l: np.ndarray) -> Q15Out:
    """O = A · 2^g / l per row, rounded to int16: the row's shift g from `output_shift`; l normalised to 16 significant
    bits (shifted right by s with rounding) and A shifted by g − s (left exactly, or right with rounding); magnitudes
    divided with round half up, the sign restored, and the result saturated."""
    g = output_shift(acc, l)
    s = np.maximum(bit_length(l) - 16, 0)
    l_n = round_shift(l, s)
    t = s - g  # A's net right shift
    acc_n = np.where(t >= 0, round_shift(acc, np.maximum(t, 0)), np.left_shift(acc, np.maximum(-t, 0)))
    mag = (np.abs(acc_n) + (l_n >> 1)) // l_n
    o = np.clip(np.where(acc_n < 0, -mag, mag), -32768, 32767).astype(np.int16)
    return Q15Out(o, g[..., 0].astype(np.uint8))


@dataclass(frozen=True)
class Quantized:
    """A problem's inputs as the Q15 targets receive them: int16 Q (B, H, q_len, d) and K, V (B, kv_heads, N, d),
    each with its per-tensor exponent (x ≈ q · 2^(s-15)), and the kernel parameters (score scale M, r for those
    exponents, key block Bc)."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    exponents: tuple[int, int, int]  # (sQ, sK, sV)
    params: Q15Params

    @property
    def row0(self) -> int:
        """The position of a head's first query: seq − q_len, so that its causal mask is aligned to the bottom right
        (query i sees keys 0 .. row0 + i, the contract's causal rows; 0 for self-attention)."""
        return self.params.seq - self.q.shape[2]

    def head(self, b: int, h: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(q, k, v) of query head h: q (q_len, d) and its K/V head's k, v (N, d), int16."""
        kv = h // (self.q.shape[1] // self.k.shape[1])
        return self.q[b, h], self.k[b, kv], self.v[b, kv]

    def expected(self) -> Q15Out:
        """The contract's output, values (B, H, q_len, d) and shifts (B, H, q_len): the model run on every head, its
        queries at rows row0 .. seq − 1."""
        out = Q15Out(np.empty(self.q.shape, dtype=np.int16), np.empty(self.q.shape[:-1], dtype=np.uint8))
        for b in range(self.q.shape[0]):
            for h in range(self.q.shape[1]):
                out.o[b, h], out.shift[b, h] = attention_q15(*self.head(b, h), self.params, self.row0)
        return out

    def dequantize(self, out: Q15Out) -> np.ndarray:
        """An output (values and row shifts) as float64."""
        return out.dequantize(self.exponents[2])


def prepare(problem: AttentionProblem, q: np.ndarray, k: np.ndarray, v: np.ndarray, bc: int = BC) -> Quantized:
    """Quantise float Q (B, H, q_len, d) and K, V (B, kv_heads, N, d) per tensor and derive the parameters every Q15
    target is given (at the contract's key block `BC` unless a tool asks for another)."""
    (qq, sq), (kq, sk), (vq, sv) = quantize(q), quantize(k), quantize(v)
    mult, shift = score_scale(sq, sk, problem.dim)
    params = Q15Params(problem.seq, problem.dim, problem.causal, bc, mult, shift)
    return Quantized(qq, kq, vq, (sq, sk, sv), params)


def error_bound(q: np.ndarray, k: np.ndarray, v: np.ndarray, quantized: Quantized) -> float:
    """The contract's worst-case max-abs error against the float64 golden (docs/q15.md §8) for these float inputs.

    Input quantisation: each element of Q, K, V moves by at most half an LSB, 2^(s-16); a score q·k/√d then moves by
    at most δ = (‖q‖·ε_K·√d + ‖k‖·ε_Q·√d + d·ε_Q·ε_K)/√d, so every softmax weight by a factor within e^(±2δ), and the
    output by at most (e^(2δ) − 1)·max|V| + ε_V. Arithmetic: each of the K weights errs by at most E LSB (EXP2 0.97,
    the score's rounding 0.17, and M's relative error 2⁻¹⁵ on exponent differences up to 2·zmax), giving
    2·K·E·max|V|/32767; each rescale, the divisor's normalisation and the 32767 cap add their relative errors times
    max|V|; the division adds at most one LSB of the row's scale 2^(s_V−15−g) ≤ 2^(s_V−15) (half an LSB of rounding,
    and at most another half where a quotient rounds to 32768 and saturates; with v2's row shift g the LSB shrinks
    with the row, so V's LSB bounds every row).
    """
    params = quantized.params
    sq, sk, sv = quantized.exponents
    eps_q, eps_k, eps_v = (2.0 ** (s - 16) for s in (sq, sk, sv))
    d, keys = params.dim, params.seq
    vmax = float(np.max(np.abs(v)))
    q_norm = float(np.max(np.linalg.norm(q.astype(np.float64), axis=-1)))
    k_norm = float(np.max(np.linalg.norm(k.astype(np.float64), axis=-1)))
    delta = (q_norm * eps_k * math.sqrt(d) + k_norm * eps_q * math.sqrt(d) + d * eps_q * eps_k) / math.sqrt(d)
    quantisation = math.expm1(2.0 * delta) * vmax + eps_v  # the inputs' rounding, V's half LSB included
    z_max = (q_norm + eps_q * math.sqrt(d)) * (k_norm + eps_k * math.sqrt(d)) / math.sqrt(d) * math.log2(math.e)
    per_weight = 0.97 + 0.17 + 32767 * 2.0**-15 * 2.0 * z_max * math.log(2.0)  # E, in LSB of Q15
    rescales = -(-keys // params.bc)
    relative = rescales * 0.5 / 32767 + 2.0**-17 + 2.0**-15
    arithmetic = 2.0 * keys * per_weight * vmax / 32767 + relative * vmax + 2.0 * eps_v  # eps_v: half V's LSB
    return quantisation + arithmetic


def run_problem(problem: AttentionProblem, bc: int = BC) -> tuple[Q15Out, np.ndarray]:
    """Quantise the problem's inputs per tensor, run the model on every head; (Q15 output, float64 dequantised O)."""
    quantized = prepare(problem, *problem.inputs(), bc)
    out = quantized.expected()
    return out, quantized.dequantize(out)
