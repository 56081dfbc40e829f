"""The MCU target: the Q15 kernel on an STM32F407 running MicroPython (`--serial PORT`) or on its twin (`--sim`).

Its options (`add_options`): `--serial PORT [--baud N]`, or `--sim [--sim-faults SPEC]`.
`open_session(settings)` connects for a whole sweep: with `sim` it starts `python -m mcu.sim` as a child (a pipe
on its stdin, so it ends with the host), deploys the board code to it with mcu.deploy and connects to its pty; with
`serial` it connects to the board (deploy first with `python -m mcu.deploy --serial PORT`); a q15attn on the board
older than the contract this host computes (mcu.messages.MODULE_VERSION) is refused there, in one line. `run`
quantises the problem per tensor with host/q15.py's `prepare` at the contract's Bc (`q15.BC`, as every Q15 target
does; the row's bc), and for every head: SETUP with the planner's chunking, LOAD K and V^T, then per chunk of query
rows LOAD Q, RUN (warm-up + timed repeats on the board) and READ O and its row shifts; a head whose K and V^T do not
fit the board's heap is streamed, a key chunk at a time (mcu/head.py). Decode problems (q_len < seq) send a head's
q_len queries as the contract's rows seq - q_len .. seq - 1 (bottom-right causal); grouped-query problems run per
K/V head, its G = heads / kv_heads query heads sharing its K and V^T on the board (protocol 6), so K and V^T go once
per group where the rows fit, and the row's message states the tensor bytes per K/V head and how often its K and V^T
went (`traffic_note`). The heads' outputs make one `q15.Q15Out`. A
session lost mid-head (the board reset) is restarted and the head redone, so every row is measured once and whole; a
SETUP or LOAD the board refuses for memory is retried with a smaller plan (rows, then keys) before the row is `oom`, and
the row's message counts the replans per head. The row: latency = DWT cycles / clock (all heads and chunks of one
repeat; measured by a board's counter, modelled by the twin's cycle model, as its timing_source says), the verdict
(bit-exact with the model and within the contract's error bound: host/verdict.py), max_abs and rel_l2 of the dequantised
output against the float64 golden, temperature and VDDA after the run (measured by a board's ADC, modelled by the twin),
the Cortex-M4's datasheet roof (SMLALD: 2 MACs per cycle; SRAM: 4 bytes per cycle) for the roofline, and the energy of
the row's problem: latency × the F407's datasheet run current × VDD (mcu/power.py), with the figure used in the row's
message.
"""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import dataclass

import numpy as np

from host import q15
from host.errors import LinkError, SpecError, UnavailableError
from host.q15 import DIM_MAX, SEQ_MAX
from host.problem import AttentionProblem
from host.results import Result
from host.target_api import ClusterNeeds, Inputs, RunOptions
from host.timing import summarize
from host.verdict import check_q15
from mcu import power
from mcu.head import Session, Traffic, run_head  # Session is also re-exported for callers of open_session
from mcu.messages import HEADS_MAX

KERNELS = {"q15": "q15"}
#: warm-up and timed repeats when the sweep does not set them: DWT cycles barely vary, and the twin's are exact.
REPEATS = (0, 1)
#: A RUN frame counts its repeats in one byte (docs/protocol.md): warm-up + timed calls of one row.
MAX_REPEATS = 255
DEFAULT_BAUD = 115200
#: The Cortex-M4's roof (ARM Cortex-M4 TRM): SMLALD retires two 16×16 multiply-accumulates per cycle (4 operations
#: in the FLOP convention), and the core moves at most one 32-bit word per cycle to or from SRAM.
M4_OPS_PER_CYCLE = 4
M4_SRAM_BYTES_PER_CYCLE = 4
#: Where a row's cycles (and so its latency) come from: a board's DWT_CYCCNT, or the twin's per-basic-block cycle
#: model behind its emulated DWT (docs/twin.md, "The cycle model").
BOARD_TIMING = "measured: DWT cycle counter"
TWIN_TIMING = "modelled: board twin's cycle model"


