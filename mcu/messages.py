"""The messages the host and the board's frame server exchange inside frames (docs/protocol.md, "Messages").

Request types, status codes and payload layouts here are the host's copy of the contract that
mcu/board/kbench_server.py implements on the board; tests/mcu/test_protocol.py checks that both agree, value by value
and through shared vectors. Every reply carries its request's type | REPLY and starts with a status byte; a status
other than OK is followed by a one-line UTF-8 message.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from host.errors import LinkError, TargetError


class Kind(enum.IntEnum):
    """Request types; the reply to one has the same value | REPLY."""

    HELLO = 1
    SETUP = 2
    LOAD = 3
    RUN = 4
    READ = 5
    BYE = 6
    STREAM = 7


REPLY = 0x80


class Status(enum.IntEnum):
    """The first byte of every reply."""

    OK = 0
    E_TYPE = 1  # unknown request type
    E_PAYLOAD = 2  # payload malformed or a value out of range
    E_STATE = 3  # request out of order (RUN before SETUP)
    E_MEMORY = 4  # the tensors do not fit the heap (gc-aware refusal)
    E_MODULE = 5  # q15attn is not on the board
    E_KERNEL = 6  # q15attn refused the arguments (its message names the value and range)
    E_INTERNAL = 7  # the server caught something unexpected


class Tensor(enum.IntEnum):
    """What LOAD writes and READ reads: Q, K, V^T (int16 rows), O (int16 rows) and OSHIFT, O's row shifts (a u8 per
    query row, READ only; protocol 5)."""

    Q = 0
    K = 1
    VT = 2
    O = 3
    OSHIFT = 4


SETUP = struct.Struct("<HHBBHBHH")  # seq, dim, causal, bc, score_mult, score_shift, rows, keys (< seq: streamed)
#: After SETUP's fields, optional (protocol 6): the query heads each RUN or STREAM computes on these K and V^T
#: (grouped-query attention); absent, 1. The host sends it only where it is more than 1.
SETUP_HEADS = struct.Struct("<B")
HEADS_MAX = 255
LOAD = struct.Struct("<BI")  # tensor, byte offset; then the data
RUN = struct.Struct("<HHB")  # row0, nrows, repeat
STREAM = struct.Struct("<HHHH")  # row0, nrows, key0, nkeys: run the key chunk now in K and V^T into the rows' state
READ = struct.Struct("<BIH")  # tensor, byte offset, byte count
HELLO_REPLY = struct.Struct("<BBHIIIIHB")  # status, protocol, mpy_abi, clock_hz, heap_free, heap_total, reserve,
#                                            max_data, module version (0: absent); then 3 short texts, window:u8 and
#                                            largest_block:u32
SETUP_REPLY = struct.Struct("<BII")  # status, bytes needed, bytes free after allocation
RUN_REPLY = struct.Struct("<BiI")  # status, temp_milli_c, vdda_milli_v; then a u32 cycle count per repeat (STREAM's: 1)
#: The frame server's protocol, announced in HELLO; a host refuses a server of another one ("redeploy").
#: History: 1: stop-and-wait, the server kept its last reply. 2 (issue 15): the host may keep up to `window` LOAD
#: requests in flight; the server keeps that many LOAD replies and announces the window at the end of HELLO's reply.
#: 3 (issue 15): streamed heads. SETUP gains `keys`, the keys K and V^T hold on the board (seq: all, resident, as
#: before; fewer: one key chunk at a time, with the query rows' state); STREAM runs one chunk.
#: 4 (issue 29): HELLO's reply ends with largest_block:u32, the largest block the heap could give when it was
#: measured (gc.mem_free() counts every free block; the tensors need one); SETUP puts them in one block when it can.
#: 5 (issue 31, Q15 contract v2): every output row has its own shift; the kernel writes them beside O (RUN, and the
#: STREAM that divides) and READ returns them as tensor OSHIFT (4), a u8 per row; SETUP allocates `rows` bytes more
#: for them. Layouts are otherwise protocol 4's. The server refuses a q15attn older than MODULE_VERSION.
#: 6 (issue 32, grouped-query attention): SETUP may end with heads:u8, the query heads that share the K/V head set
#: up; Q, O and OSHIFT then hold `heads` blocks of a RUN's or STREAM's `nrows` rows (head after head), a streamed
#: head keeps a state per query head, the kernel runs once per head on the same K and V^T, and the reply's cycles are
#: the sum. Without the byte every frame is protocol 5's. RUN's and STREAM's row0 was always the rows' position in
#: the head of seq (a decode block's rows are seq - q_len .. seq - 1; docs/q15.md).
PROTOCOL = 6
#: The q15attn version (`version()`, HELLO's `module`) whose kernel computes the contract this protocol carries (v2:
#: a shift per output row); an older one computes contract v1 and is refused by the server and by the host.
MODULE_VERSION = 4
REPEAT_MAX = 255
NO_TEMP = -(1 << 31)
NO_CYCLES = 0xFFFFFFFF


class BoardRefused(TargetError):
    """The server answered a request with a status other than OK."""

    def __init__(self, kind: Kind, status: int, message: str):
        name = Status(status).name if status in Status._value2member_map_ else f"status {status}"
        super().__init__(f"board refused {kind.name}: {name}: {message}",
                         status="oom" if status == Status.E_MEMORY else "error")
        self.kind = kind
        self.code = status
        self.detail = message


def announced_protocol(payload: bytes) -> int:
    """The protocol a HELLO reply announces. Every version starts that reply with `status:u8 protocol:u8`, so a
    host can refuse a server of another version before parsing the rest, whose layout that version may change."""
    body = check_status(Kind.HELLO, payload)
    if not body:
        raise LinkError(f"HELLO reply of {len(payload)} bytes; expected at least {HELLO_REPLY.size}")
    return body[0]


def check_status(kind: Kind, payload: bytes) -> bytes:
    """The reply's payload after its status byte; BoardRefused when the status is not OK."""
    if not payload:
        raise LinkError(f"empty reply to {kind.name}")
    if payload[0] != Status.OK:
        raise BoardRefused(kind, payload[0], payload[1:].decode("utf-8", "replace"))
    return payload[1:]


