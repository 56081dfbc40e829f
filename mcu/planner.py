"""The board's RAM plan for one head: how many query rows go to the board at once, or why nothing fits.

The frame server holds K and V^T whole (2·seq·dim int16 each) and Q and O for `rows` query rows (mcu.messages.
tensor_bytes); it keeps `reserve` bytes free for frames and the interpreter. From the HELLO figures (heap free after
the server started, reserve, less SLACK) the planner takes the largest `rows` that fits, spreads the query rows evenly over the
fewest chunks, and refuses with one line naming the limit and the largest seq that fits.

    python -m mcu.planner [--heap-free BYTES] [--reserve BYTES] [--dim 32,64]

prints the largest seq per dim for a heap (default: the twin's 100 KB heap as its HELLO reports it).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Sequence

from host.cli_common import Parser, guard, int_list, integer
from host.errors import TargetError
from host.q15 import DIM_MAX, SEQ_MAX
from mcu.messages import tensor_bytes

#: The twin's HELLO on its 100 KB heap after mcu.deploy and the server start (python -m mcu.link_bench prints it).
TWIN_HEAP_FREE = 89_756
SERVER_RESERVE = 8 * 1024
#: Heap the planner leaves beyond the reserve: the request being answered, the decoder's buffer and the allocator's
#: 16-byte blocks are live when SETUP measures gc.mem_free() (HELLO measured it with less in use).
SLACK = 1024


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

    def row_blocks(self) -> list[tuple[int, int]]:
        """(row0, nrows) of each chunk, covering 0 .. seq-1."""
        return [(row0, min(self.rows, self.seq - row0)) for row0 in range(0, self.seq, self.rows)]


def budget(heap_free: int, reserve: int) -> int:
    """Bytes the tensors may take: HELLO's free heap less the server's reserve and SLACK."""
    return heap_free - reserve - SLACK


def largest_seq(dim: int, heap_free: int, reserve: int) -> int:
    """The longest sequence whose K and V^T fit beside one query row (0 if none does)."""
    return max(0, min(SEQ_MAX, (budget(heap_free, reserve) - 4 * dim) // (4 * dim)))


def plan(seq: int, dim: int, heap_free: int, reserve: int) -> Plan:
    """The chunking for one (seq, dim) head, or DoesNotFit."""
    room = budget(heap_free, reserve)
    if tensor_bytes(seq, dim, 1) > room:
        raise DoesNotFit(
            f"seq={seq} dim={dim} needs {tensor_bytes(seq, dim, 1)} bytes of board heap for K and V^T and one query "
            f"row; the board has {max(0, room)} ({heap_free} free - {reserve} reserve - {SLACK} slack); largest seq "
            f"that fits at dim {dim}: {largest_seq(dim, heap_free, reserve)}")
    rows = min(seq, (room - 4 * seq * dim) // (4 * dim))
    chunks = math.ceil(seq / rows)
    rows = math.ceil(seq / chunks)
    return Plan(seq, dim, rows, chunks, tensor_bytes(seq, dim, rows), room)


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog="python -m mcu.planner", description=__doc__.splitlines()[0])
    parser.add_argument("--heap-free", type=integer("heap-free", 1, 1 << 31), default=TWIN_HEAP_FREE,
                        help="gc.mem_free() after the server started (HELLO's heap_free)")
    parser.add_argument("--reserve", type=integer("reserve", 0, 1 << 31), default=SERVER_RESERVE,
                        help="bytes the server keeps free (HELLO's reserve)")
    parser.add_argument("--dim", type=int_list("dim", 1, DIM_MAX), default=(32, 64))

    def body() -> int:
        args = parser.parse_args(argv)
        print(f"heap free {args.heap_free} B, reserve {args.reserve} B")
        print("| dim | largest seq | rows per chunk at that seq | bytes |\n|---|---|---|---|")
        for dim in args.dim:
            seq = largest_seq(dim, args.heap_free, args.reserve)
            if seq == 0:
                print(f"| {dim} | none fits | - | - |")
                continue
            best = plan(seq, dim, args.heap_free, args.reserve)
            print(f"| {dim} | {seq} | {best.rows} | {best.need} |")
        return 0

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