@dataclass(frozen=True)
class Settings:
    """Where the MCU target runs: a board on a serial port, or the twin (optionally with line faults)."""

    serial: str | None = None
    baud: int = DEFAULT_BAUD
    sim: bool = False
    sim_faults: str = ""

    def __post_init__(self) -> None:
        if self.sim_faults:
            from mcu.sim.faults import FaultSpec

            FaultSpec.parse(self.sim_faults, "--sim-faults")  # a bad spec is the user's error, reported before anything
        if self.serial and self.sim:
            raise SpecError("--serial and --sim both given; allowed: one of them")
        if self.sim_faults and not self.sim:
            raise SpecError(f"--sim-faults {self.sim_faults!r} needs --sim (faults are injected by the twin)")


def add_options(group: argparse._ArgumentGroup) -> None:
    from host.cli_common import integer

    group.add_argument("--serial", metavar="PORT", default=None,
                       help="a board, e.g. /dev/ttyACM0 (deploy first: python -m mcu.deploy --serial PORT)")
    group.add_argument("--baud", type=integer("baud", 1200, 12_000_000), default=DEFAULT_BAUD,
                       help=f"the board's baud rate, ignored by USB CDC (default {DEFAULT_BAUD})")
    group.add_argument("--sim", action="store_true",
                       help="the board twin (python -m mcu.sim), started and deployed by the sweep")
    group.add_argument("--sim-faults", metavar="SPEC", default="",
                       help="line faults for the twin, e.g. drop=0.001,flip=0.001,delay=0.01,reset=200 (docs/twin.md)")


def settings(args: argparse.Namespace) -> Settings:
    return Settings(serial=args.serial, baud=args.baud, sim=args.sim, sim_faults=args.sim_faults)


#: A cluster worker owns a board (--serial PORT) or a twin (--sim), chosen by all of this target's options; its rows
#: ask for one board.
CLUSTER = ClusterNeeds(settings=Settings, options={"serial": "--serial", "baud": "--baud", "sim": "--sim",
                                                   "sim_faults": "--sim-faults"},
                       add_options=add_options, usage="--serial PORT | --sim", resource="stm32f407")


def available(settings: Settings = Settings()) -> tuple[bool, str]:
    try:
        import mpremote  # noqa: F401
        import serial  # noqa: F401
    except ImportError as exc:
        return False, f"{exc.name} is not installed (pip install -e '.[mcu]')"
    if not settings.serial and not settings.sim:
        return False, "no board: pass --serial PORT (a board) or --sim (the board twin)"
    if settings.sim:
        from mcu.sim.vm_process import vm_missing

        if vm_missing():
            return False, f"the board twin cannot run here: {vm_missing()}"
    return True, ""


def supports(problem: AttentionProblem) -> tuple[bool, str]:
    """Every shape the Q15 contract and the protocol carry: self-attention, decode against a KV cache (q_len < seq)
    and grouped K/V heads of up to HEADS_MAX query heads each. Whether a head fits the board's heap is the planner's
    answer at run time (an `oom` row naming the figures)."""
    if problem.seq > SEQ_MAX:
        return False, f"seq={problem.seq} is past the Q15 contract's {SEQ_MAX} keys (host.q15.SEQ_MAX)"
    if problem.dim > DIM_MAX:
        return False, f"dim={problem.dim} is past the Q15 kernel's {DIM_MAX} (host.q15.DIM_MAX)"
    group = problem.heads // problem.kv_head_count
    if group > HEADS_MAX:
        return False, (f"{group} query heads per K/V head is past the board protocol's {HEADS_MAX} "
                       "(mcu.messages.HEADS_MAX)")
    return True, ""


def device(settings: Settings | None = None, session: "Session | None" = None) -> str:
    if session is not None:
        return session.description
    return "STM32F407 (not connected)"


