"""The MCU target: the Q15 kernel on an STM32F407 running MicroPython (`--serial PORT`) or on its twin (`--sim`).

Its options (`add_options`): `--serial PORT [--baud N]`, or `--sim [--sim-faults SPEC]`.
`open_session(settings)` connects for a whole sweep: with `sim` it starts `python -m mcu.sim` as a child (a pipe
on its stdin, so it ends with the host), deploys the board code to it with mcu.deploy and connects to its pty; with
`serial` it connects to the board (deploy first with `python -m mcu.deploy --port PORT`). `run` quantises the
problem per tensor with host/q15.py's `prepare` (as every Q15 target does), and for every head: SETUP with the planner's
chunking, LOAD K and V^T, then per chunk of query rows LOAD Q, RUN (warm-up + timed repeats on the board) and READ
O. A session lost mid-head (the board reset) is restarted and the head redone, so every row is measured once and
whole. The row: latency = DWT cycles / clock (all heads and chunks of one repeat), the verdict (bit-exact with the
model and within the contract's error bound: host/verdict.py), max_abs and rel_l2 of the dequantised output against
the float64 golden, temperature and VDDA after the run (measured by a board's ADC, modelled by the twin), and the
Cortex-M4's datasheet roof (SMLALD: 2 MACs per cycle; SRAM: 4 bytes per cycle) for the roofline.
"""

from __future__ import annotations

import argparse
import contextlib
import select
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from host import q15
from host.errors import LinkError, SpecError, TargetError, UnavailableError
from host.problem import AttentionProblem
from host.results import Result
from host.target_api import Inputs, RunOptions
from host.timing import summarize
from host.verdict import check_q15

KERNELS = {"q15": "q15"}
#: warm-up and timed repeats when the sweep does not set them: DWT cycles barely vary, and the twin's are exact.
REPEATS = (0, 1)
BC = 32  # keys per online-softmax block on the board
HEAD_ATTEMPTS = 5  # sessions tried per head before the row fails
TWIN_START_S = 60  # how long the twin may take to print its pty
SECONDS_PER_MAC = 2e-6  # RUN's reply timeout per multiply-accumulate: ~5x the twin's rate, ~70x a real F407's
DEFAULT_BAUD = 115200
#: The Cortex-M4's roof (ARM Cortex-M4 TRM): SMLALD retires two 16×16 multiply-accumulates per cycle (4 operations
#: in the FLOP convention), and the core moves at most one 32-bit word per cycle to or from SRAM.
M4_OPS_PER_CYCLE = 4
M4_SRAM_BYTES_PER_CYCLE = 4


@dataclass(frozen=True)
class Settings:
    """Where the MCU target runs: a board on a serial port, or the twin (optionally with line faults)."""

    serial: str | None = None
    baud: int = DEFAULT_BAUD
    sim: bool = False
    sim_faults: str = ""

    def __post_init__(self) -> None:
        if self.serial and self.sim:
            raise SpecError("--serial and --sim both given; allowed: one of them")
        if self.sim_faults and not self.sim:
            raise SpecError(f"--sim-faults {self.sim_faults!r} needs --sim (faults are injected by the twin)")


def add_options(group: argparse._ArgumentGroup) -> None:
    from host.cli_common import integer

    group.add_argument("--serial", metavar="PORT", default=None,
                       help="a board, e.g. /dev/ttyACM0 (deploy first: python -m mcu.deploy --port PORT)")
    group.add_argument("--baud", type=integer("baud", 1200, 12_000_000), default=DEFAULT_BAUD,
                       help=f"the board's baud rate, ignored by USB CDC (default {DEFAULT_BAUD})")
    group.add_argument("--sim", action="store_true",
                       help="the board twin (python -m mcu.sim), started and deployed by the sweep")
    group.add_argument("--sim-faults", metavar="SPEC", default="",
                       help="line faults for the twin, e.g. drop=0.001,flip=0.001,delay=0.01,reset=200 (docs/twin.md)")


def settings(args: argparse.Namespace) -> Settings:
    if args.sim_faults:
        from mcu.sim.faults import FaultSpec

        FaultSpec.parse(args.sim_faults, "--sim-faults")  # a bad spec is the user's error, reported before anything
    return Settings(serial=args.serial, baud=args.baud, sim=args.sim, sim_faults=args.sim_faults)


def available(settings: Settings = Settings()) -> tuple[bool, str]:
    try:
        import mpremote  # noqa: F401
        import serial  # noqa: F401
    except ImportError as exc:
        return False, f"{exc.name} is not installed (pip install -e '.[mcu]')"
    if not settings.serial and not settings.sim:
        return False, "no board: pass --serial PORT (a board) or --sim (the board twin)"
    return True, ""


