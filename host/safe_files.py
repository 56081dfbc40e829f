"""Crash-safe writes of the result files (results.csv, runs.jsonl): appends of whole lines that a full disk cannot
tear, in-place cuts of a torn tail, previous copies kept aside under a free name, and folder fsyncs after a rename.
Below host/results.py and host/run_log.py, which both write through it."""

from __future__ import annotations

import os
from pathlib import Path

from host.errors import ResultsError


def append_whole(path: Path, data: bytes) -> None:
    """Append `data` (whole lines) to `path` and fsync it. Should a write fail (a full disk: ENOSPC, EDQUOT, EIO),
    the file is cut back to the size it had, so it still ends on its last whole line, and ResultsError names the file
    and the error."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError as exc:  # read-only, immutable, a folder in the way: nothing written
        raise ResultsError(f"{path}: cannot append to it: {exc.strerror or exc}") from None
    try:
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:  # one write; a short one (a disk filling up) goes on from where it stopped
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError as exc:
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass  # the reader ignores a torn last line, and the next append cuts it
            raise ResultsError(f"{path}: cannot append to it: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def cut_to(path: Path, size: int) -> None:
    """Truncate `path` to `size` bytes (the end of its last whole line) in place: a kill midway loses nothing else."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


def _aside(path: Path, number: int) -> Path:
    return path.with_name(f"{path.name}.prev" + (f".{number}" if number else ""))


def keep_aside(*paths: Path) -> list[Path]:
    """Move each of `paths` that exists to NAME.prev, or NAME.prev.1, NAME.prev.2, ...: the first number free for
    every one of them (never over an earlier copy), so files kept aside together keep one number (a run's
    results.csv, runs.jsonl and report: results.md.prev.2 is the report of results.csv.prev.2); the new names."""
    present = [path for path in paths if path.exists()]
    if not present:
        return []
    number = 0
    while any(_aside(path, number).exists() for path in paths):
        number += 1
    moved = []
    for path in present:
        aside = _aside(path, number)
        try:
            os.rename(path, aside)
        except OSError as exc:  # a read-only or immutable folder or file: the earlier results stay where they are
            raise ResultsError(f"{path}: cannot keep it aside as {aside.name}: {exc.strerror or exc}") from None
        moved.append(aside)
    return moved


def sync_folder(folder: Path) -> None:
    """fsync a folder, so a rename in it survives a power cut (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_leftovers(folder: Path, names: tuple[str, ...]) -> list[Path]:
    """Delete the temporary files a killed rewrite of one of `names` left in `folder` ('.NAME.<random>.tmp', as
    host/results_file.py and host/report/outputs.py make them); only for a caller that holds the folder's lock, so
    that no rewrite is under way. The paths removed."""
    removed = []
    for name in names:
        for leftover in folder.glob(f".{name}.*.tmp"):
            if leftover.is_file() and not leftover.is_symlink():
                try:
                    leftover.unlink()
                except OSError:
                    continue
                removed.append(leftover)
    return removed