@contextlib.contextmanager
def open_session(settings: Settings):
    """Yield a Session on the board or twin the settings name; UnavailableError when none was named or the one
    named cannot be reached."""
    from mcu.link import BoardLink
    from mcu.twin_process import start_twin

    serial_port, sim = settings.serial, settings.sim
    if not serial_port and not sim:
        raise UnavailableError("no board: pass --serial PORT (a board) or --sim (the board twin)")
    with contextlib.ExitStack() as stack:
        twin = None
        if sim:
            twin = stack.enter_context(start_twin(settings.sim_faults))
            from mcu.deploy import deploy

            port = twin.port
            deploy(port, 115200, say=lambda line: None)
        else:
            port = serial_port
        link = BoardLink(port, settings.baud)
        try:
            hello = link.open()
        except LinkError as exc:
            text = str(exc)  # the link's messages begin with the port already
            raise UnavailableError(f"the twin: {text}" if sim else text if text.startswith(port) else
                                   f"{port}: {text}") from None
        stack.callback(link.close)
        session = Session(link, port, "", twin=twin)  # a twin reached with --serial is known by its HELLO
        kind = "twin" if session.is_twin else "board"
        session.description = f"{hello.machine} ({kind}, {hello.clock_hz / 1e6:g} MHz, heap {hello.heap_total} B)"
        refusal = hello.module_refusal(port)  # missing, or older than the contract this host computes
        if refusal:
            raise UnavailableError(refusal)
        yield session


def run(problem: AttentionProblem, inputs: Inputs, options: RunOptions[Settings]) -> list[Result]:
    """Measure `problem` on the board of options.session (a Session); one row with its verdict. The board computes
    the Q15 contract, so its row is a q15 row whatever dtype `problem` was posed in."""
    problem = problem.with_(dtype="q15")
    session: Session | None = options.session
    if session is None:
        raise UnavailableError("the MCU target has no session (host.compare opens one with --serial or --sim)")
    quantized = q15.prepare(problem, inputs.q, inputs.k, inputs.v)  # at the contract's Bc (q15.BC), as every target
    repeats = options.warmup + options.iters
    if repeats > MAX_REPEATS:  # host.compare refuses it before the board starts (host/sweep/jobs.py check_repeats)
        raise SpecError(f"warmup + iters = {repeats} is out of range for the MCU; allowed: 1..{MAX_REPEATS}")
    stats = session.link.stats
    before = (stats.retries, stats.restarts, stats.rejected)
    wire = (stats.bytes_out, stats.bytes_in)
    notes_before = len(session.notes)
    out = q15.Q15Out(np.empty(problem.shape, dtype=np.int16),  # (B, H, q_len, d) Q15 values
                     np.empty(problem.shape[:-1], dtype=np.uint8))  # (B, H, q_len) each row's shift
    cycles = np.zeros(repeats, dtype=np.int64)
    head = None
    resumed, replanned, streamed, traffic = [], [], "", []
    group = problem.heads // problem.kv_head_count  # query heads per K/V head
    for b in range(problem.batch):
        for kv in range(problem.kv_head_count):
            heads = slice(kv * group, (kv + 1) * group)  # the query heads that read K/V head kv
            q = quantized.q[b, heads] if group > 1 else quantized.q[b, kv]  # (G, q_len, d), or (q_len, d)
            head = run_head(session, quantized.params, q, quantized.k[b, kv], quantized.v[b, kv], repeats)
            out.o[b, heads], out.shift[b, heads] = head.out
            cycles += head.cycles
            traffic.append(head.traffic)
            which = f"head {b},{kv}" if group == 1 else f"K/V head {b},{kv}"
            if head.keys < problem.seq:
                streamed = (f"streamed: {head.keys} keys of K and V^T on the board at a time, query rows in chunks of "
                            f"{head.rows}" + (f" of {head.heads} query heads at once" if group > 1 else ""))
            if head.replans:
                replanned.append(replan_note(which, head))
            if len(head.sessions) > 1:
                resumed.append(f"{which} resumed over {len(head.sessions)} sessions (query rows done per "
                               f"session: {', '.join(map(str, head.sessions))})")
    verdict = check_q15(out, quantized.expected(), quantized.dequantize(out), inputs.golden,
                        q15.error_bound(inputs.q, inputs.k, inputs.v, quantized))
    moved = traffic_note(traffic, group, (stats.bytes_out - wire[0], stats.bytes_in - wire[1]))
    clock = session.link.hello.clock_hz
    timed = cycles[options.warmup:]
    timing = summarize((timed / clock * 1e3).tolist())
    energy = power.energy(timing.p50_ms / 1e3, clock)
    return [options.context.result(
        problem, target="mcu", kernel=options.kernel, device=session.description, br=head.rows,
        bc=quantized.params.bc,
        warmup=options.warmup, **timing.as_fields(), timing_source=TWIN_TIMING if session.is_twin else BOARD_TIMING,
        peak_gflops=M4_OPS_PER_CYCLE * clock / 1e9, peak_gbps=M4_SRAM_BYTES_PER_CYCLE * clock / 1e9,
        peak_source=f"datasheet: Cortex-M4 SMLALD 2 MAC/cycle, SRAM 4 B/cycle at {clock / 1e6:g} MHz",
        cycles=int(np.median(timed)), clock_hz=clock, temp_c=head.temp_c, vdda_v=head.vdda_v,
        sensors_source=("modelled" if session.is_twin else "measured") if head.temp_c is not None else "",
        energy_j=energy.joules, energy_source=energy.source,
        verdict=verdict, message="; ".join(filter(None, [streamed, moved,
                                                          _link_note(before, stats),
                                                          *session.notes[notes_before:], *replanned, *resumed,
                                                          energy.note])))]


