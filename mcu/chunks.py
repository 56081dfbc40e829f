"""How many tensor bytes the host puts in one LOAD frame, and asks for in one READ, on a line that may be noisy.

A frame of n bytes gets through a line of byte error rate p whole with probability (1 - p)^n, so the board's largest
chunk (HELLO's `max_data`, 1 KB) that costs nothing on a clean line is hopeless on a noisy one: at p = 0.006 a 1 KB
LOAD arrives 0.2 % of the time. `ChunkPolicy` adapts the chunk as TCP adapts its window, multiplicatively both ways:
it starts at the board's largest (so a clean line sends exactly the frames it always did), halves after
`SHRINK_AFTER` failed frames in a row down to `CHUNK_FLOOR`, and doubles after `GROW_AFTER` frames in a row got
through, up to the board's largest again. docs/protocol.md ("A noisy line") derives the figures: the expected time
per useful byte and the chunk size that minimises it.

One policy serves both directions (LOAD's requests and READ's replies): a board's line is one cable, noisy both ways
or neither, and the frequent LOADs teach it what the rarer READs then use.
"""

from __future__ import annotations

from host.errors import SpecError

#: The smallest chunk: 32 tensor bytes ride in a 48-byte LOAD frame (pad, COBS, header, LOAD's tensor and offset,
#: CRC, delimiter) answered by a 12-byte reply, so at drop = flip = 0.01 per byte (p ≈ 0.02) one exchange in
#: 0.98^60 ≈ 0.30 gets through; halving again would gain little (0.98^44 ≈ 0.41) for half the data per frame.
CHUNK_FLOOR = 32
#: Failed frames in a row before the chunk halves: one. A loss on a clean line is rare (a frame of 1 KB on the twin's
#: clean pty never fails), so a loss is evidence enough; a line that lost one frame by chance wins the size back
#: after GROW_AFTER passes.
SHRINK_AFTER = 1
#: Frames in a row that got through before the chunk doubles. With one failure halving, the chunk settles where a
#: run of GROW_AFTER passes is about as likely as a failure before it, s^GROW_AFTER ≈ 1/2 for a frame's chance s:
#: s ≈ 0.79 for 3, near the chunk that minimises the time per byte when each failure costs far more than a frame's
#: bytes (a resend's FLUSH and the wait that detected it; docs/protocol.md).
GROW_AFTER = 3


class ChunkPolicy:
    """The chunk size for the next LOAD or READ frame; told of each frame's fate with passed() and failed()."""

    def __init__(self, ceiling: int, floor: int = CHUNK_FLOOR, shrink_after: int = SHRINK_AFTER,
                 grow_after: int = GROW_AFTER):
        if not 1 <= floor <= ceiling:
            raise SpecError(f"chunk floor={floor}, ceiling={ceiling}; allowed: 1 <= floor <= ceiling bytes")
        if shrink_after < 1 or grow_after < 1:
            raise SpecError(f"shrink_after={shrink_after}, grow_after={grow_after}; allowed: >= 1 frames")
        self.floor = floor
        self.ceiling = ceiling
        self.shrink_after = shrink_after
        self.grow_after = grow_after
        self.size = ceiling
        self.smallest = ceiling  # the smallest chunk used so far, for the row's message
        self._passes = 0
        self._failures = 0

    def resize(self, ceiling: int) -> None:
        """A new session's board allows `ceiling` (HELLO's max_data): keep what the line taught, within it."""
        self.ceiling = max(self.floor, ceiling)
        self.size = min(self.size, self.ceiling)

    def passed(self, nbytes: int) -> None:
        """A frame carrying `nbytes` of tensor data got through on its first sending."""
        self._failures = 0
        self._passes += 1
        if self._passes >= self.grow_after and self.size < self.ceiling:
            self.size = min(self.ceiling, self.size * 2)
            self._passes = 0

    def failed(self, nbytes: int) -> None:
        """A frame carrying `nbytes` was lost (or its reply was). A frame larger than the current chunk was cut
        before the last halving, which its loss already caused: it does not halve again."""
        self._passes = 0
        if nbytes > self.size:
            return
        self._failures += 1
        if self._failures >= self.shrink_after and self.size > self.floor:
            self.size = max(self.floor, self.size // 2)
            self.smallest = min(self.smallest, self.size)
            self._failures = 0
