"""mcu/native/attention_q15.c against host/q15.py: bit-exact (values and each row's output shift) on random and
adversarial cases, the row shift at its ends (0 for a row of zeros, the cap 31 for a row tiny against V's scale, a
quotient rounding to 32768), the same validation messages the MicroPython binding raises, and a Cortex-M4 build that
uses the DSP instructions it was written for."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from host import q15
from mcu import q15_c
from mcu.native_build import BUILD, NATIVE

RANDOM_CASES = 10_000


def case_params(rng, seq, dim, causal, bc, exp_q=None, exp_k=None):
    exp_q = int(rng.integers(-4, 5)) if exp_q is None else exp_q
    exp_k = int(rng.integers(-4, 5)) if exp_k is None else exp_k
    return q15.Q15Params(seq, dim, causal, bc, *q15.score_scale(exp_q, exp_k, dim))


def assert_same(params, q, k, v, row0=0, label=""):
    """The C kernel's rows equal the model's, values and row shifts; the model's output."""
    want = q15.attention_q15(q, k, v, params, row0)
    got = q15_c.attention_rows(params, q, k, v, row0)
    for name, w, g in (("O", want.o, got.o), ("g", want.shift, got.shift)):
        if not np.array_equal(w, g):
            bad = np.argwhere(w != g)
            firsts = ", ".join(f"{name}{tuple(int(i) for i in idx)}: model {w[tuple(idx)]}, C {g[tuple(idx)]}"
                               for idx in bad[:5])
            pytest.fail(f"{label} {params}: {len(bad)} differences in {name}; first {firsts}")
    return want


def test_exp2_step_is_identical_for_every_delta_that_is_not_zero_by_rule():
    delta = np.arange(0, 16 << 16, 1, dtype=np.int64)
    model = q15.exp2_q15(delta)
    lib = q15_c.library()
    sample = delta[::3]  # every third delta: 350k calls, every table entry and interpolation remainder
    got = np.fromiter((lib.q15attn_exp2(int(d)) for d in sample), dtype=np.int64, count=sample.size)
    assert np.array_equal(got, model[::3])
    assert [q15_c.exp2(d) for d in (16 << 16, 0xFFFFFFFF)] == [0, 0]


@pytest.mark.slow  # 10,000 cases: 37 s on the 2-core machine, over 2 minutes at a load of 8
def test_random_cases_are_bit_exact():
    rng = np.random.default_rng(20261129)
    for case in range(RANDOM_CASES):
        seq = int(np.exp(rng.uniform(0, np.log(256)))) if case % 10 else int(rng.integers(200, 257))
        dim = int(rng.integers(1, 129)) if case % 7 else int(rng.integers(1, 9))
        bc = int(rng.choice([1, 2, 3, 7, 16, 32, 64]))
        params = case_params(rng, seq, dim, bool(rng.integers(0, 2)), bc)
        spread = int(rng.choice([32767, 4096, 300]))
        q, k, v = (rng.integers(-spread - 1, spread + 1, (seq, dim)).astype(np.int16) for _ in range(3))
        row0 = int(rng.integers(0, seq)) if case % 5 == 0 else 0
        assert_same(params, q[row0:], k, v, row0, label=f"case {case}")


ADVERSARIAL = {
    "all -32768": lambda shape, rng: np.full(shape, -32768, np.int16),
    "all +32767": lambda shape, rng: np.full(shape, 32767, np.int16),
    "zeros": lambda shape, rng: np.zeros(shape, np.int16),
    "alternating extremes": lambda shape, rng: np.where(rng.integers(0, 2, shape) == 1, 32767, -32768).astype(np.int16),
}


@pytest.mark.parametrize("name", list(ADVERSARIAL))
@pytest.mark.parametrize("seq,dim", [(1, 1), (17, 59), (97, 128), (256, 64), (33, 256)])
def test_adversarial_tensors_are_bit_exact(name, seq, dim):
    rng = np.random.default_rng(seq * dim)
    make = ADVERSARIAL[name]
    for causal in (False, True):
        for bc in (1, 5, 64):
            for exps in ((0, 0), (4, 4), (-4, 4)):
                params = case_params(rng, seq, dim, causal, bc, *exps)
                q, k = make((seq, dim), rng), make((seq, dim), rng)
                v = rng.integers(-32768, 32768, (seq, dim)).astype(np.int16)
                assert_same(params, q, k, v, label=name)
                assert_same(params, q, k, make((seq, dim), rng), label=name + " (V too)")


