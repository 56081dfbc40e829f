"""The two-row path of mcu/native/attention_q15.c (2x2 register blocking: two query rows x two keys in QKᵀ, two
probability rows x two columns of Vᵀ in P·V): bit-exact with host/q15.py (values and row shifts) on awkward shapes,
in the host build and in the Cortex-M4 build on the twin's emulated core; the hand-scheduled step in the listing; the
modelled cycles the issues asked for; and the kernel's stack frames."""

import re
import shutil
import subprocess

import numpy as np
import pytest

from helpers.twin import needs_emulator
from host import q15
from mcu import q15_c
from mcu.native_build import BUILD, NATIVE
from host.problem import AttentionProblem


#: (seq, dim, causal, bc): seq 1 (one row, no pair), odd seq (a last row alone), odd dim (the halfword step after the
#: unrolled ones), dim 1 and 2 (no or one unrolled step), 63/64 (every step), odd Bc (odd key blocks; causal row
#: pairs whose first row has no key in the second row's last block), Bc 1 (a block per key), seq 130 > 2·Bc.
AWKWARD = [
    (1, 59, False, 1), (1, 64, True, 64), (17, 59, True, 16), (17, 64, False, 1), (97, 59, False, 64),
    (97, 59, True, 1), (97, 64, True, 16), (130, 64, False, 64), (130, 59, True, 64), (130, 63, False, 16),
    (130, 64, True, 1), (33, 1, True, 16), (34, 2, False, 3), (64, 64, True, 64), (40, 32, True, 5),
    (23, 17, True, 7),
]
#: The shapes the emulated core takes over 5 s for (one key per block over 97 and 130 rows): in the slow run only.
EMULATED_SLOW = {(97, 59, True, 1), (130, 64, True, 1), (130, 63, False, 16), (130, 64, False, 64)}
#: Input exponents (Q, K) that put the score shift r on each side of the routine's cases: r <= 32, r > 32, and
#: r < 22, which the Cortex-M4 build runs one row at a time.
EXPONENTS = [(3, 3), (-3, -3), (0, 0), (8, 8)]


def case(seq, dim, causal, bc, exps, seed):
    rng = np.random.default_rng(seed)
    params = q15.Q15Params(seq, dim, causal, bc, *q15.score_scale(*exps, dim))
    spread = (32767, 4096, 300)[seed % 3]  # full range (many probabilities 0), and narrower, denser softmaxes
    q, k, v = (rng.integers(-spread - 1, spread + 1, (seq, dim)).astype(np.int16) for _ in range(3))
    return params, q, k, v


def test_the_exponents_cover_every_score_step():
    shifts = {q15.score_scale(*exps, 64)[1] for exps in EXPONENTS}
    assert any(r < 22 for r in shifts) and any(22 <= r <= 32 for r in shifts) and any(r > 32 for r in shifts), shifts


