"""The twin's stdin and stdout as code on the board sees them: text cooked as the STM32 port cooks it (\\n -> \\r\\n),
`.buffer` raw bytes, reads blocking on the bytes the host sends through the link (mcu.sim.repl.Link)."""

from __future__ import annotations

from mcu.sim.repl import Link


class RawOut:
    """sys.stdout.buffer: bytes straight to the link."""

    def __init__(self, link: Link):
        self._link = link

    def write(self, data) -> int:
        data = bytes(memoryview(data).cast("B"))
        self._link.write(data)
        return len(data)

    def flush(self) -> None:
        pass


class TextOut:
    """sys.stdout / sys.stderr: text, cooked (\\n -> \\r\\n) as mp_hal_stdout_tx_strn_cooked does."""

    def __init__(self, link: Link):
        self.buffer = RawOut(link)
        self._link = link

    def write(self, text) -> int:
        if not isinstance(text, str):
            raise TypeError(f"can't convert '{type(text).__name__}' object to str implicitly")
        self._link.write(text.replace("\n", "\r\n").encode("utf-8", "surrogateescape"))
        return len(text)

    def flush(self) -> None:
        pass


class RawIn:
    """sys.stdin.buffer: blocking reads of the bytes the host sends."""

    def __init__(self, link: Link):
        self._link = link

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            data = self._link.read_some(1)
            return data + self._link.read_some(4096, timeout=0) if self._link.available() else data
        return self._link.read(size)

    def readinto(self, buf, size: int | None = None) -> int:
        view = memoryview(buf).cast("B")
        n = len(view) if size is None else min(size, len(view))
        view[:n] = self._link.read(n)
        return n

    def readline(self) -> bytes:
        line = bytearray()
        while not line.endswith(b"\n"):
            line += self._link.read(1)
        return bytes(line)


class TextIn:
    """sys.stdin: the same bytes decoded as UTF-8."""

    def __init__(self, link: Link):
        self.buffer = RawIn(link)

    def read(self, size: int = -1) -> str:
        return self.buffer.read(size).decode("utf-8", "replace")

    def readline(self) -> str:
        return self.buffer.readline().decode("utf-8", "replace")
