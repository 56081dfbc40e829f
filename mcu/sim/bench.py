"""Speed and modelled cycles of the board twin on one head, each output checked bit for bit against host/q15.py.

    python -m mcu.sim.bench [--seq 128] [--dim 64] [--bc 64] [--causal {0,1,both}] [--keys 64,128]

For each key block Bc: the wall time of the emulated call, emulated instructions per second, the modelled DWT
cycles, cycles per multiply-accumulate (2·N²·d MACs, N²·d when causal) next to SMLALD's 0.5-cycle bound, and the
latency those cycles mean at the board's 168 MHz. With --keys, the same head streamed (q15attn_stream, 32 query rows
at a time) in key chunks of each size, summed over the calls: what streaming costs the kernel beside one pass. Every
emulated output must equal host/q15.py's bit for bit: a mismatch ends the run with a TargetError naming the first
differing element, and no figure is printed for it. `--causal both` prints a table for each mask, each as
it is done (a failure in the causal head keeps the first).

Exit status: 0 measured, every output bit-exact; 1 an output differs from the model (or the emulator failed);
2 bad arguments (one `kbench: error:` line naming the value), or a head that does not fit the emulated SRAM
(the line says what the call allocates); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from host.cli_common import Parser, guard, int_list, integer
from host.errors import SpecError, TargetError
from host.problem import AttentionProblem
from host.q15 import BC, BC_MAX, DIM_MAX, SEQ_MAX, Q15Out, Q15Params, attention_q15, quantize, score_scale
from mcu.sim.q15emu import BOARD_CLOCK_HZ, Q15Emulator, RunStats


#: Query rows per streamed call: their state (528 B a row at d 64) fits the emulated SRAM beside the tensors.
STREAM_ROWS = 32


def streamed(emulator: Q15Emulator, params: Q15Params, q: np.ndarray, k: np.ndarray, v: np.ndarray,
             keys: int) -> tuple[Q15Out, int, RunStats]:
    """One head through q15attn_stream, STREAM_ROWS query rows at a time, each through every key chunk of `keys`
    keys up to its last: (output values and row shifts, DWT cycles summed, stats summed)."""
    values = (params.seq, params.dim, int(params.causal), params.bc, params.score_mult, params.score_shift)
    out, total, stats = Q15Out(np.empty_like(q), np.empty(q.shape[0], dtype=np.uint8)), 0, RunStats()
    for row0 in range(0, params.seq, STREAM_ROWS):
        rows = np.ascontiguousarray(q[row0:row0 + STREAM_ROWS], dtype="<i2")
        state = bytes(emulator.state_bytes(params.dim, rows.shape[0]))
        end = row0 + rows.shape[0] if params.causal else params.seq
        for key0 in range(0, end, keys):
            key1 = min(end, key0 + keys)
            chunk = [("h", rows.tobytes()), ("h", np.ascontiguousarray(k[key0:key1], dtype="<i2").tobytes()),
                     ("h", np.ascontiguousarray(v[key0:key1].T, dtype="<i2").tobytes()), ("h", bytes(rows.nbytes)),
                     ("B", bytes(rows.shape[0])), ("h", state)]
            o, shift, state, cycles, call = emulator.stream(values, chunk, row0, key0)
            total += cycles
            stats.wall_s += call.wall_s
            stats.instructions += call.instructions
        out.o[row0:row0 + rows.shape[0]] = np.frombuffer(o, dtype="<i2").reshape(rows.shape)
        out.shift[row0:row0 + rows.shape[0]] = np.frombuffer(shift, dtype=np.uint8)
    return out, total, stats


def bench(seq: int, dim: int, bcs: tuple[int, ...], causal: bool, keys: tuple[int, ...] = ()) -> str:
    problem = AttentionProblem(seq=seq, dim=dim, causal=causal)
    q, k, v = problem.inputs()
    (qq, sq), (kq, sk), (vq, _) = quantize(q), quantize(k), quantize(v)
    qh, kh, vh = qq[0, 0], kq[0, 0], vq[0, 0]  # (N, d) one head
    emulator = Q15Emulator()
    macs = 2 * seq * seq * dim // (2 if causal else 1)
    lines = [f"seq {seq}, dim {dim}, one head, {'causal' if causal else 'not causal'}, {macs:,} MACs; the cycle model "
             f"counted in {emulator.cpu.counting}",
             "| Bc | keys per call | wall s | emulated Minstr/s | DWT cycles | cycles/MAC | at 168 MHz ms | "
             "bit-exact |",
             "|---:|---|---:|---:|---:|---:|---:|---|"]
    for bc in bcs:
        params = Q15Params(seq, dim, causal, bc, *score_scale(sq, sk, dim))
        expected = attention_q15(qh, kh, vh, params)
        for chunk in (None, *keys):
            try:
                out, cycles, stats = (emulator.run(params, qh, kh, vh) if chunk is None
                                      else streamed(emulator, params, qh, kh, vh, chunk))
            except MemoryError as exc:  # the emulated SRAM's, raised by q15emu before the call runs
                raise SpecError(f"--seq {seq} --dim {dim}: the head does not fit the twin's emulated SRAM ({exc}); "
                                f"allowed: a smaller --seq or --dim ({need(emulator, seq, dim, chunk)})") from None
            label = f"all {seq} (one pass)" if chunk is None else f"{chunk} (streamed)"
            if not out.same_bits(expected):
                raise TargetError(f"the twin's Bc {bc}, keys {label} output is not bit-exact with host/q15.py: "
                                  f"{out.first_difference(expected)}", status="wrong")
            board_ms = cycles / BOARD_CLOCK_HZ * 1e3  # to three figures: a tiny head's 0.00477, not 0.0
            lines.append(f"| {bc} | {label} | {stats.wall_s:.2f} | {stats.instructions / stats.wall_s / 1e6:.2f} | "
                         f"{cycles:,} | {cycles / macs:.2f} | {board_ms:.3g} | yes |")
    return "\n".join(lines)


def need(emulator: Q15Emulator, seq: int, dim: int, keys: int | None) -> str:
    """What one call allocates in emulated SRAM for its buffers (beside its parameters and message), as a formula
    and in bytes: one pass (`keys` None), or one streamed call of STREAM_ROWS query rows and a chunk of `keys`."""
    if keys is None:
        return (f"one pass: Q, K, V^T and O take 8·seq·dim B and the row shifts a byte per row, 8·seq·dim + seq = "
                f"{8 * seq * dim + seq:,} B")
    rows = min(STREAM_ROWS, seq)
    state = emulator.state_bytes(dim, rows)
    return (f"streamed: {rows} query rows' Q and O take 4·rows·dim B, their shifts rows B and their state "
            f"state_bytes(dim, rows) = {state:,} B, a chunk's K and V^T 4·keys·dim B: 4·{rows}·{dim} + {rows} + "
            f"{state} + 4·{keys}·{dim} = {4 * rows * dim + rows + state + 4 * keys * dim:,} B")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m mcu.sim.bench", doc=__doc__)
    parser.add_argument("--seq", type=integer("seq", 1, 512), default=128,
                        help="sequence length N of the one head (default 128)")
    parser.add_argument("--dim", type=integer("dim", 1, DIM_MAX), default=64, help="head dimension d (default 64)")
    parser.add_argument("--bc", type=int_list("bc", 1, BC_MAX), default=(BC,), metavar="LIST",
                        help=f"key blocks Bc, comma-separated: one table row each (default {BC}, the contract's)")
    parser.add_argument("--causal", choices=("0", "1", "both"), default="0",
                        help="causal masking; both runs the head with each mask (default 0)")
    parser.add_argument("--keys", type=int_list("keys", 1, SEQ_MAX), default=(), metavar="LIST",
                        help="also stream the head in chunks of these many keys, each a multiple of every Bc and "
                             "below seq (default: one pass only)")
    return parser


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        args = build_parser().parse_args(argv)
        for keys in args.keys:
            if keys >= args.seq or any(keys % bc for bc in args.bc):
                raise SpecError(f"--keys {keys}: allowed: below --seq {args.seq} and a multiple of every --bc "
                                f"({','.join(map(str, args.bc))})")
        masks = (False, True) if args.causal == "both" else (args.causal == "1",)
        for n, causal in enumerate(masks):  # each table as it is done: a failure in the next keeps it
            print(("\n" if n else "") + bench(args.seq, args.dim, args.bc, causal, args.keys), flush=True)
        return 0

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
