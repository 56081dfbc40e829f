"""One attention head on a board (or the twin) through the frame protocol, resumable across lost sessions.

A resident head (the planner's plan: K and V^T fit the board's heap) is SETUP, LOAD K and V^T, then per chunk of
query rows LOAD Q, RUN and READ O and its row shifts. A streamed head is SETUP with the plan's key chunk, then per
chunk of query rows LOAD Q and, for each key chunk in key order, LOAD that chunk of K and V^T and STREAM it into the
rows' state on the board; the last one leaves O and its row shifts to READ. The head's output is a `q15.Q15Out`
(values (seq, d), shifts (seq,)), as the contract's model gives it. The LOADs of a tensor go windowed (several
frames in flight, mcu.link.BoardLink.load), the rest one at a time; LOAD and READ move their bytes in the link's
chunks, which shrink on a noisy line (mcu/chunks.py). Chunks of query rows are independent, so a session lost
mid-head (a reset board, a restarted twin) costs only the chunk in flight, whose state died with the session: the
next session sets the head up again and goes on with the rows not done, a streamed chunk from its first key. After a
session that completed no chunk, the next one takes chunks half as large as the last one's, so that a line resetting
faster than a whole head still gets through it piece by piece; a streamed chunk, though, must take every key chunk of
K and V^T in one session whatever its rows, so a line that resets before one key stream completes cannot get through
a streamed head. A head fails only after `HEAD_ATTEMPTS` sessions in a row that completed no chunk, naming what
each session got done. A SETUP or LOAD the board refuses for memory (E_MEMORY: the planner's figure was more than
the heap could give, as on a fragmented heap) is a replan, not a failure: the head takes the planner's next smaller
plan (mcu.planner.smaller: half the query rows, down to one; then half the keys on the Bc grid), SETUPs again and
goes on with the rows not done; later sessions keep the smaller plan. The output does not depend on the plan (rows
are independent, and key chunks are whole Bc blocks). Only when no smaller plan exists is the head `oom`, naming
every plan the board refused. The RUN reply's wait comes from the kernel's cycle estimate (mcu/cycles.py): the board's
clock, or the twin's emulation rate, and a twin call the estimate puts over the twin's emulation cap is refused
before it is sent.

Decode and grouped heads (issue 32): `run_head` takes a head's q_len query rows, which are the contract's rows
seq - q_len .. seq - 1 (RUN's and STREAM's row0 is the rows' position, so the kernel's causal mask is the KV cache's,
bottom right), and, for grouped-query attention, the G query heads that read one K/V head as q (G, q_len, d): they
share its K and V^T on the board, `heads` of them per RUN or STREAM (the plan's; SETUP's heads, protocol 6), so K and
V^T go over the link once for the whole group where the rows fit (resident: always once). The result counts the
tensor bytes the head moved (`HeadResult.traffic`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from host import q15
from host.errors import LinkError, TargetError
from mcu import cycles as model

HEAD_ATTEMPTS = 5  # sessions in a row without a completed chunk before the head fails
#: The twin names itself so in HELLO's firmware string (its sys.version ends "(kbench twin)"; its machine string is
#: the F407's, as a board's), so that a twin reached with --serial is known for one.
TWIN_MARK = "kbench twin"


@dataclass
class Session:
    """A connected board (or twin) for one sweep. `twin` is the mcu.twin_process.TwinProcess the host owns (None
    for a board); `notes` collects what happened to the session (a twin restarted) for the rows."""

    link: object  # mcu.link.BoardLink
    port: str
    description: str
    twin: object = None
    notes: list[str] = field(default_factory=list)

    @property
    def is_twin(self) -> bool:
        """A twin this host started, or one it was pointed at (its HELLO says so): its RUNs take emulation time."""
        hello = getattr(self.link, "hello", None)
        return self.twin is not None or (hello is not None and TWIN_MARK in hello.firmware + hello.machine)

    def recover(self) -> None:
        """A fresh server session: a twin that died is started again (and deployed to) first."""
        if self.twin is not None and self.twin.exit_code() is not None:
            from mcu.deploy import deploy

            code = self.twin.exit_code()
            self.port = self.twin.restart()
            deploy(self.port, 115200, say=lambda line: None)
            self.link.move(self.port)
            self.notes.append(f"the twin exited (status {code}) and was restarted")
        self.link.restart()


@dataclass(frozen=True)
class Traffic:
    """Tensor bytes one K/V head's work moved over the link (LOAD data and READ data; frames not counted)."""

    kv: int = 0  # K and V^T sent
    q: int = 0  # Q sent
    out: int = 0  # O and its row shifts read back
    kv_head: int = 0  # K and V^T of the K/V head once: 4·seq·dim

    @property
    def kv_sends(self) -> float:
        """How many times K and V^T went over the link (less than 1 per block where causal rows stop early)."""
        return self.kv / self.kv_head if self.kv_head else 0.0

    @property
    def total(self) -> int:
        return self.kv + self.q + self.out


