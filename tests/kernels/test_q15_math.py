"""The GPU Q15 kernel's per-thread arithmetic (kernels/q15_math.cuh) held to host/q15.py off the GPU: the header is
plain C++ under g++ and __host__ __device__ under nvcc, so a small host program built by each calls its functions
(exp2, round_shift, the score, the byte split and recombination, the row shift and the division) on random and
extreme values, and every answer must equal the model's. The table's 64 literals must be host/q15.py's EXP2_TABLE."""

import re
import shutil
import subprocess

import numpy as np
import pytest

from helpers import ROOT
from host import q15

HEADER = ROOT / "kernels" / "q15_math.cuh"

#: The driver: one request a line on stdin, one answer a line on stdout.
#:   e DELTA          q15_exp2                       r X R         q15_round_shift
#:   s ACC M R        q15_score                      h X           q15_hi, q15_lo of an int16
#:   j HH MID LL      q15_join                       p B0 B1 B2 B3 q15_pack4
#:   d L N A0 .. AN-1 the row shift g, then each q15_divide (a row of N accumulators)
DRIVER = r"""
#include <cstdio>
#include "q15_math.cuh"

static const unsigned table[64] = {Q15_EXP2_TABLE_VALUES};

int main() {
    char op;
    long long a, b, c, d, row[256];
    while (std::scanf(" %c", &op) == 1) {
        if (op == 'e' && std::scanf("%lld", &a) == 1) std::printf("%d\n", q15_exp2(a, table));
        else if (op == 'r' && std::scanf("%lld %lld", &a, &b) == 2) std::printf("%lld\n", q15_round_shift(a, (int)b));
        else if (op == 's' && std::scanf("%lld %lld %lld", &a, &b, &c) == 3)
            std::printf("%d\n", q15_score(a, (int)b, (int)c));
        else if (op == 'h' && std::scanf("%lld", &a) == 1) std::printf("%d %d\n", q15_hi((int)a), q15_lo((int)a));
        else if (op == 'j' && std::scanf("%lld %lld %lld", &a, &b, &c) == 3)
            std::printf("%lld\n", q15_join((int)a, (int)b, (int)c));
        else if (op == 'p' && std::scanf("%lld %lld %lld %lld", &a, &b, &c, &d) == 4)
            std::printf("%u\n", q15_pack4((int)a, (int)b, (int)c, (int)d));
        else if (op == 'd' && std::scanf("%lld %lld", &a, &b) == 2) {
            unsigned long long peak = 0;
            for (int i = 0; i < b; ++i) {
                if (std::scanf("%lld", &row[i]) != 1) return 2;
                const unsigned long long mag = (unsigned long long)(row[i] < 0 ? -row[i] : row[i]);
                peak = mag > peak ? mag : peak;
            }
            const int g = q15_out_shift(peak, a);
            const Q15Divisor divisor = q15_divisor(a, g);
            std::printf("%d", g);
            for (int i = 0; i < b; ++i) std::printf(" %d", q15_divide(row[i], divisor));
            std::printf("\n");
        } else return 1;
    }
    return 0;
}
"""


