"""Protocol throughput and the link's share of a head, on a board or on a twin this tool starts.

    python -m mcu.link_bench [--serial PORT] [--seq 128] [--dim 32] [--windows 1,2,3,4,8] [--rounds 5] [--profile]

Without --serial it starts the board twin, deploys to it and measures over its pty. It prints, as Markdown:
LOAD payload throughput (bytes of tensor data per second of wall time, frames and retries included) for each window
of LOAD requests in flight, 1 being stop-and-wait, all in the same run and interleaved round by round (the two
processes share the machine, and runs drift), with each window's ratio to stop-and-wait and where its time goes:
the host's CPU per frame and, on a twin this tool started, the twin's; READ throughput (stop-and-wait); one head of
(seq, dim) split into wall time spent waiting for RUN (the board computing; on the twin, emulating) and everything
else (SETUP, LOAD, READ: the link), with the DWT cycles and what they mean at the board's clock; then the planner's
largest seq per dim for the heap the board announced. `--profile` adds the host's top functions (cProfile) over the
windowed LOADs of the link's default window. Where Linux accounts for it, the share of the machine's CPU time a
hypervisor took while the windows ran is printed under their table (a window overlaps two processes; a vCPU taken
away undoes that, so over 5 % the ratios describe the machine more than the link).

Outputs are checked, not assumed: the bytes READ back must be those LOAD wrote, for every window, and the head (the
seeded problem's one head, quantised as every Q15 target gets it) must equal host/q15.py bit for bit and stay within
the contract's error bound (host/verdict.check_q15). A mismatch ends the run with a TargetError that names what
differed.

On stderr, a line per step (starting the twin, deploying, each window's round, the head), flushed at once, with the
time since the run began: `kbench: link_bench round 2/5: window 4 measured, 812 kB/s (6.3 s)`.

Exit status: 0 measured and checked; 1 a check, the board, the link or the twin failed (one `kbench:` line);
2 bad arguments only (one `kbench: error:` line naming the value); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from host.cli_common import Parser, Stages, guard, int_list, integer
from host.errors import TargetError
from host.problem import AttentionProblem
from host.q15 import BC, DIM_MAX, error_bound, prepare
from host.reference import golden
from host.verdict import check_q15
from mcu import messages as m
from mcu.planner import plan

TRANSFER_BYTES = 64 * 1024
PROFILE_LINES = 8  # functions listed by --profile
STEAL_FIELD = 7  # steal's place among /proc/stat's cpu times (user, nice, system, idle, iowait, irq, softirq, steal)
STOLEN_WARN = 0.05  # above this share of stolen CPU time the ratios say more about the machine than the link


class CpuClock:
    """CPU seconds used so far by a process (all its threads), from Linux's /proc/PID/task/*/schedstat (ns);
    `reading()` is None where that cannot be read (another OS, a process gone)."""

    def __init__(self, pid: int):
        self.tasks = Path(f"/proc/{pid}/task")

    def reading(self) -> float | None:
        try:
            return sum(int((task / "schedstat").read_text().split()[0]) for task in self.tasks.iterdir()) / 1e9
        except (OSError, ValueError, IndexError):
            return None


def stolen_share(before: Sequence[int] | None, after: Sequence[int] | None) -> float | None:
    """The share of the machine's CPU time the hypervisor took (steal) between two `cpu_ticks()` readings; None
    where either is missing or no time passed."""
    if before is None or after is None:
        return None
    total = sum(after) - sum(before)
    return (after[STEAL_FIELD] - before[STEAL_FIELD]) / total if total > 0 else None


def cpu_ticks(stat: Path = Path("/proc/stat")) -> tuple[int, ...] | None:
    """The machine's CPU time so far, all CPUs, in clock ticks by state (user, nice, system, idle, iowait, irq,
    softirq, steal: Linux's /proc/stat `cpu` line); None where that cannot be read (another OS, a kernel without
    steal accounting)."""
    try:
        fields = stat.read_text().split("\n", 1)[0].split()
        if fields[0] != "cpu" or len(fields) <= STEAL_FIELD + 1:
            return None
        return tuple(int(value) for value in fields[1:STEAL_FIELD + 2])
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class Transfer:
    """What moving tensor bytes with LOAD cost: wall and CPU seconds (the twin's None where unknown), frames."""

    nbytes: int = 0
    frames: int = 0
    retries: int = 0
    wall: float = 0.0
    host_cpu: float = 0.0
    twin_cpu: float | None = 0.0

    def add(self, other: "Transfer") -> None:
        self.nbytes += other.nbytes
        self.frames += other.frames
        self.retries += other.retries
        self.wall += other.wall
        self.host_cpu += other.host_cpu
        self.twin_cpu = None if self.twin_cpu is None or other.twin_cpu is None else self.twin_cpu + other.twin_cpu


def setup_k(link, nbytes: int) -> None:
    """A SETUP whose K buffer holds `nbytes` (dim 32, one query row)."""
    setup = m.SETUP.pack(nbytes // 64, 32, 0, 32, 20000, 20, 1, nbytes // 64)
    m.check_status(m.Kind.SETUP, link.request(m.Kind.SETUP, setup))


def load_k(link, data: bytes, window: int, twin: CpuClock | None) -> Transfer:
    """LOAD `data` into K with `window` requests in flight; what it cost."""
    step = link.hello.max_data
    payloads = [m.LOAD.pack(m.Tensor.K, offset) + data[offset:offset + step] for offset in range(0, len(data), step)]
    frames, retries = link.stats.frames, link.stats.retries
    twin_before = twin.reading() if twin else None
    cpu, start = time.process_time(), time.perf_counter()
    for reply in link.requests(m.Kind.LOAD, payloads, window=window):
        m.check_status(m.Kind.LOAD, reply)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    twin_after = twin.reading() if twin else None
    twin_cpu = None if twin_before is None or twin_after is None else twin_after - twin_before
    return Transfer(len(data), link.stats.frames - frames, link.stats.retries - retries, wall, cpu, twin_cpu)


def read_k(link, nbytes: int) -> tuple[bytes, float]:
    """READ K's first `nbytes` back, stop-and-wait; the bytes and the wall seconds."""
    step = link.hello.max_data
    back = bytearray()
    start = time.perf_counter()
    for offset in range(0, nbytes, step):
        count = min(step, nbytes - offset)
        back += m.check_status(m.Kind.READ, link.request(m.Kind.READ, m.READ.pack(m.Tensor.K, offset, count)))
    return bytes(back), time.perf_counter() - start


def window_sweep(link, nbytes: int, windows: Sequence[int], rounds: int, twin: CpuClock | None,
                 stage: Callable[[str], object] = lambda text: None) -> tuple[dict[int, Transfer], dict[int, float],
                                                                           float]:
    """Per window: the summed transfers, the median throughput over `rounds` (bytes/s); and READ's bytes/s.
    Each round loads fresh random bytes once per window, in an order rotated from round to round, and reads them
    back (the READ must return what the LOAD wrote); `stage(text)` after each window's round."""
    setup_k(link, nbytes)
    rng = np.random.default_rng(0)
    totals = {w: Transfer() for w in windows}
    rates: dict[int, list[float]] = {w: [] for w in windows}
    read_rates = []
    for r in range(rounds):
        order = list(windows[r % len(windows):]) + list(windows[:r % len(windows)])
        for window in order:
            data = rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes()
            done = load_k(link, data, window, twin)
            totals[window].add(done)
            rates[window].append(done.nbytes / done.wall)
            back, seconds = read_k(link, nbytes)
            check_round_trip(data, back)
            read_rates.append(nbytes / seconds)
            stage(f"round {r + 1}/{rounds}: window {window} measured, {done.nbytes / done.wall / 1e3:.0f} kB/s")
    return totals, {w: statistics.median(rates[w]) for w in windows}, statistics.median(read_rates)


def profile_load(link, nbytes: int, window: int) -> str:
    """The host's top functions by own time (cProfile) while LOAD moves `nbytes` with `window` in flight, after a
    line giving the share of the host's CRC-16 (mcu.frame.crc16, requests and replies) in the profiled time."""
    from mcu import frame

    setup_k(link, nbytes)
    data = np.random.default_rng(1).integers(0, 256, nbytes, dtype=np.uint8).tobytes()
    profiler = cProfile.Profile()
    profiler.enable()
    load_k(link, data, window, None)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    crc = sum(row[3] for (path, _, name), row in stats.stats.items()
              if name == frame.crc16.__name__ and Path(path) == Path(frame.__file__))
    out.write(f"mcu.frame.crc16: {crc:.3f} s of {stats.total_tt:.3f} s profiled ({crc / stats.total_tt:.0%}; the "
              f"profiler inflates Python-level work, so this share is an upper bound)\n")
    stats.sort_stats("tottime").print_stats(PROFILE_LINES)
    return out.getvalue()


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
    quantized = prepare(problem, q, k, v)  # at the contract's Bc, as every MCU row
    stats = link.stats
    before_s, before_in, before_out = dict(stats.seconds), stats.bytes_in, stats.bytes_out
    start = time.perf_counter()
    head = run_head(Session(link, link.port, "bench"), quantized.params, *quantized.head(0, 0), repeats=1)
    wall = time.perf_counter() - start
    out = type(head.out)(head.out.o[None, None], head.out.shift[None, None])  # values (1, 1, N, d), shifts (1, 1, N)
    verdict = check_q15(out, quantized.expected(), quantized.dequantize(out), golden(problem),
                        error_bound(q, k, v, quantized))
    if not verdict.passed:
        raise TargetError(f"the board's head (seq {seq}, dim {dim}): {verdict.message}", status=verdict.status)
    spent = {kind: stats.seconds.get(kind, 0.0) - before_s.get(kind, 0.0) for kind in stats.seconds}
    return {"wall": wall, "run": spent.get("RUN", 0.0), "cycles": int(head.cycles[0]),
            "bytes": stats.bytes_in - before_in + stats.bytes_out - before_out}


def per_frame_us(seconds: float | None, frames: int) -> str:
    return "n/a" if seconds is None else f"{seconds / frames * 1e6:.0f}"


def _parser() -> Parser:
    from mcu.link import LOAD_WINDOW, WINDOW_MAX

    parser = Parser(prog="python -m mcu.link_bench", doc=__doc__)
    parser.add_argument("--serial", metavar="PORT", default=None,
                        help="a deployed board's serial port (default: start the twin and deploy to it)")
    parser.add_argument("--seq", type=integer("seq", 1, 4096), default=128,
                        help="sequence length N of the timed head (default 128)")
    parser.add_argument("--dim", type=integer("dim", 1, DIM_MAX), default=32,
                        help="head dimension d of the timed head (default 32)")
    parser.add_argument("--windows", type=int_list("windows", 1, WINDOW_MAX), default=(1, 2, 3, 4, 8),
                        help="LOAD requests in flight to measure; 1 (stop-and-wait) and the link's default "
                             f"({LOAD_WINDOW}) are always included (default 1,2,3,4,8)")
    parser.add_argument("--rounds", type=integer("rounds", 1, 100), default=5,
                        help="transfers per window, interleaved with the other windows' (default 5)")
    parser.add_argument("--profile", action="store_true",
                        help=f"also profile the host (cProfile) over LOADs with {LOAD_WINDOW} in flight")
    return parser


def measure(args: argparse.Namespace, windows: tuple[int, ...],
            stage: Callable[[str], object] = lambda text: None) -> dict:
    """Every figure of one bench: on the board at --serial, or on a twin started (and deployed to) here;
    `stage(text)` as each step begins or a window's round ends."""
    from mcu.link import LOAD_WINDOW, BoardLink
    from mcu.twin_process import start_twin

    with contextlib.ExitStack() as stack:
        port, twin = args.serial, None
        if port is None:
            from mcu.deploy import deploy

            stage("starting the twin")
            started = stack.enter_context(start_twin())
            port, twin = started.port, CpuClock(started.process.pid)
            stage(f"deploying to the twin at {port}")
            deploy(port, 115200, say=lambda line: None)
        stage(f"connecting to {port}")
        link = stack.enter_context(BoardLink(port))
        hello = link.hello
        # the head must fit this board before minutes of windows are measured (DoesNotFit names what it needs)
        plan(args.seq, args.dim, hello.heap_free, hello.reserve, BC, largest=hello.largest_block)
        room = (hello.heap_free - hello.reserve) // 2 - 4096  # K and V^T are allocated; K carries the data
        nbytes = min(TRANSFER_BYTES, room // 64 * 64)
        stage(f"LOAD of {nbytes} bytes: {args.rounds} round(s) of windows {', '.join(map(str, windows))}")
        ticks = cpu_ticks()
        totals, rates, read_bps = window_sweep(link, nbytes, windows, args.rounds, twin, stage)
        stolen = stolen_share(ticks, cpu_ticks())
        if args.profile:
            stage(f"profiling LOADs with {LOAD_WINDOW} in flight")
        profile = profile_load(link, nbytes, LOAD_WINDOW) if args.profile else ""
        stage(f"the head: seq {args.seq} dim {args.dim}")
        split = head_split(link, args.seq, args.dim)
        stage("the head measured and checked")
    return {"hello": hello, "nbytes": nbytes, "totals": totals, "rates": rates, "read_bps": read_bps,
            "stolen": stolen, "profile": profile, "split": split}


def print_windows(figures: dict, windows: tuple[int, ...], rounds: int) -> None:
    """The LOAD table: throughput and per-frame costs at each window."""
    from mcu.link import LOAD_WINDOW

    hello, nbytes, totals, rates = figures["hello"], figures["nbytes"], figures["totals"], figures["rates"]
    print(f"board: {hello.machine}, {hello.clock_hz / 1e6:g} MHz, heap free {hello.heap_free} B "
          f"(largest block {hello.largest_block} B), "
          f"reserve {hello.reserve} B, {hello.max_data} B per frame, LOAD window {hello.window} "
          f"(the host's default: {LOAD_WINDOW})")
    print(f"\nLOAD of {nbytes} tensor bytes ({-(-nbytes // hello.max_data)} frames), {rounds} rounds per "
          f"window, interleaved; throughput is the median round, the rest sums every round.")
    print("\n| LOAD requests in flight | throughput | vs stop-and-wait | wall per frame | host CPU per frame | "
          "twin CPU per frame | retries |\n|---|---|---|---|---|---|---|")
    for window in windows:
        done = totals[window]
        shown = min(window, hello.window)
        print(f"| {window}{'' if shown == window else f' (server allows {shown})'}"
              f"{' (stop-and-wait)' if window == 1 else ''} | {rates[window] / 1e3:.0f} kB/s | "
              f"{rates[window] / rates[1]:.2f}x | {per_frame_us(done.wall, done.frames)} µs | "
              f"{per_frame_us(done.host_cpu, done.frames)} µs | {per_frame_us(done.twin_cpu, done.frames)}"
              f"{' µs' if done.twin_cpu is not None else ''} | {done.retries} |")
    best = max(windows, key=lambda w: rates[w])
    print(f"\nwindowed / stop-and-wait LOAD throughput: {rates[LOAD_WINDOW] / rates[1]:.2f}x at the link's "
          f"default window ({LOAD_WINDOW}); the best measured: {rates[best] / rates[1]:.2f}x at {best}")
    print(stolen_line(figures["stolen"]))


def stolen_line(stolen: float | None) -> str:
    """What the machine's stolen CPU time during the windows means for the ratios above."""
    if stolen is None:
        return "CPU time stolen by a hypervisor during the windows: not known here (no /proc/stat steal figure)"
    line = f"CPU time stolen by a hypervisor during the windows: {stolen:.1%} of this machine's"
    if stolen > STOLEN_WARN:
        line += (f", over {STOLEN_WARN:.0%}: a window overlaps the host's and the board's work, and a vCPU taken "
                 "away undoes that, so these ratios understate the window; measure again on a quieter machine")
    return line


def print_head(figures: dict, seq: int, dim: int) -> None:
    """READ throughput, one head's wall time split into compute and link, and the planner's largest heads."""
    from mcu.link import LOAD_WINDOW
    from mcu.planner import largest_seq

    hello, split = figures["hello"], figures["split"]
    link_s = split["wall"] - split["run"]
    board_ms = split["cycles"] / hello.clock_hz * 1e3
    print("\n| measure | value |\n|---|---|")
    print(f"| READ throughput (tensor bytes/s, stop-and-wait) | {figures['read_bps'] / 1e3:.0f} kB/s |")
    print(f"| head seq {seq} dim {dim}: wall | {split['wall'] * 1e3:.0f} ms |")
    print(f"| ... waiting for RUN (compute) | {split['run'] * 1e3:.0f} ms ({split['run'] / split['wall']:.0%}) |")
    print(f"| ... link (SETUP, LOAD, READ) | {link_s * 1e3:.0f} ms ({link_s / split['wall']:.0%}), "
          f"{split['bytes']} bytes on the wire |")
    print(f"| DWT cycles of the head | {split['cycles']} = {board_ms:.1f} ms at {hello.clock_hz / 1e6:g} MHz |")
    print(f"| same bytes over a 115200-baud UART (10 bits/byte) | {split['bytes'] * 10 / 115200 * 1e3:.0f} ms |")
    print("\n| dim | largest seq (planner, this heap) |\n|---|---|")
    for d in (32, 64):
        print(f"| {d} | {largest_seq(d, hello.heap_free, hello.reserve, hello.largest_block)} |")
    if figures["profile"]:
        print(f"\nhost profile (cProfile, own time) of LOADs with {LOAD_WINDOW} in flight:\n```\n"
              f"{figures['profile'].strip()}\n```")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()

    def body() -> int:
        from mcu.link import LOAD_WINDOW

        args = parser.parse_args(argv)
        windows = tuple(sorted({1, LOAD_WINDOW, *args.windows}))
        figures = measure(args, windows, Stages("link_bench"))
        print_windows(figures, windows, args.rounds)
        print_head(figures, args.seq, args.dim)
        return 0

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