def test_equal_scores_dominant_scores_and_masked_rows_are_bit_exact():
    rng = np.random.default_rng(7)
    seq, dim = 97, 16
    v = rng.integers(-32768, 32768, (seq, dim)).astype(np.int16)
    equal_q = np.zeros((seq, dim), np.int16)  # every score 0: every p = 32767
    dominant_k = np.zeros((seq, dim), np.int16)
    dominant_k[41] = 32767  # one key far above the rest
    dominant_q = np.full((seq, dim), 32767, np.int16)
    for bc in (1, 4, 64):
        for causal in (False, True):  # causal row 0 sees only its diagonal
            params = case_params(rng, seq, dim, causal, bc, 0, 0)
            assert_same(params, equal_q, dominant_k, v, label="equal scores")
            assert_same(params, dominant_q, dominant_k, v, label="one dominant score")
            out = q15_c.attention_rows(params, dominant_q, dominant_k, v)
            if causal:  # row 0 is v[0] exactly: o · 2^-g = v[0]
                assert np.array_equal(out.o[0].astype(np.int64), v[0].astype(np.int64) << int(out.shift[0]))


@pytest.mark.parametrize("mult,shift", [(32767, 1), (16384, 62), (32767, 8)])
def test_extreme_scales_saturate_identically(mult, shift):
    rng = np.random.default_rng(shift)
    for causal in (False, True):
        params = q15.Q15Params(64, 32, causal, 8, mult, shift)
        q, k, v = (rng.integers(-32768, 32768, (64, 32)).astype(np.int16) for _ in range(3))
        assert_same(params, q, k, v, label="extreme scale")


def test_rows_in_chunks_equal_the_whole():
    rng = np.random.default_rng(3)
    params = case_params(rng, 97, 59, True, 16)
    q, k, v = (rng.integers(-32768, 32768, (97, 59)).astype(np.int16) for _ in range(3))
    whole = q15_c.attention_rows(params, q, k, v)
    chunks = [q15_c.attention_rows(params, q[r:r + 10], k, v, r) for r in range(0, 97, 10)]
    assert np.array_equal(whole.o, np.concatenate([c.o for c in chunks]))
    assert np.array_equal(whole.shift, np.concatenate([c.shift for c in chunks]))


#: The shift tests' shapes: awkward lengths at dim 59 (the pair path's odd column), and one long head.
SHIFT_SHAPES = [(1, 59), (17, 59), (97, 59), (1025, 59)]
#: Score scale of the shift tests: z = acc · 2^14 / 2^24, so key 0's score (acc down to -2^30) falls to -16 · 2^16,
#: where EXP2 is 0.
FALLING = dict(score_mult=16384, score_shift=24)


def falling_key_head(seq, dim, v0):
    """(q, k, v) where every key but key 0 scores 0 and holds V = 0, and key 0 (V = v0) scores lower and lower down
    the query rows, from 0 to -16 in base 2: its probability runs from 32767 to 0, so |O| runs from about |v0| / seq
    (|v0| for causal row 0) down to 0 while l stays near (keys - 1) · 32767."""
    q = np.zeros((seq, dim), np.int16)
    q[:, 0] = np.linspace(0, 32767, seq).astype(np.int16)
    k = np.zeros((seq, dim), np.int16)
    k[0, 0] = -32768
    v = np.zeros((seq, dim), np.int16)
    v[0] = v0
    return q, k, v


def check_row_shift_range(out):
    """A row whose shift is neither clamped at 0 nor at the cap has its largest |O| in [2^13, 2^15] (less one for the
    rounding of l): g puts max |A|·2^g / l in [2^13, 2^15) (docs/q15.md §6), the 32768 of rounding saturated."""
    inside = (out.shift > 0) & (out.shift < q15.OUT_SHIFT_MAX)
    peaks = np.abs(out.o[inside].astype(np.int64)).max(axis=-1)
    assert ((peaks >= (1 << 13) - 1) & (peaks <= 32767)).all(), peaks


