"""Reading the codesign commands' TOML inputs (an explore space, the technology table, the gate calibration) so that
whatever a path names fails in the errors their loaders already turn into one line: a FIFO, a device or a folder is
refused before it is read (a FIFO's read would block forever), and a document nested past what tomllib's recursive
parser takes is a TOMLDecodeError, not a RecursionError."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

#: The largest TOML input read, in bytes: the shipped tables are a few kB; a larger file is no table of ours.
MAX_BYTES = 4 << 20


def read_toml(path: Path) -> dict:
    """The parsed document; OSError (not a regular file, too large, unreadable), UnicodeDecodeError or
    tomllib.TOMLDecodeError (also for nesting too deep for the parser)."""
    # O_NONBLOCK: opening a FIFO with no writer would wait for one; a regular file reads as usual
    handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "a FIFO" if stat.S_ISFIFO(info.st_mode) else \
                "not a regular file"
            raise OSError(f"{kind}; allowed: a regular TOML file")
        if info.st_size > MAX_BYTES:
            raise OSError(f"{info.st_size:,} bytes; allowed: up to {MAX_BYTES:,}")
        with os.fdopen(handle, "rb", closefd=False) as stream:
            raw = stream.read(MAX_BYTES + 1)
    finally:
        os.close(handle)
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except RecursionError:
        raise tomllib.TOMLDecodeError("nested too deep for the TOML parser (these tables are flat keys of "
                                      "lists)") from None