def device(settings: Settings | None = None, session: "Session | None" = None) -> str:
    if session is not None:
        return session.description
    return "STM32F407 (not connected)"


@dataclass
class Session:
    """A connected board (or twin) for one sweep."""

    link: object  # mcu.link.BoardLink
    port: str
    description: str
    twin: bool = False
    resources: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)


@contextlib.contextmanager
def open_session(settings: Settings):
    """Yield a Session on the board or twin the settings name; UnavailableError when none was named or the one
    named cannot be reached."""
    from mcu.link import BoardLink

    serial_port, sim = settings.serial, settings.sim
    if not serial_port and not sim:
        raise UnavailableError("no board: pass --serial PORT (a board) or --sim (the board twin)")
    with contextlib.ExitStack() as stack:
        if sim:
            port = stack.enter_context(start_twin(settings.sim_faults))
            from mcu.deploy import deploy

            deploy(port, 115200, say=lambda line: None)
        else:
            port = serial_port
        link = BoardLink(port, settings.baud)
        try:
            hello = link.open()
        except LinkError as exc:
            raise UnavailableError(f"{'the twin' if sim else port}: {exc}") from None
        stack.callback(link.close)
        kind = "twin" if sim else "board"
        description = f"{hello.machine} ({kind}, {hello.clock_hz / 1e6:g} MHz, heap {hello.heap_total} B)"
        if not hello.module_present:
            raise UnavailableError(f"{port}: q15attn is not on the {kind} (deploy q15attn.mpy with python -m "
                                   "mcu.deploy, or bake it into the firmware)")
        yield Session(link, port, description, twin=bool(sim))


@contextlib.contextmanager
def start_twin(faults: str = ""):
    """Start the board twin as a child process; yield its pty path; stop it at exit (and with the host)."""
    from mcu.sim.faults import FaultSpec

    FaultSpec.parse(faults, "--sim-faults")  # a bad spec is the user's error, reported before anything starts
    with tempfile.TemporaryDirectory(prefix="kbench-twin-") as root:
        process = subprocess.Popen([sys.executable, "-m", "mcu.sim", "--root", root, "--exit-on-stdin-eof",
                                    "--faults", faults],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   cwd=Path(__file__).resolve().parent.parent)
        try:
            ready, _, _ = select.select([process.stdout], [], [], TWIN_START_S)
            line = process.stdout.readline().decode().strip() if ready else ""
            if not line.startswith("/dev/"):
                process.kill()
                process.wait(timeout=10)
                raise UnavailableError(f"the twin did not start within {TWIN_START_S} s: "
                                       f"{process.stderr.read().decode()[-400:]}")
            yield line
        finally:
            process.stdin.close()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@dataclass(frozen=True)
class HeadResult:
    out: np.ndarray  # (seq, dim) int16
    cycles: np.ndarray  # (repeats,) summed over chunks
    temp_c: float | None
    vdda_v: float | None
    rows: int  # query rows per chunk the planner chose for this head


def run_head(session: Session, params: q15.Q15Params, q: np.ndarray, k: np.ndarray, v: np.ndarray,
             repeats: int) -> HeadResult:
    """One head on the board: q, k, v (seq, dim) int16. Restarts the session and redoes the head if it is lost."""
    from mcu.link import ServerMissing, SessionLost

    failure: Exception | None = None
    for attempt in range(HEAD_ATTEMPTS):
        try:
            if attempt or session.link.hello is None:  # lost now, or by an earlier row
                session.link.restart()
            return _head_once(session.link, params, q, k, v, repeats)
        except ServerMissing:
            raise
        except (SessionLost, LinkError) as exc:
            failure = exc
    raise LinkError(f"head failed in {HEAD_ATTEMPTS} sessions; last: {failure}")