@dataclass(frozen=True)
class Hello:
    """What the board says about itself when the server starts (and on HELLO)."""

    protocol: int
    mpy_abi: int
    clock_hz: int
    heap_free: int
    heap_total: int
    reserve: int
    max_data: int
    module_version: int
    machine: str
    firmware: str
    server_version: str
    #: LOAD requests the server lets a host keep in flight (it keeps that many replies); 1 where the line cannot
    #: hold back what the board has no room for (docs/protocol.md, "Windowed LOAD").
    window: int
    #: The largest single allocation the heap could give after the server's own buffers existed (to 16 bytes).
    largest_block: int

    @property
    def module_present(self) -> bool:
        return self.module_version > 0

    def module_refusal(self, port: str) -> str:
        """Why this board's q15attn cannot run this host's contract, in one line ('' when it can: the version this
        protocol needs, or later)."""
        if not self.module_present:
            return (f"{port}: q15attn is not on the board (deploy q15attn.mpy with python -m mcu.deploy --serial "
                    f"{port}, or bake it into the firmware)")
        if self.module_version < MODULE_VERSION:
            return (f"{port}: q15attn on the board is version {self.module_version}; this host needs version "
                    f"{MODULE_VERSION} (Q15 contract v2: output row shifts): re-deploy with python -m mcu.deploy "
                    f"--serial {port}")
        return ""

    @classmethod
    def parse(cls, payload: bytes) -> "Hello":
        payload = bytes(payload)
        if payload and payload[0] != Status.OK:
            raise BoardRefused(Kind.HELLO, payload[0], payload[1:].decode("utf-8", "replace"))
        if len(payload) < HELLO_REPLY.size:
            raise LinkError(f"HELLO reply of {len(payload)} bytes; expected at least {HELLO_REPLY.size}")
        status, *numbers = HELLO_REPLY.unpack_from(payload)
        if status != Status.OK:
            raise BoardRefused(Kind.HELLO, status, payload[1:].decode("utf-8", "replace"))
        texts, at = [], HELLO_REPLY.size
        for _ in range(3):
            if at >= len(payload) or at + 1 + payload[at] > len(payload):
                raise LinkError(f"HELLO reply truncated in its texts: {payload[HELLO_REPLY.size:]!r}")
            texts.append(payload[at + 1:at + 1 + payload[at]].decode("utf-8", "replace"))
            at += 1 + payload[at]
        if at + 5 != len(payload) or not payload[at]:
            raise LinkError(f"HELLO reply ends with {payload[at:]!r} after its texts; expected window:u8 >= 1 and "
                            "largest_block:u32")
        largest = struct.unpack_from("<I", payload, at + 1)[0]
        if largest > numbers[3]:  # heap_free: the search never goes past it
            raise LinkError(f"HELLO says largest_block {largest} with heap_free {numbers[3]}; allowed: "
                            f"0..{numbers[3]} (a block is part of the free heap)")
        return cls(*numbers, *texts, payload[at], largest)


