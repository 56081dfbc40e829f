"""One writer per output folder: `sweep_lock(out, tool)` holds OUT/.kbench.lock while a sweep (host.compare,
kernels.sweep, codesign explore) writes there, so two sweeps never append the same configurations twice or move
each other's files aside.

The lock is one file per folder, whatever the tool: host.compare and kernels.sweep write the same names
(results.csv, runs.jsonl), and a folder that one tool is writing is no place for another to start. It is made with
O_EXCL and holds one line, "PID HOST TOOL"; it is removed when the sweep ends, on every path (an error, Ctrl-C,
SIGTERM through host.cli_common's `Terminated`). A lock whose run has ended without removing it (SIGKILL, a power
cut) is stale when its PID no longer runs on this host, or when it holds no PID and is older than
UNREADABLE_LOCK_S; a stale lock is taken over, saying so in one line on stderr. A lock of another host, or of a PID
this user cannot signal, counts as held. Below every tool that writes a folder; stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from host.errors import KbenchError, SpecError

#: The lock's name inside the folder it guards.
LOCK_NAME = ".kbench.lock"
#: How old a lock without a readable PID must be before it counts as stale, in seconds: a sweep writes its line
#: right after making the file, so only a sweep killed in between leaves one.
UNREADABLE_LOCK_S = 10
#: Takeovers tried before giving up: each lost race (another sweep taking over or locking first) tries again.
ATTEMPTS = 3


@dataclass(frozen=True)
class Holder:
    """Who a lock file names: its PID (None where the file holds none), host and tool ('' where not written: a
    lock of an older explore holds "PID HOST" or "PID")."""

    pid: int | None
    host: str = ""
    tool: str = ""

    def describe(self) -> str:
        """'host.compare, PID 1234 on HOST', leaving out what the file does not say."""
        who = f"PID {self.pid}" if self.pid is not None else "no PID"
        return ", ".join(part for part in (self.tool, who + (f" on {self.host}" if self.host else "")) if part)


#: The largest PID a lock may name (Linux's pid_max ceiling, 2^22); a larger or zero "PID" is no PID.
PID_MAX = 1 << 22


def read_holder(lock: Path) -> Holder | None:
    """The holder a lock file names; None when the file is gone. A file that does not start with a PID in
    1..PID_MAX (garbage, an empty file, PID 0, a number os.kill cannot take) names no one: Holder(None)."""
    try:
        words = lock.read_text(encoding="utf-8", errors="replace").split()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise SpecError(f"{lock} is a folder, not a lock file: remove it (a sweep makes its own)") from None
    except OSError as exc:
        raise SpecError(f"{lock}: cannot read it ({exc.strerror or exc})") from None
    if not (words and words[0].isascii() and words[0].isdigit() and 0 < int(words[0]) <= PID_MAX):
        return Holder(None)
    return Holder(int(words[0]), words[1] if len(words) > 1 else "", " ".join(words[2:]))


def is_stale(lock: Path, holder: Holder) -> bool:
    """Whether the lock's run has ended: its PID is not running on this host, or the file holds no PID and is
    older than UNREADABLE_LOCK_S."""
    if holder.pid is None:
        try:
            return time.time() - lock.stat().st_mtime > UNREADABLE_LOCK_S
        except FileNotFoundError:
            return True
    if holder.host and holder.host != socket.gethostname():
        return False
    try:
        os.kill(holder.pid, 0)  # signal 0: only asks whether the PID exists
    except ProcessLookupError:
        return True
    except PermissionError:  # a process of another user holds the PID
        return False
    return False


def _take_over(lock: Path, holder: Holder) -> bool:
    """Remove a stale lock; False when another sweep moved it first or locked the folder in between."""
    aside = lock.with_name(f"{lock.name}.stale-{os.getpid()}")
    try:
        os.rename(lock, aside)  # atomic: of two sweeps taking over, one moves it
    except FileNotFoundError:
        return False
    if read_holder(aside) != holder:  # a new sweep's lock was moved instead: put it back
        with contextlib.suppress(OSError):
            os.link(aside, lock)
        aside.unlink(missing_ok=True)
        return False
    aside.unlink(missing_ok=True)
    return True


@contextlib.contextmanager
def sweep_lock(out: Path, tool: str) -> Iterator[Path]:
    """Hold OUT/.kbench.lock for `tool` (as the refusal names it: 'host.compare') while the body runs; the lock's
    path. `out` must exist. Another sweep holding it: KbenchError (exit 1) naming the holder; a folder that cannot
    be written in: SpecError (exit 2)."""
    lock = out / LOCK_NAME
    for _ in range(ATTEMPTS):
        try:
            handle = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            break
        except FileExistsError:
            holder = read_holder(lock)
            if holder is None:  # removed since: try again
                continue
            if not is_stale(lock, holder):
                raise KbenchError(f"--out {out}: another sweep is writing there ({holder.describe()}, {lock})"
                                  ) from None
            if _take_over(lock, holder):
                why = (f"PID {holder.pid}{f' of {holder.tool}' if holder.tool else ''} is not running"
                       if holder.pid is not None else "it holds no PID")
                print(f"kbench: {tool}: took over the stale lock {lock} ({why})", file=sys.stderr, flush=True)
        except OSError as exc:
            raise SpecError(f"--out {out}: cannot write in it ({exc.strerror or exc})") from None
    else:
        raise KbenchError(f"--out {out}: other sweeps keep taking over {lock}; try again")
    try:
        try:
            os.write(handle, f"{os.getpid()} {socket.gethostname()} {tool}\n".encode())
        except OSError as exc:  # a full disk: the lock cannot say who holds it, so it is not taken
            raise KbenchError(f"--out {out}: cannot write the lock {lock} ({exc.strerror or exc}); nothing there "
                              "was changed") from None
        finally:
            os.close(handle)
        yield lock
    finally:
        _release(lock)


def _release(lock: Path) -> None:
    """Remove the lock if it is still this sweep's: it names this process (or nothing yet, when the sweep stopped
    before writing its line), never a lock another sweep made after someone deleted this one by hand."""
    holder = read_holder(lock)
    if holder is not None and holder.pid in (os.getpid(), None) and holder.host in (socket.gethostname(), ""):
        lock.unlink(missing_ok=True)
