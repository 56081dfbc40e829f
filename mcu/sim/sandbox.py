"""The twin's filesystem: board paths mapped onto one host folder that nothing sent to the twin can leave.

The board sees a single FAT-like volume: '/' is the host folder given as `--root`, and '/flash' (the STM32 port's
mount point) is an alias of '/'. Every path is normalised against the board's current directory before it touches
the host: a '..' that would climb above '/' is refused with EACCES, an absolute host path such as '/etc/passwd' is
just a board path that does not exist (ENOENT), and a symlink inside the folder that resolves outside it is refused
with EACCES. Only directories and regular files are visible.

Errors are raised as MicroPython raises them: `OSError` whose only argument is the errno number, printed
"[Errno 2] ENOENT". This keeps honest code inside the folder; it is not a security boundary against code written
to escape CPython (docs/twin.md).
"""

from __future__ import annotations

import errno
import io
import os
import stat
import time
import weakref
from pathlib import Path
from typing import Iterator

EPOCH_2000 = 946_684_800  # the STM32 port counts file times from 2000-01-01
FLASH_ALIAS = "flash"
BLOCK_SIZE = 512
VOLUME_BLOCKS = 2048  # a nominal 1 MB volume for statvfs; writes are not limited by it
MODE_DIR, MODE_FILE = 0x4000, 0x8000
FILE_MODE_CHARS = set("rwaxbt+")


class BoardOSError(OSError):
    """OSError as MicroPython builds it: args == (errno,), `.errno` set, str() "[Errno 2] ENOENT"."""

    def __init__(self, code: int):
        super().__init__(code)
        self.errno = code

    def __str__(self) -> str:
        return f"[Errno {self.errno}] {errno.errorcode.get(self.errno, str(self.errno))}"


BoardOSError.__name__ = BoardOSError.__qualname__ = "OSError"


def board_error(code: int) -> BoardOSError:
    return BoardOSError(code)


def from_host(exc: OSError) -> BoardOSError:
    """A host OSError as the board would report it: the errno only, never the host path."""
    return BoardOSError(exc.errno if exc.errno else errno.EIO)


class BoardFile:
    """An open file on the board: the methods MicroPython's io.FileIO/TextIOWrapper have, over a host file object
    that is not handed out (so `.name` and `.buffer` cannot reveal the host path)."""

    def __init__(self, raw, text: bool, owner: "Sandbox"):
        self._raw = raw
        self._text = text
        self._owner = owner

    def __repr__(self) -> str:
        kind = "TextIOWrapper" if self._text else "FileIO"
        return f"<io.{kind} {id(self) & 0xFFFFFFFF:x}>"

    def _call(self, name: str, *args):
        if self._raw.closed:
            raise board_error(errno.EBADF)
        try:
            return getattr(self._raw, name)(*args)
        except io.UnsupportedOperation:
            raise board_error(errno.EINVAL) from None
        except OSError as exc:
            raise from_host(exc) from None

    def read(self, size: int = -1):
        return self._call("read", -1 if size is None else size)

    def readinto(self, buf, size: int | None = None):
        if self._text:
            raise board_error(errno.EINVAL)
        if size is not None:
            buf = memoryview(buf)[:size]
        n = self._call("readinto", buf)
        return 0 if n is None else n

    def readline(self, size: int = -1):
        return self._call("readline", size)

    def readlines(self):
        return self._call("readlines")

    def write(self, data):
        return self._call("write", data)

    def seek(self, offset: int, whence: int = 0):
        return self._call("seek", offset, whence)

    def tell(self):
        return self._call("tell")

    def flush(self):
        return self._call("flush")

    def close(self) -> None:
        if not self._raw.closed:
            self._raw.close()
        self._owner._open_files.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __iter__(self):
        return self

    def __next__(self):
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def __del__(self) -> None:
        raw = getattr(self, "_raw", None)
        if raw is not None and not raw.closed:
            raw.close()