def _head_once(link, params: q15.Q15Params, q: np.ndarray, k: np.ndarray, v: np.ndarray,
               repeats: int) -> HeadResult:
    from mcu import messages as m
    from mcu.planner import plan

    hello = link.hello
    seq, dim = params.seq, params.dim
    layout = plan(seq, dim, hello.heap_free, hello.reserve)
    m.check_status(m.Kind.SETUP, link.request(m.Kind.SETUP, m.SETUP.pack(
        seq, dim, int(params.causal), params.bc, params.score_mult, params.score_shift, layout.rows)))
    _load(link, m.Tensor.K, k.astype("<i2").tobytes(), hello.max_data)
    _load(link, m.Tensor.VT, np.ascontiguousarray(v.T).astype("<i2").tobytes(), hello.max_data)
    out = np.empty((seq, dim), dtype=np.int16)
    cycles = np.zeros(repeats, dtype=np.int64)
    reply = None
    for row0, nrows in layout.row_blocks():
        _load(link, m.Tensor.Q, q[row0:row0 + nrows].astype("<i2").tobytes(), hello.max_data)
        timeout = link.timeouts.reply + repeats * nrows * seq * dim * 2 * SECONDS_PER_MAC
        reply = m.RunReply.parse(link.request(m.Kind.RUN, m.RUN.pack(row0, nrows, repeats), timeout=timeout))
        if any(c is None for c in reply.cycles):
            raise TargetError("the board's q15attn is not timed (not a Cortex-M4 build): no DWT cycles")
        cycles += np.asarray(reply.cycles, dtype=np.int64)
        data = bytearray()
        total = 2 * nrows * dim
        for offset in range(0, total, hello.max_data):
            count = min(hello.max_data, total - offset)
            data += m.check_status(m.Kind.READ, link.request(m.Kind.READ, m.READ.pack(m.Tensor.O, offset, count)))
        out[row0:row0 + nrows] = np.frombuffer(bytes(data), dtype="<i2").reshape(nrows, dim)
    return HeadResult(out, cycles, reply.temp_c, reply.vdda_v, layout.rows)


def _load(link, tensor, data: bytes, max_data: int) -> None:
    from mcu import messages as m

    for offset in range(0, len(data), max_data):
        m.check_status(m.Kind.LOAD, link.request(m.Kind.LOAD, m.LOAD.pack(tensor, offset)
                                                 + data[offset:offset + max_data]))


def run(problem: AttentionProblem, inputs: Inputs, options: RunOptions) -> list[Result]:
    """Measure `problem` on the board of options.session (a Session); one row with its verdict."""
    session: Session | None = options.session
    if session is None:
        raise UnavailableError("the MCU target has no session (host.compare opens one with --serial or --sim)")
    quantized = q15.prepare(problem, inputs.q, inputs.k, inputs.v, BC)
    repeats = options.warmup + options.iters
    if repeats > 255:
        raise SpecError(f"warmup + iters = {repeats} is out of range for the MCU; allowed: 1..255")
    stats = session.link.stats
    before = (stats.retries, stats.restarts, stats.rejected)
    out = np.empty(problem.shape, dtype=np.int16)  # (B, H, N, d) Q15 in V's scale
    cycles = np.zeros(repeats, dtype=np.int64)
    head = None
    for b in range(problem.batch):
        for h in range(problem.heads):
            head = run_head(session, quantized.params, *quantized.head(b, h), repeats)
            out[b, h] = head.out
            cycles += head.cycles
    verdict = check_q15(out, quantized.expected(), quantized.dequantize(out), inputs.golden,
                        q15.error_bound(inputs.q, inputs.k, inputs.v, quantized))
    clock = session.link.hello.clock_hz
    timed = cycles[options.warmup:]
    timing = summarize((timed / clock * 1e3).tolist())
    seconds = timing.p50_ms / 1e3
    return [options.context.result(
        problem, target="mcu", kernel=options.kernel, device=session.description, br=head.rows, bc=BC,
        warmup=options.warmup, **timing.as_fields(), gflops=problem.flops() / seconds / 1e9 if seconds else None,
        model_bytes=problem.min_bytes(), gbps=problem.min_bytes() / seconds / 1e9 if seconds else None,
        peak_gflops=M4_OPS_PER_CYCLE * clock / 1e9, peak_gbps=M4_SRAM_BYTES_PER_CYCLE * clock / 1e9,
        peak_source=f"datasheet: Cortex-M4 SMLALD 2 MAC/cycle, SRAM 4 B/cycle at {clock / 1e6:g} MHz",
        cycles=int(np.median(timed)), clock_hz=clock, temp_c=head.temp_c, vdda_v=head.vdda_v,
        sensors_source=("modelled" if session.twin else "measured") if head.temp_c is not None else "",
        verdict=verdict, message=_link_note(before, stats))]


def _link_note(before: tuple[int, int, int], stats) -> str:
    """What the link went through for this row ('' on a clean line): retries, restarts, rejected frames."""
    retries, restarts, rejected = (now - then for now, then in zip((stats.retries, stats.restarts, stats.rejected),
                                                                   before))
    if not (retries or restarts or rejected):
        return ""
    return f"link: {retries} retries, {restarts} session restarts, {rejected} corrupted frames rejected"