@dataclass(frozen=True)
class HeadResult:
    out: q15.Q15Out  # values (q_len, dim) int16, row shifts (q_len,) uint8; (G, q_len, ...) for a group
    cycles: np.ndarray  # (repeats,) summed over chunks
    temp_c: float | None
    vdda_v: float | None
    rows: int  # the smallest chunk of query rows this head ran with
    sessions: tuple[int, ...]  # query rows completed in each session the head needed
    keys: int  # keys of K and V^T on the board at once: seq when resident, less when streamed
    #: the plans this head went through after the board refused for memory (() when it needed no replan), as
    #: mcu.planner.Plan.label gives them: the refused ones, then the one that ran
    plans: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()  # the request kind (SETUP, LOAD) each refused plan was refused at
    heads: int = 1  # the fewest query heads per RUN or STREAM this head ran with (of a group)
    traffic: Traffic = Traffic()

    @property
    def replans(self) -> int:
        """Plans this head took after a refusal for memory (0: it ran on the planner's first)."""
        return len(self.refused)


@dataclass
class _Progress:
    """What a head has got back so far: rows done (of each query head of the group), their outputs and cycles, the
    sensors of the last RUN, the tensor bytes moved."""

    group: int  # query heads on this K/V head
    seq: int  # query rows per query head (q_len)
    dim: int
    repeats: int
    done: np.ndarray = None  # (group, q_len) bool
    out: q15.Q15Out = None  # values (group, q_len, dim) int16, row shifts (group, q_len) uint8
    cycles: np.ndarray = None  # (repeats,) int64
    sensors: tuple = (None, None)
    sessions: list[int] = field(default_factory=list)
    smallest_chunk: int = 0
    keys: int = 0  # keys on the board at once (the plan's): seq when resident
    layout: object = None  # the mcu.planner.Plan in use: the first one, or the last replan's
    refused: list = field(default_factory=list)  # (request kind, Plan) per refusal for memory, in order
    fewest_heads: int = 0  # query heads per block, the fewest of the plans the board took
    moved: dict = field(default_factory=lambda: {"kv": 0, "q": 0, "out": 0})  # tensor bytes, as Traffic's fields

    def __post_init__(self) -> None:
        self.done = np.zeros((self.group, self.seq), dtype=bool)
        self.out = q15.Q15Out(np.empty((self.group, self.seq, self.dim), dtype=np.int16),
                              np.empty((self.group, self.seq), dtype=np.uint8))
        self.cycles = np.zeros(self.repeats, dtype=np.int64)

    def chunks(self, heads: int, rows: int):
        """(h0, row0, nrows) over the rows not done, at most `rows` each, in blocks of `heads` query heads: a row is
        done in a block when every head of the block has it."""
        for h0 in range(0, self.group, heads):
            pending = ~self.done[h0:h0 + heads].all(axis=0)
            row0 = 0
            while row0 < self.seq:
                if not pending[row0]:
                    row0 += 1
                    continue
                end = row0
                while end < self.seq and pending[end] and end - row0 < rows:
                    end += 1
                yield h0, row0, end - row0
                row0 = end

    def describe(self) -> str:
        return f"query rows done per session: {', '.join(map(str, self.sessions))} of {self.group * self.seq}"