@pytest.mark.parametrize("seq,dim,causal,bc", AWKWARD)
def test_host_build_is_bit_exact_on_awkward_shapes(seq, dim, causal, bc):
    for n, exps in enumerate(EXPONENTS):
        params, q, k, v = case(seq, dim, causal, bc, exps, seq + dim + n)
        for row0 in sorted({0, seq // 3, seq - 1}):
            want = q15.attention_q15(q[row0:], k, v, params, row0)
            got = q15_c.attention_rows(params, q[row0:], k, v, row0)
            assert want.same_bits(got), f"{params} row0 {row0}: {got.first_difference(want)}"


@needs_emulator
@pytest.mark.parametrize("seq,dim,causal,bc", [pytest.param(*shape, marks=pytest.mark.slow) if shape in EMULATED_SLOW
                                               else shape for shape in AWKWARD])
def test_cortex_m4_build_is_bit_exact_on_awkward_shapes(emulator, seq, dim, causal, bc):
    for n, exps in enumerate(EXPONENTS):
        params, q, k, v = case(seq, dim, causal, bc, exps, seq + dim + n)
        for row0 in sorted({0, seq // 3}):  # seq // 3 is odd for 17, 97, 130: pairs start on odd rows
            want = q15.attention_q15(q[row0:], k, v, params, row0)
            got, _, _ = emulator.run(params, q[row0:], k, v, row0)
            assert want.same_bits(got), f"{params} row0 {row0}: {got.first_difference(want)}"


@needs_emulator
def test_rows_in_odd_chunks_equal_the_whole_on_the_twin(emulator):
    params, q, k, v = case(61, 59, True, 7, (2, 2), 5)
    whole, _, _ = emulator.run(params, q, k, v)
    chunks = [emulator.run(params, q[r:r + 5], k, v, r)[0] for r in range(0, 61, 5)]
    assert whole.same_bits(q15.Q15Out(np.concatenate([c.o for c in chunks]), np.concatenate([c.shift for c in chunks])))
    assert whole.same_bits(q15.attention_q15(q, k, v, params))


@needs_emulator
def test_the_two_row_routines_run_where_they_should():
    """Calls to the hand-written routines, counted at their entry: rows go two at a time up to dim 64 at r >= 22,
    one at a time for dim 65 and for r < 22; an odd row count leaves one row to the one-row path."""
    from unicorn import UC_HOOK_CODE

    from mcu.sim.q15emu import Q15Emulator

    emulator = Q15Emulator()  # a fresh core: code hooks reach only code translated after they are added
    cpu = emulator.cpu
    calls = {name: 0 for name in ("qk_pair_m4", "pv_pair_m4", "q15attn_absorb_row")}
    hooks = []
    for name in calls:
        address = cpu.symbols[name]

        def count(uc, at, size, user, name=name):
            calls[name] += 1

        hooks.append(cpu.uc.hook_add(UC_HOOK_CODE, count, begin=address, end=address))
    try:
        def run(seq, dim, exps, bc=16):
            for name in calls:
                calls[name] = 0
            params, q, k, v = case(seq, dim, False, bc, exps, 1)
            got, _, _ = emulator.run(params, q, k, v)
            assert got.same_bits(q15.attention_q15(q, k, v, params))
            return dict(calls)

        # 17 rows: 8 pairs x 2 key blocks each, and the 17th row alone
        assert run(17, 64, (3, 3)) == {"qk_pair_m4": 16, "pv_pair_m4": 16, "q15attn_absorb_row": 1}
        assert run(17, 65, (3, 3)) == {"qk_pair_m4": 0, "pv_pair_m4": 0, "q15attn_absorb_row": 17}
        assert run(17, 64, (8, 8)) == {"qk_pair_m4": 0, "pv_pair_m4": 0, "q15attn_absorb_row": 17}
    finally:
        for hook in hooks:
            cpu.uc.hook_del(hook)


@pytest.fixture(scope="module")
def m4_listing():
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("arm-none-eabi-gcc is not installed (scripts/setup.sh installs Debian's gcc-arm-none-eabi)")
    done = subprocess.run(["make", "-C", str(NATIVE), "arm"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return (BUILD / "attention_q15_m4.dis").read_text()


def test_the_listing_runs_the_2x2_step_unrolled_in_both_routines(m4_listing):
    """Four loads (two rows from the frame, two streams), then four SMLALD into four accumulators: 9 modelled cycles
    per 8 multiply-accumulates; 32 steps in QKᵀ and 32 in P·V."""
    load = r"[^\n]*\tldr\.w\t{}, \[{}(?:, #\d+)?\][^\n]*\n"
    mac = r"[^\n]*\tsmlald\t{}, {}, {}, {}\n"
    loads = load.format("r8", "sp") + load.format("r9", "sp") + load.format("sl", "ip") + load.format("fp", "lr")
    macs = (mac.format("r0", "r1", "r8", "sl") + mac.format("r2", "r3", "r8", "fp") + mac.format("r4", "r5", "r9", "sl")
            + mac.format("r6", "r7", "r9", "fp"))
    step = re.compile(loads + macs)
    assert len(step.findall(m4_listing)) == 64
    for routine in ("qk_pair_m4", "pv_pair_m4", "exp_block_m4"):
        assert f"<{routine}>:" in m4_listing


@needs_emulator
def test_modelled_cycles_per_mac_meet_the_issue_at_seq_128_dim_64(emulator):
    """mcu.sim.bench's head (seeded N(0,1) inputs, quantised per tensor) at Bc 64: at most 2.0 modelled cycles per
    multiply-accumulate (issue 15; 3.76 before the two-row path, reports/bench-mcu/kernel-blocking/), and with
    contract v2's row shift at most 5 % above v1's 1.74 (issue 31; reports/issue-31/)."""
    seq, dim = 128, 64
    q, k, v = AttentionProblem(seq=seq, dim=dim, causal=False).inputs()
    (qq, sq), (kq, sk), (vq, _) = q15.quantize(q), q15.quantize(k), q15.quantize(v)
    params = q15.Q15Params(seq, dim, False, 64, *q15.score_scale(sq, sk, dim))
    out, cycles, _ = emulator.run(params, qq[0, 0], kq[0, 0], vq[0, 0])
    assert out.same_bits(q15.attention_q15(qq[0, 0], kq[0, 0], vq[0, 0], params))
    assert cycles / (2 * seq * seq * dim) <= min(2.0, 1.74 * 1.05)


def test_stack_frames_stay_within_the_documented_bytes(tmp_path):
    """gcc's -fstack-usage with the Cortex-M4 build's own flags: the two-row path's frames are fixed (no VLA), about
    2 KB with both rows' accumulators (pair_one_pass) and the block's scores and probabilities (absorb_pair); only
    the one-row path, inlined into q15attn_rows, has a frame that grows with dim."""
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("arm-none-eabi-gcc is not installed (scripts/setup.sh installs Debian's gcc-arm-none-eabi)")
    dry = subprocess.run(["make", "-C", str(NATIVE), "-n", "-B", "build/attention_q15_m4.o"], capture_output=True,
                         text=True, timeout=60)
    command = next(line for line in dry.stdout.splitlines() if "arm-none-eabi-gcc" in line and " -c " in line)
    args = command.split()
    args[args.index("-o") + 1] = str(tmp_path / "kernel.o")
    done = subprocess.run(args + ["-fstack-usage"], cwd=NATIVE, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    usage = {}
    for line in (tmp_path / "kernel.su").read_text().splitlines():
        where, size, kind = line.split("\t")
        usage[where.rsplit(":", 1)[-1]] = (int(size), kind)
    pair_path = ("pair_one_pass", "q15attn_absorb_pair")
    assert all(usage[name][1] == "static" for name in pair_path)
    assert sum(usage[name][0] for name in pair_path) <= 2100
    assert [name for name, (_, kind) in usage.items() if kind != "static"] == ["q15attn_rows"]
