"""The twin's sandbox: the board's filesystem over one host folder.

It is written for trusted board code (kbench's own, and code its user sends): it keeps honest code inside the folder
and away from the host objects behind the board's API. It is a convenience boundary, not a security one: the board
code runs in CPython, and code written to escape it (through `type()`, `object.__subclasses__()`, the frames of a
traceback, the methods of any object) can reach the host. Run untrusted code in a container (docs/twin.md).

The board sees a single FAT-like volume: '/' is the host folder given as `--root`, and '/flash' (the STM32 port's
mount point) is an alias of '/'. Every path is normalised against the board's current directory before it touches
the host: a '..' that would climb above '/' is refused with EACCES, an absolute host path such as '/etc/passwd' is
just a board path that does not exist (ENOENT), and a symlink inside the folder that resolves outside it is refused
with EACCES. Only directories and regular files are on the board: anything else (a FIFO, a socket, a device node)
is ENOENT to every call, and is never opened (so it cannot block the twin). The root itself cannot be removed or
renamed (EPERM, as MicroPython refuses operations on its VFS root).

Errors are raised as MicroPython raises them: `OSError` whose only argument is the errno number, printed
"[Errno 2] ENOENT", with no file name and no host exception chained to it. The os functions are read as
`BoardFunction`s and open files are `Native` objects (mcu.sim.sealed), so neither leads to the host folder's path.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import time
import weakref
from pathlib import Path
from typing import Callable, Iterator

from mcu.sim.sealed import BoardOSError, Native, board_error, board_method, hidden

EPOCH_2000 = 946_684_800  # the STM32 port counts file times from 2000-01-01
FLASH_ALIAS = "flash"
BLOCK_SIZE = 512
VOLUME_BLOCKS = 2048  # a nominal 1 MB volume for statvfs; writes are not limited by it
MODE_DIR, MODE_FILE = 0x4000, 0x8000
FILE_MODE_CHARS = set("rwaxbt+")
OPEN_FLAGS = {"r": os.O_RDONLY, "w": os.O_WRONLY | os.O_CREAT, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
              "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL}
# Never block on open and never follow a symlink put in place after the path was checked; the descriptor is then
# checked with fstat before it becomes a file.
OPEN_GUARD = os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
RACE_ERRNO = {errno.ELOOP: errno.EACCES,  # a symlink swapped in after the check: as if it had been there
              errno.ENXIO: errno.ENOENT}  # a FIFO without a reader swapped in: not on the board


# -- errors ----------------------------------------------------------------------------------------------------------

def host_call(fn: Callable, *args, errnos: dict[int, int] | None = None):
    """fn(*args), a host OSError raised as the board's: its errno only (mapped through `errnos`), and raised after
    the handler so that the host exception (with its host path) is not chained to it as `__context__`."""
    try:
        return fn(*args)
    except BoardOSError:
        raise
    except OSError as exc:
        code = exc.errno or errno.EIO
    raise BoardOSError((errnos or {}).get(code, code))


# -- files ---------------------------------------------------------------------------------------------------------

class BoardFile(Native):
    """An open file on the board: the methods MicroPython's io.FileIO/TextIOWrapper have, over a host file object
    that is not handed out (so no `.name`, `.buffer` or other attribute reveals the host path)."""

    __slots__ = ()

    def __init__(self, raw, text: bool, owner: Sandbox):
        super().__init__((raw, text))
        owner._open_files.add(self)

    def _board_type(self) -> str:
        return "TextIOWrapper" if hidden(self)[1] else "FileIO"

    def __repr__(self) -> str:
        return f"<io.{self._board_type()} {id(self) & 0xFFFFFFFF:x}>"

    def _call(self, name: str, *args):
        raw = hidden(self)[0]
        if raw.closed:
            raise board_error(errno.EBADF)
        try:
            return getattr(raw, name)(*args)
        except io.UnsupportedOperation:  # an OSError too, without an errno: reading a file opened "w"
            code = errno.EINVAL
        except OSError as exc:
            code = exc.errno or errno.EIO
        raise board_error(code)  # outside the handler: no host exception chained as __context__

    def read(self, size: int = -1):
        return self._call("read", -1 if size is None else size)

    def readinto(self, buf, size: int | None = None):
        if hidden(self)[1]:
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
        raw = hidden(self)[0]
        if not raw.closed:
            raw.close()

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


def _open_flags(mode) -> tuple[int, bool, bool]:
    """(os.open flags, text, truncate) for a board open() mode: one of r/w/a/x, '+' at most once, b or t."""
    if not isinstance(mode, str) or not mode or set(mode) - FILE_MODE_CHARS:
        raise ValueError(f"invalid mode {mode!r}")
    kinds = [c for c in mode if c in OPEN_FLAGS]
    if len(kinds) != 1 or len(set(mode)) != len(mode) or ("b" in mode and "t" in mode):
        raise ValueError(f"invalid mode {mode!r}")
    flags = OPEN_FLAGS[kinds[0]]
    if "+" in mode:
        flags = (flags & ~os.O_WRONLY) | os.O_RDWR
    return flags, "b" not in mode, kinds[0] == "w"


# -- the volume ------------------------------------------------------------------------------------------------------

class Sandbox:
    """Board paths ('/', '/flash' and relative to the current directory) over the host folder `root`. The methods
    marked `board_method` are the board's API and are read as BoardFunctions; the others serve the twin."""

    def __init__(self, root: Path | str):
        root_path = Path(root)
        if not root_path.is_dir():
            raise NotADirectoryError(f"the twin's root {str(root)!r} is not a directory")
        self._root = Path(os.path.realpath(root_path))
        self.cwd = "/"
        self._open_files: weakref.WeakSet[BoardFile] = weakref.WeakSet()

    @property
    def root(self) -> Path:
        """The host folder behind '/', fixed for the twin's life."""
        return self._root

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

    def _parts(self, path) -> list[str]:
        """The components of board `path` below the root ('/flash' folded onto '/'); [] for the root itself."""
        parts = [p for p in self.abspath(path).split("/") if p]
        return parts[1:] if parts and parts[0] == FLASH_ALIAS else parts

    def _resolved(self, path) -> str:
        """The host path behind board `path` with every symlink resolved; EACCES when that leaves the root."""
        resolved = os.path.realpath(self._root.joinpath(*self._parts(path)))
        if resolved != str(self._root) and not resolved.startswith(str(self._root) + os.sep):
            raise board_error(errno.EACCES)
        return resolved

    def host(self, path) -> Path:
        """The host path behind board `path` (its last component unresolved, so a symlink is itself), refused
        (EACCES) when a symlink takes it outside the root."""
        self._resolved(path)
        return self._root.joinpath(*self._parts(path))

    def _not_root(self, path) -> None:
        """EPERM for the volume's root under any spelling ('/', '/flash', '/flash/..', '.' in '/', or a path
        through a symlink that leads back to it)."""
        if not self._parts(path) or self._resolved(path) == str(self._root):
            raise board_error(errno.EPERM)

    def _stat(self, path) -> os.stat_result:
        """The host stat of a board entry (symlinks followed); ENOENT for anything but a directory or regular file.
        stat() never opens, so a FIFO or device node cannot block here."""
        st = host_call(os.stat, self.host(path))
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            raise board_error(errno.ENOENT)
        return st

    # -- the os module -------------------------------------------------------------------------------------------

    @board_method
    def stat(self, path) -> tuple:
        """MicroPython's 10-tuple: (mode, ino, dev, nlink, uid, gid, size, atime, mtime, ctime), times from 2000."""
        st = self._stat(path)
        is_dir = stat.S_ISDIR(st.st_mode)
        mtime = max(0, int(st.st_mtime) - EPOCH_2000)
        return (MODE_DIR if is_dir else MODE_FILE, 0, 0, 0, 0, 0, 0 if is_dir else st.st_size, mtime, mtime, mtime)

    @board_method
    def ilistdir(self, path="") -> Iterator[tuple]:
        """(name, type, inode, size) per visible entry, as FAT's ilistdir yields them."""
        if not stat.S_ISDIR(self._stat(path).st_mode):
            raise board_error(errno.ENOTDIR)
        names = sorted(host_call(os.listdir, self.host(path)))
        base = self.abspath(path).rstrip("/")
        entries = []
        for name in names:
            try:
                st = self._stat(f"{base}/{name}")
            except OSError:
                continue  # a symlink leaving the root, a FIFO, a dangling link: not on the board
            is_dir = stat.S_ISDIR(st.st_mode)
            entries.append((name, MODE_DIR if is_dir else MODE_FILE, 0, 0 if is_dir else st.st_size))
        return iter(entries)

    @board_method
    def listdir(self, path="") -> list[str]:
        return [entry[0] for entry in self.ilistdir(path)]

    @board_method
    def mkdir(self, path) -> None:
        host_call(os.mkdir, self.host(path))

    @board_method
    def rmdir(self, path) -> None:
        self._not_root(path)
        self._stat(path)
        host_call(os.rmdir, self.host(path))

    @board_method
    def remove(self, path) -> None:
        self._not_root(path)
        if stat.S_ISDIR(self._stat(path).st_mode):
            raise board_error(errno.EISDIR)
        host_call(os.remove, self.host(path))

    @board_method
    def rename(self, old, new) -> None:
        """os.rename; neither side may be the root, the source must be on the board, and an entry the board cannot
        see (a FIFO, ...) is not replaced (EACCES)."""
        self._not_root(old)
        self._not_root(new)
        self._stat(old)
        source, target = self.host(old), self.host(new)
        try:
            mode = os.lstat(target).st_mode
        except OSError:
            mode = None
        if mode is not None and not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            raise board_error(errno.EACCES)
        host_call(os.rename, source, target)

    @board_method
    def getcwd(self) -> str:
        return self.cwd

    @board_method
    def chdir(self, path) -> None:
        target = self.abspath(path)
        if not stat.S_ISDIR(self._stat(target).st_mode):
            raise board_error(errno.ENOTDIR)
        self.cwd = target

    @board_method
    def statvfs(self, path="/") -> tuple:
        """(bsize, frsize, blocks, bfree, bavail, files, ffree, favail, flag, namemax) of a nominal 1 MB volume."""
        self._stat(path)
        used = 0
        for folder, _dirs, files in os.walk(self._root):
            for name in files:
                try:
                    used += os.lstat(os.path.join(folder, name)).st_size
                except OSError:
                    pass
        free = max(0, VOLUME_BLOCKS - (used + BLOCK_SIZE - 1) // BLOCK_SIZE)
        return (BLOCK_SIZE, BLOCK_SIZE, VOLUME_BLOCKS, free, free, 0, 0, 0, 0, 255)

    # -- files ---------------------------------------------------------------------------------------------------

    @board_method
    def open(self, path, mode: str = "r", buffering: int = -1, encoding: str | None = None) -> BoardFile:
        """open() as the board has it: modes of 'rwaxbt+', no newline translation, utf-8 text. Only a regular file
        is opened: a directory is EISDIR, anything else ENOENT, found by stat before and fstat after the open (which
        never blocks and never follows a symlink swapped in between)."""
        flags, text, truncate = _open_flags(mode)
        resolved = self._resolved(path)
        try:
            mode_before = os.stat(resolved).st_mode
        except OSError:
            mode_before = None  # missing: created by w/a/x, ENOENT from os.open otherwise
        if mode_before is not None and stat.S_ISDIR(mode_before):
            raise board_error(errno.EISDIR)
        if mode_before is not None and not stat.S_ISREG(mode_before):
            raise board_error(errno.ENOENT)
        fd = host_call(os.open, resolved, flags | OPEN_GUARD, 0o666, errnos=RACE_ERRNO)
        try:
            mode_now = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode_now):
                raise board_error(errno.EISDIR if stat.S_ISDIR(mode_now) else errno.ENOENT)
            os.set_blocking(fd, True)
            if truncate:
                host_call(os.ftruncate, fd, 0)
            if text:
                raw = open(fd, mode, encoding=encoding or "utf-8", newline="")  # noqa: SIM115 - owned by BoardFile
            else:
                raw = open(fd, mode, buffering=buffering)  # noqa: SIM115
        except BaseException:
            os.close(fd)
            raise
        return BoardFile(raw, text, self)

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