@dataclass(frozen=True)
class RunReply:
    """RUN's answer: the DWT cycles of each repeat (None where untimed), temperature and VDDA (None if absent)."""

    cycles: tuple[int | None, ...]
    temp_c: float | None
    vdda_v: float | None

    @classmethod
    def parse(cls, payload: bytes, kind: Kind = Kind.RUN) -> "RunReply":
        """A RUN reply, or a STREAM reply (kind), whose layout is the same with one cycle count."""
        body = check_status(kind, payload)
        head = RUN_REPLY.size - 1
        if len(body) < head or (len(body) - head) % 4:
            raise LinkError(f"{kind.name} reply of {len(payload)} bytes is not a header and whole cycle counts")
        temp, vdda = struct.unpack_from("<iI", body)
        counts = struct.unpack_from(f"<{(len(body) - head) // 4}I", body, head)
        return cls(tuple(None if c == NO_CYCLES else c for c in counts),
                   None if temp == NO_TEMP else temp / 1000, vdda / 1000 if vdda else None)


def tensor_bytes(seq: int, dim: int, rows: int, keys: int | None = None, heads: int = 1) -> int:
    """The heap SETUP allocates (as the server): K and V^T for `keys` keys (default all seq, resident), Q and O for
    `rows` query rows of each of `heads` query heads, int16 each, O's row shifts (a byte per row), and a streamed
    head's state per query head (keys < seq)."""
    keys = seq if keys is None else keys
    return (2 * dim * (2 * keys + 2 * heads * rows) + heads * rows
            + (heads * state_bytes(dim, rows) if keys < seq else 0))


def setup_payload(seq: int, dim: int, causal: bool, bc: int, score_mult: int, score_shift: int, rows: int,
                  keys: int, heads: int = 1) -> bytes:
    """SETUP's payload: protocol 5's fields, then `heads` where it is more than 1 (protocol 6)."""
    if not 1 <= heads <= HEADS_MAX:
        raise TargetError(f"heads={heads} is out of range; allowed: 1..{HEADS_MAX} query heads on one K/V head")
    body = SETUP.pack(seq, dim, int(causal), bc, score_mult, score_shift, rows, keys)
    return body + SETUP_HEADS.pack(heads) if heads > 1 else body


def state_bytes(dim: int, rows: int) -> int:
    """q15attn.state_bytes (mcu/native/attention_q15_stream.c): a 32-byte header, then 2·ceil(dim/2) + 2 int64 per
    query row."""
    return 32 + rows * 8 * (2 * ((dim + 1) // 2) + 2)
