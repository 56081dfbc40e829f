"""Protocol throughput and the link's share of a head: `python -m mcu.link_bench [--port PORT] [--seq 128] [--dim 32]`.

Without --port it starts the board twin, deploys to it and measures over its pty. It prints, as Markdown:
LOAD and READ payload throughput (bytes of tensor data per second of wall time, frames and retries included), and
one head of (seq, dim) split into wall time spent waiting for RUN (the board computing; on the twin, emulating)
and everything else (SETUP, LOAD, READ: the link), with the DWT cycles and what they mean at the board's clock;
then the planner's largest seq per dim for the heap the board announced.

Outputs are checked, not assumed: the bytes READ back must be those LOAD wrote, and the head (the seeded problem's
one head, quantised as every Q15 target gets it) must equal host/q15.py bit for bit and stay within the contract's
error bound (host/verdict.check_q15). A mismatch ends the run with a TargetError that names what differed.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Sequence

import numpy as np

from host.cli_common import Parser, guard, integer
from host.errors import TargetError
from host.problem import AttentionProblem
from host.q15 import DIM_MAX, error_bound, prepare
from host.reference import golden
from host.verdict import check_q15
from mcu import messages as m

TRANSFER_BYTES = 64 * 1024
HEAD_BC = 32  # the head's key block: the frame server's default


def throughput(link, nbytes: int) -> tuple[float, float]:
    """(LOAD, READ) tensor bytes per second, moving `nbytes` through a K buffer that holds them."""
    dim = 32
    seq = nbytes // (2 * dim)
    m.check_status(m.Kind.SETUP, link.request(m.Kind.SETUP, m.SETUP.pack(seq, dim, 0, 32, 20000, 20, 1)))
    data = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8).tobytes()
    step = link.hello.max_data
    start = time.perf_counter()
    for offset in range(0, nbytes, step):
        m.check_status(m.Kind.LOAD, link.request(m.Kind.LOAD, m.LOAD.pack(m.Tensor.K, offset) + data[offset:offset + step]))
    load_s = time.perf_counter() - start
    back = bytearray()
    start = time.perf_counter()
    for offset in range(0, nbytes, step):
        count = min(step, nbytes - offset)
        back += m.check_status(m.Kind.READ, link.request(m.Kind.READ, m.READ.pack(m.Tensor.K, offset, count)))
    read_s = time.perf_counter() - start
    check_round_trip(data, bytes(back))
    return nbytes / load_s, nbytes / read_s


def check_round_trip(wrote: bytes, read: bytes) -> None:
    """TargetError naming the first differing byte when READ did not return what LOAD wrote."""
    if read == wrote:
        return
    if len(read) != len(wrote):
        raise TargetError(f"READ returned {len(read)} bytes of K; LOAD wrote {len(wrote)}", status="wrong")
    at = next(i for i, (a, b) in enumerate(zip(wrote, read)) if a != b)
    differ = sum(a != b for a, b in zip(wrote, read))
    raise TargetError(f"READ returned other bytes than LOAD wrote: {differ} of {len(wrote)} differ, the first at "
                      f"offset {at}: wrote 0x{wrote[at]:02x}, read 0x{read[at]:02x}", status="wrong")


def head_split(link, seq: int, dim: int) -> dict:
    """Wall seconds of one head in the link and in RUN, the head's DWT cycles, and the bytes moved."""
    from mcu.head import Session, run_head

    problem = AttentionProblem(seq=seq, dim=dim)  # one head, not causal
    q, k, v = problem.inputs()
    quantized = prepare(problem, q, k, v, HEAD_BC)
    stats = link.stats
    before_s, before_in, before_out = dict(stats.seconds), stats.bytes_in, stats.bytes_out
    start = time.perf_counter()
    head = run_head(Session(link, link.port, "bench"), quantized.params, *quantized.head(0, 0), repeats=1)
    wall = time.perf_counter() - start
    out = head.out[None, None]  # (1, 1, N, d)
    verdict = check_q15(out, quantized.expected(), quantized.dequantize(out), golden(problem),
                        error_bound(q, k, v, quantized))
    if not verdict.passed:
        raise TargetError(f"the board's head (seq {seq}, dim {dim}): {verdict.message}", status=verdict.status)
    spent = {kind: stats.seconds.get(kind, 0.0) - before_s.get(kind, 0.0) for kind in stats.seconds}
    return {"wall": wall, "run": spent.get("RUN", 0.0), "cycles": int(head.cycles[0]),
            "bytes": stats.bytes_in - before_in + stats.bytes_out - before_out}


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog="python -m mcu.link_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--port", default=None, help="a deployed board (default: start the twin)")
    parser.add_argument("--seq", type=integer("seq", 1, 4096), default=128)
    parser.add_argument("--dim", type=integer("dim", 1, DIM_MAX), default=32)

    def body() -> int:
        from mcu.link import BoardLink
        from mcu.planner import largest_seq
        from mcu.twin_process import start_twin

        args = parser.parse_args(argv)
        with contextlib.ExitStack() as stack:
            port = args.port
            if port is None:
                from mcu.deploy import deploy

                port = stack.enter_context(start_twin()).port
                deploy(port, 115200, say=lambda line: None)
            link = stack.enter_context(BoardLink(port))
            hello = link.hello
            room = (hello.heap_free - hello.reserve) // 2 - 4096  # K and V^T are allocated; K carries the data
            load_bps, read_bps = throughput(link, min(TRANSFER_BYTES, room // 64 * 64))
            split = head_split(link, args.seq, args.dim)
        link_s = split["wall"] - split["run"]
        board_ms = split["cycles"] / hello.clock_hz * 1e3
        print(f"board: {hello.machine}, {hello.clock_hz / 1e6:g} MHz, heap free {hello.heap_free} B, "
              f"reserve {hello.reserve} B, {hello.max_data} B per frame")
        print("\n| measure | value |\n|---|---|")
        print(f"| LOAD throughput (tensor bytes/s) | {load_bps / 1e3:.0f} kB/s |")
        print(f"| READ throughput (tensor bytes/s) | {read_bps / 1e3:.0f} kB/s |")
        print(f"| head seq {args.seq} dim {args.dim}: wall | {split['wall'] * 1e3:.0f} ms |")
        print(f"| ... waiting for RUN (compute) | {split['run'] * 1e3:.0f} ms ({split['run'] / split['wall']:.0%}) |")
        print(f"| ... link (SETUP, LOAD, READ) | {link_s * 1e3:.0f} ms ({link_s / split['wall']:.0%}), "
              f"{split['bytes']} bytes on the wire |")
        print(f"| DWT cycles of the head | {split['cycles']} = {board_ms:.1f} ms at {hello.clock_hz / 1e6:g} MHz |")
        print(f"| same bytes over a 115200-baud UART (10 bits/byte) | {split['bytes'] * 10 / 115200 * 1e3:.0f} ms |")
        print("\n| dim | largest seq (planner, this heap) |\n|---|---|")
        for dim in (32, 64):
            print(f"| {dim} | {largest_seq(dim, hello.heap_free, hello.reserve)} |")
        return 0

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
