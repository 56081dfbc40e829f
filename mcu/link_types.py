"""The board link's tunables (waits, retries, the LOAD window), exceptions and counters: mcu/link.py's session uses
them, and mcu.link re-exports them."""

from __future__ import annotations

from dataclasses import dataclass, field

from host.errors import LinkError, SpecError
from mcu.messages import Kind

# Waits, in seconds. Every wait for bytes has an overall deadline and an inter-byte timeout (Timeouts.inter_byte):
# a frame whose bytes stop arriving part-way is given up at once, not at the end of the reply's deadline.
#: pyserial's read timeout while frames flow: how often a wait wakes to check its deadlines (short: a reply that
#: arrives is seen within it; long enough that an idle wait is not a busy loop).
READ_SLICE_S = 0.05
#: pyserial's read timeout while mpremote drives the raw REPL: mpremote reads fixed byte counts ("OK", the banner)
#: and treats a short read as failure, so one read must span the board's longest pause there (an exec starting up).
MPREMOTE_READ_S = 1.0
#: A board that stops reading (hung, or USB buffers full) must not block a write for ever; 5 s is far beyond the
#: few milliseconds the largest frame (about 1 KB) takes on any line kbench drives.
WRITE_TIMEOUT_S = 5.0
#: How long restart() waits for a port that went away (a USB board resetting re-enumerates in 1..5 s) to come back,
#: trying again every REOPEN_POLL_S.
REOPEN_S = 10.0
REOPEN_POLL_S = 0.5
#: Resends back off exponentially from BACKOFF_FIRST_S to at most BACKOFF_MAX_S: the first resend is quick (a
#: corrupted frame is the common case), later ones give a board that is busy (a GC pass, a slow flash write) room.
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 1.0
#: _drain() gives up after this long even on a line that never goes quiet (a board printing in a loop).
DRAIN_MAX_S = 5.0
START_ATTEMPTS = 4  # tries of the whole start sequence: noise may hit the break, the raw REPL entry or the HELLO
HELLO_RETRIES = 3  # resends of HELLO when the server's announcement was lost
#: Attempts a request (or a windowed LOAD) gets once the line has delivered a corrupted frame: there `retries` would
#: fail live requests (a 48-byte LOAD and its reply get through 0.98^60 ≈ 0.30 of the time at drop = flip = 0.01, so
#: 6 attempts all fail 12 % of the time, and HELLO's 120-byte reply 0.07 of the time), while 32 fail 1e-5 and 10 %
#: of the time (a start tries HELLO again in each of its START_ATTEMPTS). A clean line keeps `retries`.
NOISY_ATTEMPTS = 32
#: On a noisy line a lost request is common (the board drops the corrupted frame and says nothing), and waiting the
#: full reply timeout for each would take most of the time: there the wait for a reply shrinks to RTO_FACTOR times
#: the longest of the last RTT_KEPT round trips measured (first attempts only), at least RTO_MIN_S, at most
#: Timeouts.reply (RUN and STREAM keep their own waits). A wait that ends too early costs a resend the server
#: answers from its reply cache.
RTO_FACTOR = 4.0
RTO_MIN_S = 0.25
RTT_KEPT = 16
GARBAGE_KEPT = 4096  # bytes since the last good frame, kept to recognise a reset board or a stopped server
#: LOAD requests the host keeps in flight, unless the server's HELLO allows fewer (the server keeps 8 replies, and 1
#: where its line cannot hold back what the board has no room for). Measured on the twin (docs/performance.md, "Board
#: link"; `python -m mcu.link_bench`): throughput rises up to 8 in flight, a median 2.5x stop-and-wait's (1.9-2.8x in
#: fourteen runs) on a VM with two free cores; a board's USB round trip, longer than the twin's pty's, wants at least as
#: many. The frames in flight cost the board no heap (they wait in the USB VCP's receive buffer and on the host), only
#: 64 bytes of reply cache each.
LOAD_WINDOW = 8
WINDOW_MAX = 255  # HELLO's window is a u8


class SessionLost(LinkError):
    """The frame server is gone (the board reset, or the server could not start); `restart()` may recover."""


class ServerMissing(LinkError):
    """The board has no usable kbench_server (not deployed, or another protocol): no retry helps."""



@dataclass(frozen=True)
class Timeouts:
    """The link's waits, in seconds; each positive."""

    #: Overall wait for one reply (RUN adds its compute estimate): the board answers any other request in
    #: milliseconds, a ~1 KB frame takes 0.1 s even at 115200 baud; 2 s leaves room for a GC pass and a loaded host.
    reply: float = 2.0
    #: Overall wait for the raw REPL and the server's start (and for the prompt after BYE): a board importing the
    #: server's .mpy files takes well under a second; 10 s covers a twin starting on a loaded 2-core machine.
    start: float = 10.0
    #: A line silent this long is idle (nothing more is coming from a stopped server): a board that is still
    #: printing sends its next bytes within milliseconds.
    quiet: float = 0.3
    #: Inter-byte timeout: once a frame (or any bytes after the last delimiter) started arriving, the next byte must
    #: follow within this; the board writes a frame in one go (a USB packet every millisecond at most), so a longer
    #: gap means the frame lost bytes (its delimiter, say) and is resent now rather than at the reply's deadline.
    inter_byte: float = 0.5

    def __post_init__(self) -> None:
        bad = [f"{name}={value!r}" for name, value in vars(self).items() if not value > 0]
        if bad:
            raise SpecError(f"Timeouts {', '.join(bad)} out of range; allowed: > 0 seconds")


@dataclass
class LinkStats:
    """What the session did: frames, bytes each way, retries, session restarts and wall time per request type."""

    frames: int = 0
    bytes_out: int = 0
    bytes_in: int = 0
    retries: int = 0
    restarts: int = 0
    rejected: int = 0
    seconds: dict = field(default_factory=dict)

    def add_time(self, kind: Kind, seconds: float) -> None:
        self.seconds[kind.name] = self.seconds.get(kind.name, 0.0) + seconds