@pytest.mark.parametrize("seq,dim", SHIFT_SHAPES)
def test_row_shifts_span_zero_to_the_cap_bit_exact(seq, dim):
    """V all zero: every row's shift is 0 and its values 0. V of ±1 at the falling key: rows whose O is tiny against
    V's scale take large shifts, up to the cap 31; V at full scale: small shifts, or 0 where |O| needs all 16 bits."""
    rng = np.random.default_rng(seq)
    shifts = set()
    for causal in (False, True):
        for bc in (1, 5, q15.BC):
            params = q15.Q15Params(seq, dim, causal, bc, **FALLING)
            zeros = assert_same(params, *falling_key_head(seq, dim, 0), label="V all zero")
            assert not zeros.shift.any() and not zeros.o.any()
            for name, v0 in (("tiny", rng.integers(-1, 2, dim)), ("full", rng.choice([-32768, 32767], dim))):
                out = assert_same(params, *falling_key_head(seq, dim, v0.astype(np.int16)), label=name)
                check_row_shift_range(out)
                assert name == "full" or ((out.shift > 0) & (out.shift < q15.OUT_SHIFT_MAX)).any(), out.shift
                shifts |= set(out.shift.tolist())
    if seq >= 17:  # l >= 16 · 32767: one unit of A is 2^-19 of it, past the cap
        assert {0, q15.OUT_SHIFT_MAX} <= shifts and len(shifts) > 10, sorted(shifts)


