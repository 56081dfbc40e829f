"""Speed and modelled cycles of the board twin on one head: `python -m mcu.sim.bench [--seq 128] [--dim 64]`.

For each key block Bc: the wall time of the emulated call, emulated instructions per second, the modelled DWT
cycles, cycles per multiply-accumulate (2·N²·d MACs, N²·d when causal) next to SMLALD's 0.5-cycle bound, and the
latency those cycles mean at the board's 168 MHz. Every emulated output must equal host/q15.py's bit for bit: a
mismatch ends the run with a TargetError naming the first differing element, and no figure is printed for it.
"""

from __future__ import annotations

import sys

import numpy as np

from host.cli_common import Parser, guard, int_list, integer
from host.errors import TargetError
from host.problem import AttentionProblem
from host.q15 import BC_MAX, DIM_MAX, Q15Params, attention_q15, quantize, score_scale
from mcu.sim.q15emu import BOARD_CLOCK_HZ, Q15Emulator


def bench(seq: int, dim: int, bcs: tuple[int, ...], causal: bool) -> str:
    problem = AttentionProblem(seq=seq, dim=dim, causal=causal)
    q, k, v = problem.inputs()
    (qq, sq), (kq, sk), (vq, _) = quantize(q), quantize(k), quantize(v)
    qh, kh, vh = qq[0, 0], kq[0, 0], vq[0, 0]  # (N, d) one head
    emulator = Q15Emulator()
    macs = 2 * seq * seq * dim // (2 if causal else 1)
    lines = [f"seq {seq}, dim {dim}, one head, {'causal' if causal else 'not causal'}, {macs:,} MACs",
             "| Bc | wall s | emulated Minstr/s | DWT cycles | cycles/MAC | at 168 MHz ms | bit-exact |",
             "|---:|---:|---:|---:|---:|---:|---|"]
    for bc in bcs:
        params = Q15Params(seq, dim, causal, bc, *score_scale(sq, sk, dim))
        out, cycles, stats = emulator.run(params, qh, kh, vh)
        expected = attention_q15(qh, kh, vh, params)
        if not np.array_equal(out, expected):
            at = tuple(int(i) for i in np.argwhere(out != expected)[0])
            raise TargetError(f"the twin's Bc {bc} output is not bit-exact with host/q15.py: O{at} = {out[at]}, "
                              f"model {expected[at]}", status="wrong")
        lines.append(f"| {bc} | {stats.wall_s:.2f} | {stats.instructions / stats.wall_s / 1e6:.2f} | {cycles:,} | "
                     f"{cycles / macs:.2f} | {cycles / BOARD_CLOCK_HZ * 1e3:.1f} | yes |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m mcu.sim.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=integer("seq", 1, 512), default=128)
    parser.add_argument("--dim", type=integer("dim", 1, DIM_MAX), default=64)
    parser.add_argument("--bc", type=int_list("bc", 1, BC_MAX), default=(16, 64))
    parser.add_argument("--causal", type=integer("causal", 0, 1), default=0)

    def body() -> int:
        args = parser.parse_args(argv)
        print(bench(args.seq, args.dim, args.bc, bool(args.causal)))
        return 0

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