def traffic_note(traffic: list[Traffic], group: int, wire: tuple[int, int]) -> str:
    """The tensor bytes per K/V head (mcu/head.py Traffic) and the row's bytes on the wire (frames, resends and
    HELLOs of restarts included), e.g. 'link per K/V head: K and V^T 524,288 B sent (1x the head's 524,288 B, shared
    by its 4 query heads), Q 512 B, O and shifts 516 B back; 525,316 B per K/V head, 525,316 B in all; wire 531,000 B
    out, 9,000 B in'; the largest of the K/V heads where they differ (only a causal head's chunks can)."""
    most = max(traffic, key=lambda t: t.total)
    shared = f", shared by its {group} query heads" if group > 1 else ""
    return (f"link per K/V head: K and V^T {most.kv:,} B sent ({most.kv_sends:.3g}x the head's {most.kv_head:,} B"
            f"{shared}), Q {most.q:,} B, O and shifts {most.out:,} B back; {most.total:,} B per K/V head, "
            f"{sum(t.total for t in traffic):,} B in all; wire {wire[0]:,} B out, {wire[1]:,} B in")


def replan_note(which: str, head) -> str:
    """What a head's replans were (mcu/head.py HeadResult): how many, which refusals for memory caused them, and the
    plans in turn, e.g. 'head 0,0: 2 replans after E_MEMORY (SETUP, SETUP): query rows×keys 64×all (…) → 32×all (…)
    → 16×all (…)'."""
    plural = "replan" if head.replans == 1 else "replans"
    return (f"{which}: {head.replans} {plural} after E_MEMORY ({', '.join(head.refused)}): query rows×keys "
            f"{' → '.join(head.plans)}")


def _link_note(before: tuple[int, int, int], stats) -> str:
    """What the link went through for this row ('' on a clean line): retries, restarts, rejected frames."""
    retries, restarts, rejected = (now - then for now, then in zip((stats.retries, stats.restarts, stats.rejected),
                                                                   before))
    if not (retries or restarts or rejected):
        return ""
    return f"link: {retries} retries, {restarts} session restarts, {rejected} corrupted frames rejected"