def run_head(session: Session, params: q15.Q15Params, q: np.ndarray, k: np.ndarray, v: np.ndarray,
             repeats: int) -> HeadResult:
    """One K/V head and its queries: q (q_len, dim) int16, the contract's rows seq - q_len .. seq - 1 (q_len = seq:
    the square head), or (G, q_len, dim) for the G query heads of a group; k, v (seq, dim) int16. A lost session is
    recovered and the head resumed where it stopped."""
    from mcu.link import ServerMissing, SessionLost

    grouped = q.ndim == 3
    queries = q if grouped else q[None]  # (G, q_len, dim)
    if queries.shape[1] > params.seq or k.shape != (params.seq, params.dim) or v.shape != k.shape:
        raise TargetError(f"q {q.shape}, k {k.shape}, v {v.shape} do not fit seq={params.seq} dim={params.dim}; "
                          "allowed: q (q_len <= seq, dim) or (G, q_len, dim), k and v (seq, dim)")
    progress = _Progress(queries.shape[0], queries.shape[1], params.dim, repeats)
    failure: Exception | None = None
    limit = None  # rows per chunk: the planner's, halved after each lost session
    stalled = 0  # sessions in a row that completed no chunk
    while stalled < HEAD_ATTEMPTS:
        before = int(progress.done.sum())
        try:
            if progress.sessions or session.link.hello is None:  # lost now, or by an earlier row
                session.recover()
            limit = _head_once(session, params, queries, k, v, progress, limit)
            progress.sessions.append(int(progress.done.sum()) - before)
            plans = tuple(layout.label() for _, layout in progress.refused)
            out = progress.out if grouped else q15.Q15Out(progress.out.o[0], progress.out.shift[0])
            return HeadResult(out, progress.cycles, *progress.sensors, progress.smallest_chunk,
                              tuple(progress.sessions), progress.keys,
                              plans + (progress.layout.label(),) if plans else (),
                              tuple(kind for kind, _ in progress.refused), progress.fewest_heads,
                              Traffic(**progress.moved, kv_head=4 * params.seq * params.dim))
        except ServerMissing:
            raise
        except (SessionLost, LinkError) as exc:
            failure = exc
            gained = int(progress.done.sum()) - before
            progress.sessions.append(gained)
            stalled = 0 if gained else stalled + 1
            if not gained:  # smaller chunks, so that the next session completes one before the line fails again
                limit = max(1, (limit or progress.smallest_chunk or progress.seq) // 2)
    raise LinkError(f"head failed: {HEAD_ATTEMPTS} sessions in a row completed no chunk ({progress.describe()}); "
                    f"last: {failure}")


def _head_once(session: Session, params: q15.Q15Params, q: np.ndarray, k: np.ndarray, v: np.ndarray,
               progress: _Progress, limit: int | None) -> int:
    """One session's part of the head: SETUP, then every chunk of query rows not done, replanning smaller when the
    board refuses a SETUP or LOAD for memory. Returns the chunk size used."""
    from mcu import messages as m
    from mcu.planner import DoesNotFit, plan, smaller

    hello = session.link.hello
    if progress.layout is None:
        progress.layout = plan(params.seq, params.dim, hello.heap_free, hello.reserve, params.bc,
                               largest=hello.largest_block, queries=progress.seq, group=progress.group)
    while True:
        layout = progress.layout if limit is None else progress.layout.with_rows(limit)
        try:
            return _run_plan(session, params, q, k, v, progress, layout)
        except m.BoardRefused as exc:
            if exc.code != m.Status.E_MEMORY or exc.kind not in (m.Kind.SETUP, m.Kind.LOAD):
                raise
            progress.refused.append((exc.kind.name, layout))
            progress.layout = smaller(layout, hello.heap_free, hello.reserve, params.bc, hello.largest_block)
            if progress.layout is None:
                tried = ", ".join(f"{refused.label()} ({kind})" for kind, refused in progress.refused)
                raise DoesNotFit(f"{exc}; no smaller plan: the board refused {len(progress.refused)} plan(s) for "
                                 f"memory, query rows×keys: {tried}") from None


def _run_plan(session: Session, params: q15.Q15Params, q: np.ndarray, k: np.ndarray, v: np.ndarray,
              progress: _Progress, layout) -> int:
    """SETUP `layout` (an mcu.planner.Plan) and run every chunk of query rows not done, `layout.heads` query heads at
    a time; its rows per chunk. q is (G, q_len, dim): the chunk's rows stand at row0 = seq - q_len + their index."""
    from mcu import messages as m

    link = session.link
    hello = link.hello
    seq, dim, repeats = params.seq, params.dim, progress.repeats
    rows, heads = layout.rows, layout.heads
    first = seq - progress.seq  # the head's first query row: seq - q_len (0 for a square head)
    m.check_status(m.Kind.SETUP, link.request(m.Kind.SETUP, m.setup_payload(
        seq, dim, params.causal, params.bc, params.score_mult, params.score_shift, rows, layout.keys, heads)))
    progress.smallest_chunk = min(progress.smallest_chunk or rows, rows)  # of the plans the board took
    progress.keys = min(progress.keys or layout.keys, layout.keys)  # streamed in any session: the row says so
    progress.fewest_heads = min(progress.fewest_heads or heads, heads)
    if not layout.streamed:
        _send_keys(link, progress, k, v, 0, seq)
    for h0, row0, nrows in list(progress.chunks(heads, rows)):
        block = q[h0:h0 + heads, row0:row0 + nrows]  # (heads, nrows, dim): head after head, as the board keeps them
        link.load(m.Tensor.Q, block.astype("<i2").tobytes())
        progress.moved["q"] += block.size * 2
        if layout.streamed:
            cycles, reply = _stream_rows(session, params, progress, k, v, first + row0, nrows, layout.keys, heads)
        else:
            timeout = link.timeouts.reply + run_wait(session, params, first + row0, nrows, repeats, hello.clock_hz,
                                                     heads=heads)
            reply = m.RunReply.parse(link.request(m.Kind.RUN, m.RUN.pack(first + row0, nrows, repeats),
                                                  timeout=timeout))
            _check_timed(reply)
            cycles = np.asarray(reply.cycles, dtype=np.int64)
        data = link.read(m.Tensor.O, 2 * heads * nrows * dim)
        shifts = link.read(m.Tensor.OSHIFT, heads * nrows)  # each row's g: the row stands for o · 2^(s_V - 15 - g)
        progress.moved["out"] += len(data) + len(shifts)
        progress.out.o[h0:h0 + heads, row0:row0 + nrows] = np.frombuffer(bytes(data), dtype="<i2").reshape(
            heads, nrows, dim)
        progress.out.shift[h0:h0 + heads, row0:row0 + nrows] = np.frombuffer(bytes(shifts), dtype=np.uint8).reshape(
            heads, nrows)
        progress.cycles += cycles
        progress.done[h0:h0 + heads, row0:row0 + nrows] = True
        progress.sensors = (reply.temp_c, reply.vdda_v)
    return rows


def _send_keys(link, progress: _Progress, k: np.ndarray, v: np.ndarray, key0: int, key1: int) -> None:
    """LOAD keys key0 .. key1-1 of K and V^T (from offset 0), counting their bytes."""
    from mcu import messages as m

    link.load(m.Tensor.K, k[key0:key1].astype("<i2").tobytes())
    link.load(m.Tensor.VT, np.ascontiguousarray(v[key0:key1].T).astype("<i2").tobytes())
    progress.moved["kv"] += 4 * (key1 - key0) * k.shape[1]


def _stream_rows(session: Session, params: q15.Q15Params, progress: _Progress, k: np.ndarray, v: np.ndarray,
                 row0: int, nrows: int, keys: int, heads: int) -> tuple[np.ndarray, object]:
    """Query rows row0 .. row0+nrows-1 (positions in the head of seq) of `heads` query heads (their Q on the board)
    through every key chunk of `keys` keys up to their last key, `repeats` times (each repeat streams the keys
    again: the state cannot be rewound); (cycles per repeat, the last STREAM reply)."""
    from mcu import messages as m

    link, hello = session.link, session.link.hello
    end = row0 + nrows if params.causal else params.seq  # keys beyond the rows' last change nothing
    repeats = progress.repeats
    cycles = np.zeros(repeats, dtype=np.int64)
    reply = None
    for repeat in range(repeats):
        for key0 in range(0, end, keys):
            key1 = min(end, key0 + keys)
            _send_keys(link, progress, k, v, key0, key1)
            timeout = link.timeouts.reply + run_wait(session, params, row0, nrows, 1, hello.clock_hz, key0, key1,
                                                     heads)
            reply = m.RunReply.parse(link.request(m.Kind.STREAM, m.STREAM.pack(row0, nrows, key0, key1 - key0),
                                                  timeout=timeout), m.Kind.STREAM)
            if len(reply.cycles) != 1:
                raise LinkError(f"STREAM reply with {len(reply.cycles)} cycle counts; expected 1")
            _check_timed(reply)
            cycles[repeat] += reply.cycles[0]
    return cycles, reply


def _check_timed(reply) -> None:
    if any(c is None for c in reply.cycles):
        raise TargetError("the board's q15attn is not timed (not a Cortex-M4 build): no DWT cycles")


def run_wait(session: Session, params: q15.Q15Params, row0: int, nrows: int, repeats: int, clock_hz: int,
             key0: int = 0, key1: int | None = None, heads: int = 1) -> float:
    """Seconds to wait for a RUN's (or STREAM's) reply beyond the link's reply timeout: WAIT_FACTOR × the cycle
    estimate's time on the board or twin, for each of the `heads` query heads the request runs (one kernel call
    each). A twin call over the twin's emulation cap is refused here, naming both figures."""
    estimate = model.kernel_cycles(params.seq, params.dim, row0, nrows, params.causal, key0, key1)
    repeats *= heads
    if not session.is_twin:
        return repeats * model.WAIT_FACTOR * model.board_seconds(estimate, clock_hz)
    expected = model.twin_seconds(estimate)
    if expected > model.TWIN_EMULATION_CAP_S:
        keys = "" if key0 == 0 and key1 in (None, params.seq) else f" (keys {key0}..{key1 - 1})"
        raise TargetError(f"rows {row0}..{row0 + nrows - 1}{keys} of this head need ~{expected:.0f} s of emulation "
                          f"on the twin ({estimate} modelled cycles at ~{model.TWIN_CYCLES_PER_S:.0e} cycles/s), over "
                          f"the twin's cap of {model.TWIN_EMULATION_CAP_S:.0f} s per call; a board runs them in "
                          f"{model.board_seconds(estimate, clock_hz):.1f} s (use --serial, or a smaller seq)")
    return repeats * min(model.WAIT_FACTOR * expected, model.TWIN_EMULATION_CAP_S)

