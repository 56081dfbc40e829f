"""How the report writes each of its outputs (results.md, a PNG plot): to a temporary file beside it, fsynced, then
renamed over the old one. A disk that fills up, or a kill, midway leaves the previous file whole (or none), never a
truncated one; the write's OSError goes to the caller, who tries the other outputs all the same.

Layer L3 with the rest of the report: it imports only host.safe_files.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from host.safe_files import sync_folder


def replace_file(path: Path, data: bytes) -> None:
    """Write `path` whole or not at all: `data` goes into a temporary file in path's folder (a hidden name of its own,
    '.results.md.*.tmp', so that it never meets another file or folder), which is fsynced and renamed over `path`.
    On any failure the temporary file is removed and the error raised; `path` is left as it was."""
    fd, tmp = _temporary_beside(path)
    try:
        try:
            view = memoryview(data)
            while view:  # a short write (a disk filling up) goes on from where it stopped, until the OS says why
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    sync_folder(path.parent)


def _temporary_beside(path: Path) -> tuple[int, str]:
    """A new file '.NAME.<random>.tmp' in path's folder, open for writing, with the permissions `path` has (a new
    one's: 0o666 less the umask, as a plain open gives)."""
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        with contextlib.suppress(OSError):
            os.fchmod(fd, stat.S_IMODE(os.stat(path).st_mode))
        return fd, str(tmp)


def os_reason(exc: OSError) -> str:
    """An OSError in the words the OS gives it: 'No space left on device'."""
    return exc.strerror or str(exc) or type(exc).__name__
