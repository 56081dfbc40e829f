"""The board twin as a child of the host: `python -m mcu.sim` started on a fresh root, watched, restarted, stopped.

The root is a temporary folder named after the host's process id (`kbench-twin-<pid>-…`); a host killed with
SIGKILL leaves its root behind, so every start first removes the roots of hosts that no longer run. The twin reads
its stdin to the end (`--exit-on-stdin-eof`): it ends when the host closes the pipe, or dies.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from host.errors import UnavailableError

ROOT_PREFIX = "kbench-twin-"
#: How long the twin may take to print its pty path (it builds the Cortex-M4 ELF first when it is stale).
START_S = 60
#: How long a twin may take to exit after its stdin closes, before it is killed.
STOP_S = 10
#: How long a twin that answered its start with something other than its pty may take to exit.
EXIT_S = 5


def remove_stale_roots(folder: str | None = None) -> list[Path]:
    """Remove the twin roots whose host process is gone; return them."""
    removed = []
    for root in Path(folder or tempfile.gettempdir()).glob(f"{ROOT_PREFIX}*"):
        pid_text = root.name[len(ROOT_PREFIX):].split("-", 1)[0]
        if not pid_text.isdigit() or not root.is_dir() or _alive(int(pid_text)):
            continue
        shutil.rmtree(root, ignore_errors=True)
        removed.append(root)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


class TwinProcess:
    """One twin child: `start()` gives its pty path, `exit_code()` says whether it died, `restart()` starts another
    on the same root (the deployed files stay), `stop()` ends it and removes the root."""

    def __init__(self, faults: str = ""):
        self.faults = faults
        self.root = Path(tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{os.getpid()}-"))
        self.process: subprocess.Popen | None = None
        self.port = ""

    def command(self) -> list[str]:
        """`python -m mcu.sim` as this host starts it (a test's twin may add options)."""
        return [sys.executable, "-m", "mcu.sim", "--root", str(self.root), "--exit-on-stdin-eof", "--faults",
                self.faults]

    def start(self) -> str:
        self.process = subprocess.Popen(self.command(),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        cwd=Path(__file__).resolve().parent.parent)
        ready, _, _ = select.select([self.process.stdout], [], [], START_S)
        line = self.process.stdout.readline().decode().strip() if ready else ""
        if not line.startswith("/dev/"):
            try:  # a line that is not the pty (its stdout closed: it is exiting) gets a moment to end
                exited = self.process.wait(timeout=EXIT_S) if ready else None
            except subprocess.TimeoutExpired:
                exited = None
            if exited is None:  # still starting after START_S: stopped, then what it said is read
                self.process.kill()
                self.process.wait()
            said = self.process.stderr.read().decode(errors="replace").strip()[-400:] or "it said nothing"
            self._end()
            raise UnavailableError(f"the twin did not start within {START_S} s: {said}" if exited is None else
                                   f"the twin exited (status {exited}) before it started: {said}")
        self.port = line
        return line

    def exit_code(self) -> int | None:
        """The twin's exit status once it has ended (a negative signal number when killed), else None."""
        return None if self.process is None else self.process.poll()

    def restart(self) -> str:
        self._end()
        return self.start()

    def stop(self) -> None:
        self._end()
        shutil.rmtree(self.root, ignore_errors=True)

    def _end(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            with contextlib.suppress(OSError):
                stream.close()


@contextlib.contextmanager
def start_twin(faults: str = ""):
    """A twin for a `with` block: yields the TwinProcess, started; stopped (and its root removed) at the end."""
    from mcu.sim.faults import FaultSpec

    FaultSpec.parse(faults, "--sim-faults")  # a bad spec is the user's error, reported before anything starts
    remove_stale_roots()
    twin = TwinProcess(faults)
    try:
        twin.start()
        yield twin
    finally:
        twin.stop()
