"""The twin's stdin and stdout as code on the board sees them: text cooked as the STM32 port cooks it (\\n -> \\r\\n),
`.buffer` raw bytes, reads blocking on the bytes the host sends through the link (mcu.sim.uart.Link).

They are native objects, as on the board (mcu.sim.sealed.Native), named as the STM32 port names them: the streams
are `TextIOWrapper`s (printed `<io.TextIOWrapper 1>`) over `FileIO` buffers (`<io.FileIO 1>`).
`sys.stdout.write = f` raises AttributeError ("'TextIOWrapper' object has no attribute 'write'"), the class cannot
be patched either, and the link behind them is not an attribute, so board code cannot silence or redirect the twin's
output beyond its own session.
"""

from __future__ import annotations

from mcu.sim.sealed import Native, board_named, hidden
from mcu.sim.uart import Link

STDIN_FD, STDOUT_FD = 0, 1


class Stream(Native):
    """One of the board's stdio objects, printed as stdio_obj_print prints it: `<io.TextIOWrapper 1>`."""

    __slots__ = ("buffer",)
    FD = STDOUT_FD

    def __repr__(self) -> str:
        return f"<io.{self._board_type()} {self.FD}>"


@board_named
class RawOut(Stream):
    """sys.stdout.buffer: bytes straight to the link."""

    __slots__ = ()

    def write(self, data) -> int:
        data = bytes(memoryview(data).cast("B"))
        link: Link = hidden(self)
        link.write(data)
        return len(data)

    def flush(self) -> None:
        pass


@board_named
class TextOut(Stream):
    """sys.stdout / sys.stderr: text, cooked (\\n -> \\r\\n) as mp_hal_stdout_tx_strn_cooked does."""

    __slots__ = ()
    BOARD_TYPE = "TextIOWrapper"

    def __init__(self, link: Link):
        super().__init__(link)
        object.__setattr__(self, "buffer", RawOut(link))

    def write(self, text) -> int:
        if not isinstance(text, str):
            raise TypeError(f"can't convert '{type(text).__name__}' object to str implicitly")
        link: Link = hidden(self)
        link.write(text.replace("\n", "\r\n").encode("utf-8", "surrogateescape"))
        return len(text)

    def flush(self) -> None:
        pass


@board_named
class RawIn(Stream):
    """sys.stdin.buffer: blocking reads of the bytes the host sends."""

    __slots__ = ()
    FD = STDIN_FD

    def read(self, size: int = -1) -> bytes:
        link: Link = hidden(self)
        if size is None or size < 0:
            data = link.read_some(1)
            return data + link.read_some(4096, timeout=0) if link.available() else data
        return link.read(size)

    def readinto(self, buf, size: int | None = None) -> int:
        view = memoryview(buf).cast("B")
        n = len(view) if size is None else min(size, len(view))
        view[:n] = hidden(self).read(n)
        return n

    def readline(self) -> bytes:
        link: Link = hidden(self)
        line = bytearray()
        while not line.endswith(b"\n"):
            line += link.read(1)
        return bytes(line)


@board_named
class TextIn(Stream):
    """sys.stdin: the same bytes decoded as UTF-8."""

    __slots__ = ()
    BOARD_TYPE = "TextIOWrapper"
    FD = STDIN_FD

    def __init__(self, link: Link):
        super().__init__(link)
        object.__setattr__(self, "buffer", RawIn(link))

    def read(self, size: int = -1) -> str:
        return self.buffer.read(size).decode("utf-8", "replace")

    def readline(self) -> str:
        return self.buffer.readline().decode("utf-8", "replace")