@pytest.mark.parametrize("dim", [1, 2, 59])
def test_a_quotient_rounding_to_32768_saturates_bit_exact(dim):
    """Two keys with p = 32767 and p = 1 (a score 15 lower in base 2): l = 2^15, and V = (4, 3) gives A = 2^17 - 1 in
    column 0, so g = bits(l) - bits(A) + 14 = 13 and A·2^g / l = 32767.75, which rounds to 32768 and saturates to
    32767; V = (-4, -3) gives -32768, in range. Derived here from the integers, not from either implementation."""
    q = np.zeros((2, dim), np.int16)
    q[:, 0] = 32767
    k = np.zeros((2, dim), np.int16)
    k[1, 0] = -32  # z_1 = RSH(-32 · 32767 · 2^14, 14) = -1048544: δ in [15, 16) · 2^16, EXP2 = 1
    v = np.ones((2, dim), np.int16)
    v[:, 0] = (4, 3)
    if dim > 1:
        v[:, 1] = (-4, -3)
    p = [int(q15.exp2_q15(np.int64(0))), int(q15.exp2_q15(np.int64(1048544)))]
    assert p == [32767, 1]
    l, peak = sum(p), p[0] * 4 + p[1] * 3
    g = l.bit_length() - peak.bit_length() + 14
    assert (l, peak, g) == (1 << 15, (1 << 17) - 1, 13)
    assert (peak * 2**g + l // 2) // l == 32768  # s = 0: l is already 16 bits
    for causal, bc in ((False, 1), (True, 1), (False, q15.BC), (True, q15.BC)):  # causal row 1 sees both keys
        out = assert_same(q15.Q15Params(2, dim, causal, bc, 16384, 14), q, k, v, label="32768 by rounding")
        assert out.shift[1] == 13 and out.o[1, 0] == 32767
        if dim > 1:
            assert out.o[1, 1] == -32768


GOOD = dict(seq=4, dim=3, causal=0, bc=2, score_mult=20000, score_shift=20)
GOOD_BUFFERS = [("h", 24), ("h", 24), ("h", 24), ("h", 24), ("B", 4)]  # q, k, vt, o; oshift: 4 rows of dim 3


@pytest.mark.parametrize("params,buffers,row0,message", [
    (dict(dim=300), GOOD_BUFFERS, 0, "dim=300 is out of range; allowed: 1..256"),
    (dict(seq=0), GOOD_BUFFERS, 0, "seq=0 is out of range; allowed: 1..32768"),
    (dict(bc=0), GOOD_BUFFERS, 0, "bc=0 is out of range; allowed: 1..64"),
    (dict(causal=2), GOOD_BUFFERS, 0, "causal=2 is out of range; allowed: 0..1"),
    (dict(score_shift=70), GOOD_BUFFERS, 0, "score_shift=70 is out of range; allowed: 1..62"),
    ({}, [("f", 48)] + GOOD_BUFFERS[1:], 0, "q has typecode 'f'; allowed: 'h' (array('h'), int16)"),
    ({}, GOOD_BUFFERS[:3] + [("b", 24)] + GOOD_BUFFERS[4:], 0, "o has typecode 'b'"),
    ({}, [("h", 20)] + GOOD_BUFFERS[1:], 0, "len(q)=10 is not a whole, non-zero number of rows of dim=3"),
    ({}, [GOOD_BUFFERS[0], ("h", 22)] + GOOD_BUFFERS[2:], 0, "len(k)=11 but seq*dim=12"),
    ({}, GOOD_BUFFERS[:2] + [("h", 26)] + GOOD_BUFFERS[3:], 0, "len(vt)=13 but seq*dim=12"),
    ({}, GOOD_BUFFERS[:3] + [("h", 18)] + GOOD_BUFFERS[4:], 0, "len(o)=9 but len(q)=12"),
    ({}, [("h", 12)] + GOOD_BUFFERS[1:3] + [("h", 12), ("B", 2)], 3, "rows 3..4 are outside 0..3 (seq=4)"),
    ({}, GOOD_BUFFERS[:4] + [("h", 8)], 0, "oshift has typecode 'h'; allowed: 'B' (bytearray or array('B'), uint8)"),
    ({}, GOOD_BUFFERS[:4] + [("B", 3)], 0,
     "len(oshift)=3 is too small; allowed: at least 4 bytes (one shift per row, 4 rows)"),
    ({}, GOOD_BUFFERS[:4] + [("B", 0)], 0, "oshift is missing (0 bytes); allowed: at least 4 bytes (one shift per row, "
                                           "4 rows)"),
])
def test_binding_validation_messages_name_the_values(params, buffers, row0, message):
    status, _, text = q15_c.check_buffers({**GOOD, **params}, row0, buffers)
    assert status < 0
    assert text == message or text.startswith(message), text


def test_valid_buffers_give_the_row_count():
    assert q15_c.check_buffers(GOOD, 1, [("h", 12), ("h", 24), ("h", 24), ("h", 12), ("B", 2)])[:2] == (0, 2)
    assert q15_c.check_buffers(GOOD, 1, [("h", 12), ("h", 24), ("h", 24), ("h", 12), ("B", 99)])[:2] == (0, 2)


@pytest.fixture(scope="module")
def m4_build():
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("arm-none-eabi-gcc is not installed (scripts/setup.sh installs Debian's gcc-arm-none-eabi)")
    done = subprocess.run(["make", "-C", str(NATIVE), "-B", "arm"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def test_cortex_m4_build_is_warning_free_and_has_no_data_or_bss(m4_build):
    assert "warning" not in m4_build.stderr.lower()
    report = re.search(r"text (\d+), rodata (\d+), data (\d+), bss (\d+) bytes", m4_build.stdout)
    assert report, m4_build.stdout
    text, rodata, data, bss = (int(x) for x in report.groups())
    assert text > 0 and rodata >= 64 * 4 and data == 0 and bss == 0


def test_cortex_m4_build_uses_the_dsp_instructions(m4_build):
    listing = (BUILD / "attention_q15_m4.dis").read_text()
    load = r"[^\n]*\tldr(?:\.w)?\t\w+, \[\w+\], #4\n"
    mac = r"[^\n]*\tsmlald\t[^\n]*\n"
    loop_test = r"[^\n]*\tcmp\t[^\n]*\n[^\n]*\tb(?:cc|lo)(?:\.n|\.w)?\t"
    step = re.compile(load * 4 + mac * 2 + load * 2 + mac * 2 + loop_test)
    assert len(step.findall(listing)) == 2, "both dot products (QK and PV) run the hand-scheduled SMLALD step"
    assert re.search(r"\budiv\b", listing), "the final division uses the hardware divider"
    assert "__aeabi" not in listing, "no runtime-library helpers (natmods link none by default)"


# -- the binding (modq15attn.c) itself: a natmod for MicroPython's unix port, where a MicroPython tree is given ------

def binding_missing() -> str:
    """Why the binding cannot be built and run here ("" when it can): KBENCH_MPY_DIR names a MicroPython checkout
    and KBENCH_MICROPYTHON its unix port's micropython (make -C ports/unix), whose .mpy version the natmod takes."""
    mpy_dir, micropython = os.environ.get("KBENCH_MPY_DIR", ""), os.environ.get("KBENCH_MICROPYTHON", "")
    if not mpy_dir or not (Path(mpy_dir) / "py" / "dynruntime.mk").is_file():
        return f"KBENCH_MPY_DIR={mpy_dir!r} is not a MicroPython checkout (py/dynruntime.mk)"
    if not micropython or not os.access(micropython, os.X_OK):
        return f"KBENCH_MICROPYTHON={micropython!r} is not the unix port's micropython"
    if importlib.util.find_spec("elftools") is None:
        return "pyelftools is not installed (mpy_ld.py needs it)"
    return ""


#: what the binding raises for an int in oshift's place, seq there from a caller of q15attn 3 (the old frame server's
#: attention(q, k, vt, o, seq, dim, causal, bc, mult, shift, row0)), as its source writes the format
OLD_CALLER_FORMAT = ("oshift=%d is an int: the caller predates q15attn 4 (contract v2 takes an oshift buffer after o); "
                     "allowed: a writable bytearray or array('B'), a byte per row; re-deploy the board code with "
                     "python -m mcu.deploy")


def test_the_binding_tells_a_caller_of_q15attn_3_to_redeploy_in_the_twins_words():
    # the format string as modq15attn.c's shift_arg writes it (adjacent C literals joined), one line, the same the
    # twin's stand-in raises (tests/sim/binding_cases.py); test_the_binding_refuses_... runs it where it can
    from sim.binding_cases import OLD_CALLER

    source = (NATIVE / "modq15attn.c").read_text()
    body = source[source.index("static void shift_arg("):source.index("/* Raise ValueError with the kernel's")]
    literals = re.search(r'Q15ATTN_FORMAT\(("oshift=%d is an int.*?")\), 1, value\);', body, re.S)
    assert literals, "shift_arg refuses an int in oshift's place with its own message"
    text = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', literals.group(1)))
    assert text == OLD_CALLER_FORMAT and "\n" not in text
    assert b"TypeError: " + (text % 17).encode() == OLD_CALLER % b"17"


@pytest.mark.skipif(bool(binding_missing()), reason=binding_missing() or "-")
def test_the_binding_refuses_bad_arguments_in_its_order_with_the_twins_messages(tmp_path):
    # the natmod built for x64 (natmod.mk's objects and dynruntime.mk's native .mpy, MicroPython 1.27 naming) from a
    # copy of mcu/native, imported by the unix port: each refusal's last line is the one the twin's stand-in must give
    from sim.binding_cases import HEAD, OLD_CALLER, ORDER, READ_ONLY

    build = tmp_path / "native"
    shutil.copytree(NATIVE, build, ignore=shutil.ignore_patterns("build"))
    done = subprocess.run(["make", "-f", "natmod.mk", "ARCH=x64", f"MPY_DIR={os.environ['KBENCH_MPY_DIR']}",
                           f"PYTHON={sys.executable}", "build/x64/obj/q15attn.native.mpy"], cwd=build,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(build / "build" / "x64" / "obj" / "q15attn.native.mpy", run / "q15attn.mpy")
    cases = [(call, error) for call, error in ORDER]
    cases += [(call[len("q15attn."):], error) for call, error in READ_ONLY]
    cases.append(("attention(q, k, vt, o, 17, 8, 0, 4, 16714, 43, 0)", OLD_CALLER % b"17"))
    setup = HEAD.replace("ref = q15attn.attention(", "q15attn.attention(").replace(
        "print(ref > 0, 0xEE not in ref_g)", "")  # not timed off an ARMv7E-M core: the call returns None
    script = setup + "\nfor c in %r:\n    try:\n        eval('q15attn.' + c)\n        print('no error')\n" \
                     "    except Exception as e:\n        print(type(e).__name__ + ': ' + str(e))\n" % (
                         [call for call, _ in cases],)
    (run / "cases.py").write_text(script)
    ran = subprocess.run([os.environ["KBENCH_MICROPYTHON"], "cases.py"], cwd=run, capture_output=True, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    for (call, error), line in zip(cases, ran.stdout.splitlines(), strict=True):
        assert line == error, call