class Sandbox:
    """Board paths ('/', '/flash' and relative to the current directory) over the host folder `root`."""

    def __init__(self, root: Path | str):
        root_path = Path(root)
        if not root_path.is_dir():
            raise NotADirectoryError(f"the twin's root {str(root)!r} is not a directory")
        self.root = Path(os.path.realpath(root_path))
        self.cwd = "/"
        self._open_files: weakref.WeakSet[BoardFile] = weakref.WeakSet()

    # -- paths ---------------------------------------------------------------------------------------------------

    def abspath(self, path) -> str:
        """The normalised absolute board path of `path` (str or bytes); EACCES when '..' climbs above '/'."""
        if isinstance(path, (bytes, bytearray)):
            path = bytes(path).decode("utf-8", "surrogateescape")
        if not isinstance(path, str):
            raise TypeError(f"can't convert {type(path).__name__} to str")
        if "\x00" in path:
            raise board_error(errno.EINVAL)
        joined = path if path.startswith("/") else self.cwd.rstrip("/") + "/" + path
        parts: list[str] = []
        for part in joined.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if not parts:
                    raise board_error(errno.EACCES)
                parts.pop()
            else:
                parts.append(part)
        return "/" + "/".join(parts)

    def host(self, path) -> Path:
        """The host path behind board `path`, refused (EACCES) when a symlink takes it outside the root."""
        parts = [p for p in self.abspath(path).split("/") if p]
        if parts and parts[0] == FLASH_ALIAS:
            parts = parts[1:]
        candidate = self.root.joinpath(*parts)
        resolved = os.path.realpath(candidate)
        if resolved != str(self.root) and not resolved.startswith(str(self.root) + os.sep):
            raise board_error(errno.EACCES)
        return candidate

    def _stat(self, path) -> os.stat_result:
        try:
            st = os.stat(self.host(path))
        except OSError as exc:
            if isinstance(exc, BoardOSError):
                raise
            raise from_host(exc) from None
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            raise board_error(errno.ENOENT)
        return st

    # -- the os module -------------------------------------------------------------------------------------------

    def stat(self, path) -> tuple:
        """MicroPython's 10-tuple: (mode, ino, dev, nlink, uid, gid, size, atime, mtime, ctime), times from 2000."""
        st = self._stat(path)
        is_dir = stat.S_ISDIR(st.st_mode)
        mtime = max(0, int(st.st_mtime) - EPOCH_2000)
        return (MODE_DIR if is_dir else MODE_FILE, 0, 0, 0, 0, 0, 0 if is_dir else st.st_size, mtime, mtime, mtime)

    def ilistdir(self, path="") -> Iterator[tuple]:
        """(name, type, inode, size) per visible entry, as FAT's ilistdir yields them."""
        directory = self.host(path)
        if not stat.S_ISDIR(self._stat(path)[0]):
            raise board_error(errno.ENOTDIR)
        try:
            names = sorted(os.listdir(directory))
        except OSError as exc:
            raise from_host(exc) from None
        entries = []
        for name in names:
            board_path = self.abspath(path).rstrip("/") + "/" + name
            try:
                mode, *_, size = self.stat(board_path)[:7]
            except OSError:
                continue  # a symlink leaving the root, a fifo, a dangling link: not on the board
            entries.append((name, mode, 0, size))
        return iter(entries)

    def listdir(self, path="") -> list[str]:
        return [entry[0] for entry in self.ilistdir(path)]

    def mkdir(self, path) -> None:
        self._host_call(os.mkdir, path)

    def rmdir(self, path) -> None:
        self._host_call(os.rmdir, path)

    def remove(self, path) -> None:
        if stat.S_ISDIR(self._stat(path).st_mode):
            raise board_error(errno.EISDIR)
        self._host_call(os.remove, path)

    def rename(self, old, new) -> None:
        source, target = self.host(old), self.host(new)
        try:
            os.rename(source, target)
        except OSError as exc:
            raise from_host(exc) from None

    def getcwd(self) -> str:
        return self.cwd

    def chdir(self, path) -> None:
        target = self.abspath(path)
        if not stat.S_ISDIR(self._stat(target).st_mode):
            raise board_error(errno.ENOTDIR)
        self.cwd = target

    def statvfs(self, path="/") -> tuple:
        """(bsize, frsize, blocks, bfree, bavail, files, ffree, favail, flag, namemax) of a nominal 1 MB volume."""
        self._stat(path)
        used = 0
        for folder, _dirs, files in os.walk(self.root):
            for name in files:
                try:
                    used += os.lstat(os.path.join(folder, name)).st_size
                except OSError:
                    pass
        free = max(0, VOLUME_BLOCKS - (used + BLOCK_SIZE - 1) // BLOCK_SIZE)
        return (BLOCK_SIZE, BLOCK_SIZE, VOLUME_BLOCKS, free, free, 0, 0, 0, 0, 255)

    def _host_call(self, fn, path) -> None:
        target = self.host(path)
        try:
            fn(target)
        except OSError as exc:
            raise from_host(exc) from None

    # -- files ---------------------------------------------------------------------------------------------------

    def open(self, path, mode: str = "r", buffering: int = -1, encoding: str | None = None) -> BoardFile:
        """open() as the board has it: modes of 'rwaxbt+', no newline translation, utf-8 text."""
        if not isinstance(mode, str) or not mode or set(mode) - FILE_MODE_CHARS:
            raise ValueError(f"invalid mode {mode!r}")
        target = self.host(path)
        if target.is_dir():
            raise board_error(errno.EISDIR)
        text = "b" not in mode
        try:
            if text:
                raw = open(target, mode, encoding=encoding or "utf-8", newline="")  # noqa: SIM115 - owned by BoardFile
            else:
                raw = open(target, mode, buffering=buffering)  # noqa: SIM115
        except OSError as exc:
            raise from_host(exc) from None
        board_file = BoardFile(raw, text, self)
        self._open_files.add(board_file)
        return board_file

    def read_bytes(self, path) -> bytes:
        with self.open(path, "rb") as f:
            return f.read()

    def exists(self, path) -> bool:
        try:
            self._stat(path)
        except OSError:
            return False
        return True

    def is_file(self, path) -> bool:
        try:
            return stat.S_ISREG(self._stat(path).st_mode)
        except OSError:
            return False

    def close_all(self) -> None:
        """Close every file the board left open (a soft reset remounts the volume)."""
        for board_file in list(self._open_files):
            board_file.close()
        self.cwd = "/"

    @staticmethod
    def board_time() -> int:
        """Seconds since 2000-01-01, the STM32 port's epoch."""
        return int(time.time()) - EPOCH_2000