@pytest.fixture(scope="module", params=["g++", "nvcc"])
def driver(request, tmp_path_factory):
    """The driver built by g++ (plain C++) or nvcc (the __host__ __device__ spelling); skipped without it."""
    compiler = request.param
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed")
    folder = tmp_path_factory.mktemp(compiler.replace("+", "p"))
    source = folder / ("driver.cu" if compiler == "nvcc" else "driver.cpp")
    source.write_text(DRIVER)
    flags = ["-Werror", "all-warnings"] if compiler == "nvcc" else ["-Wall", "-Wextra", "-Werror"]
    done = subprocess.run([compiler, "-std=c++17", "-O2", *flags, f"-I{HEADER.parent}", "-o", str(folder / "driver"),
                           str(source)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return folder / "driver"


def ask(driver, lines: list[str]) -> list[str]:
    done = subprocess.run([str(driver)], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    answers = done.stdout.splitlines()
    assert len(answers) == len(lines)
    return answers


def test_the_headers_table_is_the_models():
    literals = re.search(r"#define Q15_EXP2_TABLE_VALUES(.*?)\n\n", HEADER.read_text(), re.S)[1]
    assert [int(x) for x in re.findall(r"(\d+)u", literals)] == q15.EXP2_TABLE.tolist()


@pytest.mark.slow
def test_exp2_on_every_fraction_and_past_the_cut(driver):
    """All 2^20 deltas with n <= 15 (every table index and interpolation step), then n 16..65535 at random and the
    largest difference of two int32 scores, 2^32 - 1."""
    rng = np.random.default_rng(1)
    deltas = np.concatenate([np.arange(1 << 20), rng.integers(1 << 20, 1 << 32, 20000), [(1 << 32) - 1, 1 << 20]])
    got = np.array(ask(driver, [f"e {x}" for x in deltas]), dtype=np.int64)
    np.testing.assert_array_equal(got, q15.exp2_q15(deltas))


@pytest.mark.slow
def test_round_shift_and_the_score(driver):
    """RSH on values up to the rescale products' 2^60 and shifts 0..62; the score's RSH(acc·M, r) with saturation,
    acc up to ±2^38 (-32768·-32768·256) and every M, r the contract allows."""
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.integers(-(1 << 60), 1 << 60, 20000), rng.integers(-1000, 1000, 2000),
                        [0, 1, -1, 5, -5, (1 << 60) - 1, -(1 << 60)]])
    r = np.concatenate([rng.integers(0, 63, len(x) - 7), [1, 1, 1, 1, 1, 62, 62]])
    got = np.array(ask(driver, [f"r {a} {b}" for a, b in zip(x, r)]), dtype=np.int64)
    np.testing.assert_array_equal(got, [int(q15.round_shift(a, b)) for a, b in zip(x, r)])
    acc = np.concatenate([rng.integers(-(1 << 38), (1 << 38) + 1, 20000), [1 << 38, -(1 << 38), 0, -1] * 4])
    mult = np.concatenate([rng.integers(q15.MULT_MIN, q15.MULT_MAX + 1, 20000),
                           [q15.MULT_MAX] * 8 + [q15.MULT_MIN] * 8])
    shift = np.concatenate([rng.integers(q15.SHIFT_MIN, q15.SHIFT_MAX + 1, 20000), [1, 1, 62, 62, 7, 7, 30, 30] * 2])
    got = np.array(ask(driver, [f"s {a} {m} {s}" for a, m, s in zip(acc, mult, shift)]), dtype=np.int64)
    want = [int(np.clip(q15.round_shift(a * m, s), q15.INT32_MIN, q15.INT32_MAX)) for a, m, s in zip(acc, mult, shift)]
    np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_the_byte_split_and_recombination(driver):
    """Every int16 splits into a signed high and an unsigned low byte with x = hi·256 + lo; the three partial sums
    of random int16 dot products of length 256 (hi·hi', the cross terms, lo·lo', each within int32) recombine to the
    exact sum; bytes pack low first."""
    values = np.arange(-32768, 32768)
    hi_lo = np.array([line.split() for line in ask(driver, [f"h {x}" for x in values])], dtype=np.int64)
    np.testing.assert_array_equal(hi_lo[:, 0] * 256 + hi_lo[:, 1], values)
    assert (hi_lo[:, 0].min(), hi_lo[:, 0].max(), hi_lo[:, 1].min(), hi_lo[:, 1].max()) == (-128, 127, 0, 255)
    rng = np.random.default_rng(3)
    a = np.concatenate([rng.integers(-32768, 32768, (500, 256)), np.full((2, 256), -32768), np.full((2, 256), 32767)])
    b = np.concatenate([rng.integers(-32768, 32768, (500, 256)), np.full((2, 256), -32768), np.full((2, 256), -32768)])
    ah, al, bh, bl = a >> 8, a & 0xFF, b >> 8, b & 0xFF
    hh, mid, ll = (ah * bh).sum(1), (ah * bl + al * bh).sum(1), (al * bl).sum(1)
    assert max(abs(hh).max(), abs(mid).max(), abs(ll).max()) < 2**31
    got = np.array(ask(driver, [f"j {x} {y} {z}" for x, y, z in zip(hh, mid, ll)]), dtype=np.int64)
    np.testing.assert_array_equal(got, (a * b).sum(1))
    assert ask(driver, ["p 1 2 3 4", "p -1 0 -128 127"]) == [str(0x04030201), str(0x7F8000FF)]


@pytest.mark.slow
def test_the_row_shift_and_division(driver):
    """Rows of accumulators against l as the softmax leaves them: random magnitudes from 0 to 2^46, l from 1 to 2^30,
    rows of zeros, one-element rows, A = ±2^15·l (the saturating ends) and l = 1; every g and value is divide_q15's."""
    rng = np.random.default_rng(4)
    rows = []
    for _ in range(3000):
        dim = int(rng.choice([1, 2, 59, 64, 256]))
        l = int(rng.integers(1, 1 << int(rng.integers(1, 31))))
        acc = rng.integers(-(1 << 46), 1 << 46, dim) >> int(rng.integers(0, 46))
        rows.append((l, acc))
    for l in (1, 2, 32767, (1 << 30) - 1):
        rows += [(l, np.zeros(3, dtype=np.int64)), (l, np.array([32768 * l, -32768 * l, 32767 * l - l // 2])),
                 (l, np.array([-(32768 * l) - (1 << 29), 1])), (l, np.array([1, -1, 0]))]
    answers = ask(driver, [f"d {l} {len(acc)} " + " ".join(map(str, acc)) for l, acc in rows])
    for (l, acc), answer in zip(rows, answers):
        want = q15.divide_q15(np.asarray(acc, dtype=np.int64)[None, :], np.array([[l]], dtype=np.int64))
        got = [int(x) for x in answer.split()]
        assert got == [int(want.shift[0]), *want.o[0].tolist()], (l, acc.tolist())
