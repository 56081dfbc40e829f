"""The board's RAM plan for one head: how many query rows and keys go to the board at once, or why nothing fits.

The frame server keeps `reserve` bytes free for frames and the interpreter; the planner works with HELLO's free heap
less that reserve and SLACK, and no more than HELLO's largest block less BLOCK_MARGIN (SETUP puts the tensors in one
block: free heap is not contiguous heap); where no plan fits that block, with a block per tensor, each within it (as
SETUP then allocates them). Where K and V^T fit whole (2·seq·dim int16 each) beside at least one query
row, the head is resident: K and V^T go once, then Q and O (and O's row shifts, a byte per row) in chunks of `rows`
query rows, the largest that fits, spread evenly over the fewest chunks. Where they do not, the head is streamed
(docs/q15.md §7, docs/protocol.md): the board holds `keys` keys of K and V^T at a time (a multiple of Bc, the
contract's `host.q15.BC` = 64 for every head a target runs) and the online-softmax state of `rows` query rows
(mcu.messages.tensor_bytes, state_bytes), and every chunk of query rows takes all key chunks in turn. Each
query chunk sends K and V^T again, and each key chunk costs a request, so the planner picks the (rows, keys) that
fits with the least link cost: bytes sent plus CALL_COST_BYTES per STREAM. It refuses with one line naming the limit
only when not even one query row and one key block fit.

Decode and grouped heads (issue 32): a head's `queries` (q_len) rows are its last ones (rows seq - q_len .. seq - 1),
and the `group` query heads that read one K/V head share its K and V^T on the board: each RUN or STREAM takes `heads`
of them (a divisor of the group) as blocks of the same rows (SETUP's heads, protocol 6). Resident, K and V^T go once
per K/V head whatever `heads` is; streamed, once per block of `heads` query heads and chunk of rows, so the planner
takes the (heads, rows, keys) of least link cost, which is the whole group in one block wherever its rows fit.

    python -m mcu.planner [--heap-free BYTES] [--reserve BYTES] [--largest-block BYTES] [--dim 32,64]
                          [--seq 512,32768] [--bc 64] [--q-len N] [--group G]

prints, per dim, the largest resident seq and the plan of each seq (default: the twin's 100 KB heap as its HELLO
reports it), for heads of N queries (default: seq) and G query heads per K/V head (default 1), and the most query
rows (query heads × rows) one STREAM of Bc keys can take. A head that does not fit is a row saying why, and the
whole table is printed; then one line counts the heads that do not fit, and the status is 1: each argument is valid
on its own, and the answer for those heads is no.
Exit status: 0 printed, every head fits; 1 printed, some head does not fit (one `kbench:` line after the table); 2
bad arguments only (one `kbench: error:` line naming the value: also a --reserve that leaves no heap of --heap-free);
130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Sequence

from host.cli_common import Parser, guard, int_list, integer
from host.errors import SpecError, TargetError
from host.q15 import BC, BC_MAX, DIM_MAX, SEQ_MAX
from mcu.messages import HEADS_MAX, state_bytes, tensor_bytes

#: The twin's HELLO on the F407's 100 KB heap after mcu.deploy and the server start (`python -m mcu.link_bench --seq 16
#: --dim 8 --rounds 1 --windows 1` prints it; 2026-12-07, the VM twin): the free heap and its largest block. (92,178
#: free was the re-implemented twin's before issue 30, whose heap had no pieces.)
TWIN_HEAP_FREE = 59_840
TWIN_LARGEST_BLOCK = 29_920
SERVER_RESERVE = 8 * 1024
SLACK = 1024
"""Heap the planner leaves beyond the server's reserve, for what is live when SETUP measures gc.mem_free() and HELLO
did not count: the SETUP request and its decoded payload (under 64 B), its reply (9 B), the allocator's rounding of
the up to five tensor blocks to its 16-byte units (under 80 B), and the server's per-request objects (its reply
list, a struct tuple: a few hundred bytes under MicroPython). That is under 512 B; 1 KB keeps twice that, and is
not a measured figure: where the board still refuses a plan for memory (a fragmented heap, whose largest block is
smaller than its free figure), the head replans smaller (`smaller`, mcu/head.py), rather than the slack growing
for every board."""
BLOCK_MARGIN = 512
"""Bytes the planner leaves below HELLO's largest block (protocol 4), since SETUP puts the tensors in one block: the
objects of the SETUP request itself (its payload's view, the struct tuple, the reply: under 200 B under
MicroPython), which the allocator may place at that block's start, and the rounding of the block to 16-byte units.
Where the heap changed since HELLO and SETUP still refuses, the head replans smaller (`smaller`)."""
#: A STREAM request's own cost, in bytes of link traffic it is worth: a request and reply round trip (about 2 ms over
#: the F407's USB full speed, at the ~1 MB/s a window of LOADs moves).
CALL_COST_BYTES = 2048


class DoesNotFit(TargetError):
    """The head's tensors cannot fit the board's heap even one query row at a time."""

    def __init__(self, message: str):
        super().__init__(message, status="oom")


@dataclass(frozen=True)
class Plan:
    seq: int
    dim: int
    rows: int  # query rows per chunk
    chunks: int
    need: int  # bytes SETUP allocates
    budget: int  # heap free minus the server's reserve
    keys: int  # keys of K and V^T on the board at once: seq (resident), or a streamed chunk (a multiple of Bc)
    split: bool = False  # planned for a block per tensor (no plan fit the largest block whole): budget is the free heap
    queries: int = 0  # query rows per query head, the head's last ones (q_len); 0: seq, a square head
    heads: int = 1  # query heads per RUN or STREAM on the K and V^T (SETUP's heads): a divisor of group
    group: int = 1  # query heads that read this K/V head (grouped-query attention; 1: none)

    def __post_init__(self) -> None:
        if not self.queries:
            object.__setattr__(self, "queries", self.seq)

    @property
    def streamed(self) -> bool:
        return self.keys < self.seq

    @property
    def blocks(self) -> int:
        """Blocks of `heads` query heads the group is run in."""
        return self.group // self.heads

    @property
    def kv_sends(self) -> int:
        """How often K and V^T of the K/V head go over the link (not causal): once resident, else once per block of
        query heads and chunk of rows."""
        return self.blocks * self.chunks if self.streamed else 1

    def row_blocks(self) -> list[tuple[int, int]]:
        """(row0, nrows) of each chunk, covering 0 .. queries-1 (of the head's queries)."""
        return [(row0, min(self.rows, self.queries - row0)) for row0 in range(0, self.queries, self.rows)]

    def link_bytes(self) -> int:
        """Tensor bytes a non-causal K/V head's group sends and reads back: K and V^T `kv_sends` times, every query
        head's Q and O once (and O's row shifts)."""
        return 4 * self.seq * self.dim * self.kv_sends + self.group * self.queries * (4 * self.dim + 1)

    def with_rows(self, rows: int) -> "Plan":
        """This plan with at most `rows` query rows per chunk (as a head's smaller chunks after a lost session)."""
        if rows >= self.rows:
            return self
        return Plan(self.seq, self.dim, rows, math.ceil(self.queries / rows),
                    tensor_bytes(self.seq, self.dim, rows, self.keys, self.heads), self.budget, self.keys, self.split,
                    self.queries, self.heads, self.group)

    def label(self) -> str:
        """`rows×keys (need B)`: keys 'all' for a resident head; `heads×rows×keys` where a block has several heads."""
        heads = f"{self.heads}×" if self.heads > 1 else ""
        return f"{heads}{self.rows}×{'all' if not self.streamed else self.keys} ({self.need:,} B)"

    def describe(self) -> str:
        how = (f"streamed: {self.keys} keys at a time, K and V^T sent {self.kv_sends}x" if self.streamed
               else "resident K and V^T")
        where = ", a block per tensor" if self.split else ""
        heads = (f" of {self.heads} query heads at once ({self.blocks} block(s) for the group of {self.group})"
                 if self.group > 1 else "")
        return f"{self.chunks} chunk(s) of {self.rows} query rows{heads}, {how}, {self.need} B of board heap{where}"


def budget(heap_free: int, reserve: int, largest: int | None = None) -> int:
    """Bytes the tensors may take: HELLO's free heap less the server's reserve and SLACK, and no more than its
    largest block less BLOCK_MARGIN where the board says it (protocol 4; None: not known)."""
    room = heap_free - reserve - SLACK
    return room if largest is None else min(room, largest - BLOCK_MARGIN)


def room_text(heap_free: int, reserve: int, largest: int | None) -> str:
    """How the budget was reached, for messages."""
    text = f"{heap_free} free - {reserve} reserve - {SLACK} slack"
    if largest is not None and largest - BLOCK_MARGIN < heap_free - reserve - SLACK:
        text = f"its largest block {largest} - {BLOCK_MARGIN} margin; {text}"
    return text


def row_bytes(dim: int) -> int:
    """Bytes one more query row takes on the board, resident: its Q and O (int16) and its output shift (a byte)."""
    return 4 * dim + 1


def largest_seq(dim: int, heap_free: int, reserve: int, largest: int | None = None) -> int:
    """The longest sequence whose K and V^T fit whole beside one query row (0 if none does): a resident head."""
    return max(0, min(SEQ_MAX, (budget(heap_free, reserve, largest) - row_bytes(dim)) // (4 * dim)))


def _spread(seq: int, rows: int) -> tuple[int, int]:
    """(rows per chunk, chunks): at most `rows`, the query rows spread evenly over the fewest chunks."""
    chunks = math.ceil(seq / rows)
    return math.ceil(seq / chunks), chunks


def plan(seq: int, dim: int, heap_free: int, reserve: int, bc: int = BC, cap: int | None = None,
         largest: int | None = None, queries: int | None = None, group: int = 1) -> Plan:
    """The plan for one (seq, dim) head with key blocks of Bc: resident where K and V^T fit, else streamed; or
    DoesNotFit. `cap` (bytes) lowers the room below the heap's budget: the best plan whose tensors take at most that.
    `largest`: the board's largest block (HELLO, protocol 4), which the tensors, one block, should fit. Where no plan
    fits it, SETUP gives each tensor a block of its own (kbench_board.carve): then the free heap bounds their sum and
    the largest block each of them (a Bc block of K at dim 128 is 16 KB: K and V^T of one block, 32 KB, may exceed the
    largest block of a heap that has two of 16 KB). Should the heap lack the second block, SETUP refuses for memory
    and the head replans smaller (mcu/head.py). `queries`: the head's query rows (q_len, its last ones; None: seq);
    `group`: the query heads that share this K/V head (each RUN or STREAM takes a divisor of them)."""
    if not 1 <= bc <= BC_MAX:
        raise TargetError(f"bc={bc} is out of range; allowed: 1..{BC_MAX}")
    queries = seq if queries is None else queries
    if not 1 <= queries <= seq:
        raise TargetError(f"queries={queries} is out of range; allowed: 1..{seq} (seq)")
    if not 1 <= group <= HEADS_MAX:
        raise TargetError(f"group={group} is out of range; allowed: 1..{HEADS_MAX} query heads per K/V head")
    room = budget(heap_free, reserve, largest)
    room = room if cap is None else min(cap, room)
    chosen = _best(seq, dim, room, bc, None, queries, group)
    if chosen is None and largest is not None:
        free = budget(heap_free, reserve) if cap is None else min(cap, budget(heap_free, reserve))
        chosen = _best(seq, dim, free, bc, largest - BLOCK_MARGIN, queries, group)
    if chosen is not None:
        return chosen
    if seq <= bc:
        raise DoesNotFit(
            f"seq={seq} dim={dim} needs {tensor_bytes(seq, dim, 1)} bytes of board heap for K and V^T and one query "
            f"row, and a head of at most Bc={bc} keys cannot be streamed; the board has {max(0, room)} "
            f"({room_text(heap_free, reserve, largest)})")
    smallest = tensor_bytes(seq, dim, 1, bc)
    raise DoesNotFit(
        f"seq={seq} dim={dim} needs {smallest} bytes of board heap even streamed ({bc} keys of K "
        f"and V^T at Bc={bc}, one query row and its state); the board has {max(0, room)} "
        f"({room_text(heap_free, reserve, largest)})")


def _divisors(group: int) -> list[int]:
    """The block sizes a group of query heads can be run in, largest first."""
    return [heads for heads in range(group, 0, -1) if group % heads == 0]


def _best(seq: int, dim: int, room: int, bc: int, piece: int | None = None, queries: int | None = None,
          group: int = 1) -> Plan | None:
    """The cheapest plan whose tensors take at most `room` bytes, each at most `piece` (None: in one block of `room`;
    a number: each tensor in a block of its own, none larger than that); None where none fits. Resident: the fewest
    RUNs (blocks of query heads × chunks of rows), K and V^T going once; streamed: the least link cost."""
    split = piece is not None
    piece = room if piece is None else piece
    queries = seq if queries is None else queries
    per_row = row_bytes(dim) + state_bytes(dim, 1) - state_bytes(dim, 0)  # Q, O, shift and state of one more row
    header = state_bytes(dim, 0)  # each query head's state starts with one
    if tensor_bytes(seq, dim, 1) <= room and 2 * seq * dim <= piece:
        best = None
        for heads in _divisors(group):
            most = min(queries, (room - 4 * seq * dim) // (heads * row_bytes(dim)), piece // (2 * dim * heads))
            if most < 1:
                continue
            rows, chunks = _spread(queries, most)
            runs = group // heads * chunks
            if best is None or runs < best[0]:
                best = (runs, Plan(seq, dim, rows, chunks, tensor_bytes(seq, dim, rows, seq, heads), room, seq, split,
                                   queries, heads, group))
        if best is not None:
            return best[1]
    best = None
    for heads in _divisors(group):
        most_rows = min(piece // (2 * dim * heads), (piece - heads * header) // (heads * (per_row - row_bytes(dim))))
        for keys in range(bc, seq, bc):
            rows = min(queries, (room - 4 * dim * keys - heads * header) // (heads * per_row), most_rows)
            if rows < 1 or 2 * dim * keys > piece:
                break
            rows, chunks = _spread(queries, rows)
            cost = group // heads * chunks * (4 * seq * dim + math.ceil(seq / keys) * CALL_COST_BYTES)
            if best is None or cost < best[0]:
                best = (cost, Plan(seq, dim, rows, chunks, tensor_bytes(seq, dim, rows, keys, heads), room, keys,
                                   split, queries, heads, group))
    return None if best is None else best[1]


def smaller(layout: Plan, heap_free: int, reserve: int, bc: int, largest: int | None = None) -> Plan | None:
    """The plan to try after the board refused `layout` for memory, or None where none is smaller: rows first, half
    the query rows, spread as `plan` spreads them, the same keys; at one query row, keys: half the keys on the Bc grid
    (a resident head becomes streamed), and the best plan within that one row's bytes (`plan` with that cap, which may
    take fewer keys and more rows). Each plan needs fewer bytes than the one before, and no key chunk is larger."""
    seq, dim, heads = layout.seq, layout.dim, layout.heads
    same = (layout.queries, heads, layout.group)
    if layout.rows > 1:
        rows, chunks = _spread(layout.queries, layout.rows // 2)
        return Plan(seq, dim, rows, chunks, tensor_bytes(seq, dim, rows, layout.keys, heads), layout.budget,
                    layout.keys, layout.split, *same)
    if heads > 1:  # one row of each head: fewer heads per block (the next divisor of the group)
        fewer = next(n for n in _divisors(layout.group) if n < heads)
        return Plan(seq, dim, 1, layout.queries, tensor_bytes(seq, dim, 1, layout.keys, fewer), layout.budget,
                    layout.keys, layout.split, layout.queries, fewer, layout.group)
    keys = max(bc, (layout.keys // 2) // bc * bc)
    if keys >= layout.keys or keys >= seq:  # already one Bc block, or a head of at most Bc keys: nothing smaller
        return None
    cap = tensor_bytes(seq, dim, 1, keys)
    if cap >= layout.need:  # a row's state outweighs the keys saved (a tiny dim): streaming would not be smaller
        return None
    return plan(seq, dim, heap_free, reserve, bc, cap=cap, largest=largest, queries=layout.queries,
                group=layout.group)


def build_parser() -> Parser:
    parser = Parser(prog="python -m mcu.planner", doc=__doc__)
    parser.add_argument("--heap-free", type=integer("heap-free", 1, 1 << 31), default=TWIN_HEAP_FREE, metavar="BYTES",
                        help=f"gc.mem_free() after the server started (HELLO's heap_free; default {TWIN_HEAP_FREE}, "
                             "the twin's)")
    parser.add_argument("--reserve", type=integer("reserve", 0, 1 << 31), default=SERVER_RESERVE, metavar="BYTES",
                        help=f"bytes the server keeps free (HELLO's reserve; default {SERVER_RESERVE})")
    parser.add_argument("--largest-block", type=integer("largest-block", BLOCK_MARGIN + 1, 1 << 31), default=None,
                        metavar="BYTES",
                        help="the largest block the board's heap can give (HELLO's largest_block; default: the "
                             f"twin's {TWIN_LARGEST_BLOCK} with the twin's --heap-free, else not limited beyond "
                             "--heap-free)")
    parser.add_argument("--dim", type=int_list("dim", 1, DIM_MAX), default=(32, 64), metavar="LIST",
                        help="head dimensions d, comma-separated (default 32,64)")
    parser.add_argument("--seq", type=int_list("seq", 1, SEQ_MAX), default=(512, 4096, SEQ_MAX), metavar="LIST",
                        help=f"sequence lengths N, comma-separated (default 512,4096,{SEQ_MAX})")
    parser.add_argument("--bc", type=integer("bc", 1, BC_MAX), default=BC,
                        help=f"keys per block Bc (default {BC}, the contract's: host.q15.BC)")
    parser.add_argument("--q-len", type=integer("q-len", 1, SEQ_MAX), default=None, metavar="N",
                        help="query rows per head, its last ones (a decode block; default: seq, a square head)")
    parser.add_argument("--group", type=integer("group", 1, HEADS_MAX), default=1, metavar="G",
                        help="query heads per K/V head (grouped-query attention; default 1)")
    return parser


def stream_rows(dim: int, heap_free: int, reserve: int, bc: int = BC, largest: int | None = None) -> int:
    """The most query rows (of one query head, or of several heads: each adds a state header of 32 B) that one
    STREAM of Bc keys can take (0 if not one): in one block within the budget, or, where not even one row fits so
    and the board said its largest block, with a block per tensor (the free heap bounding their sum, the largest
    block each), as `plan` falls back."""
    per_row = row_bytes(dim) + state_bytes(dim, 1) - state_bytes(dim, 0)
    state_row = per_row - row_bytes(dim)
    whole = (budget(heap_free, reserve, largest) - 4 * dim * bc - state_bytes(dim, 0)) // per_row
    if largest is None or whole >= 1:
        return max(0, whole)
    piece = largest - BLOCK_MARGIN
    split = min((budget(heap_free, reserve) - 4 * dim * bc - state_bytes(dim, 0)) // per_row, piece // (2 * dim),
                (piece - state_bytes(dim, 0)) // state_row)
    return max(0, split) if 2 * dim * bc <= piece else 0


def main(argv: Sequence[str] | None = None) -> int:
    def body() -> int:
        args = build_parser().parse_args(argv)
        largest = args.largest_block
        if largest is None and args.heap_free == TWIN_HEAP_FREE:  # the twin's heap is in pieces: its HELLO says so
            largest = TWIN_LARGEST_BLOCK
        if largest is not None and largest > args.heap_free:
            raise SpecError(f"--largest-block {largest} is more than --heap-free {args.heap_free}; allowed: "
                            f"{BLOCK_MARGIN + 1}..{args.heap_free} (the planner keeps {BLOCK_MARGIN} B of the block)")
        if args.heap_free <= SLACK:
            raise SpecError(f"--heap-free {args.heap_free} leaves no board heap whatever the reserve (the planner "
                            f"keeps {SLACK} B of slack); allowed: --heap-free above {SLACK + args.reserve}")
        if budget(args.heap_free, args.reserve) < 1:
            raise SpecError(f"--reserve {args.reserve} leaves no board heap of --heap-free {args.heap_free} "
                            f"(the planner also keeps {SLACK} B of slack); allowed: --reserve below "
                            f"{args.heap_free - SLACK}")
        if args.q_len is not None and args.q_len > min(args.seq):
            raise SpecError(f"--q-len {args.q_len} is more than --seq {min(args.seq)}; allowed: 1..{min(args.seq)} "
                            "(queries against a KV cache of seq keys)")
        misfits = []
        print(f"heap free {args.heap_free} B, reserve {args.reserve} B, slack {SLACK} B (mcu.planner.SLACK), "
              + (f"largest block {largest} B less {BLOCK_MARGIN} B margin (mcu.planner.BLOCK_MARGIN), "
                 if largest is not None else "") + f"Bc {args.bc}")
        shape = (f"heads of {args.q_len or 'seq'} query rows" + (f", {args.group} query heads per K/V head"
                                                                    if args.group > 1 else ""))
        print(f"{shape}; link bytes per K/V head (its query heads' Q and O included)")
        print("| dim | largest resident seq | seq | plan | link bytes per K/V head | most query rows per STREAM of "
              "Bc keys |\n|---|---|---|---|---|---|")
        for dim in args.dim:
            resident = largest_seq(dim, args.heap_free, args.reserve, largest)
            most = stream_rows(dim, args.heap_free, args.reserve, args.bc, largest)
            for seq in args.seq:
                try:
                    chosen = plan(seq, dim, args.heap_free, args.reserve, args.bc, largest=largest,
                                  queries=args.q_len, group=args.group)
                    text, traffic = chosen.describe(), f"{chosen.link_bytes():,}"
                except DoesNotFit as exc:
                    text, traffic = f"does not fit: {exc}", "-"
                    misfits.append(f"seq={seq} dim={dim}")
                print(f"| {dim} | {resident or 'none'} | {seq} | {text} | {traffic} | {most} |")
        if misfits:
            heads = len(args.dim) * len(args.seq)
            raise DoesNotFit(f"{len(misfits)} of {heads} heads do not fit the board's heap ({', '.join(misfits)}): "
                             "see their rows")
        return 0

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
