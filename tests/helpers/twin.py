"""The board twin for tests: as production starts it (mcu/twin_process.py: the `twin` fixtures of tests/conftest.py,
`start_twin` for a twin with line faults), with more of its options (`TwinWithOptions`), byte by byte on its pty
(`Wire`), and why it or its emulated core cannot run here."""

from __future__ import annotations

import importlib.util
import os
import select
import shutil
import sys
import threading
import time
import tty
from pathlib import Path

import pytest

from mcu.sim.peripherals import DEFAULT_CLOCK_HZ
from mcu.twin_process import TwinProcess

CLOCK_HZ = DEFAULT_CLOCK_HZ
RAW_BANNER = b"raw REPL; CTRL-B to exit\r\n"
SOFT_RESET_REPLY = b"OK\r\nMPY: soft reboot\r\n" + RAW_BANNER + b">"


def emulator_missing() -> str:
    """Why the emulated core cannot run here ("" when it can): the cross compiler and the twin's libraries."""
    if shutil.which("arm-none-eabi-gcc") is None:
        return "arm-none-eabi-gcc is not installed (scripts/setup.sh installs it)"
    missing = [name for name in ("unicorn", "capstone", "elftools") if importlib.util.find_spec(name) is None]
    return f"{', '.join(missing)} not installed (pip install -e '.[mcu]')" if missing else ""


#: Only the tests that run the emulated core need it; the cycle model's table is tested everywhere.
needs_emulator = pytest.mark.skipif(bool(emulator_missing()), reason=emulator_missing() or "-")


def twin_missing() -> str:
    """Why a twin cannot serve a sweep here ("" when it can): mpremote drives it, Unicorn runs its core, Node its VM."""
    from mcu.sim.vm_process import vm_missing

    missing = [name for name in ("mpremote", "unicorn") if importlib.util.find_spec(name) is None]
    return f"{', '.join(missing)} not installed (pip install -e '.[mcu]')" if missing else vm_missing()


#: For the tests that sweep on the twin (`--sim`).
needs_twin = pytest.mark.skipif(bool(twin_missing()), reason=twin_missing() or "-")


def client_env(config_home) -> dict:
    """The environment for an mpremote client: no user configuration (~/.config/mpremote/config.py) applies."""
    return {**os.environ, "XDG_CONFIG_HOME": str(config_home)}


class TwinWithOptions(TwinProcess):
    """A TwinProcess given more of `python -m mcu.sim`'s options than production passes (TwinProcess takes only
    --faults): the board of another .mpy version (--mpy-abi), or a twin as a shell starts it (no
    --exit-on-stdin-eof: only a signal ends it). Watched and stopped as TwinProcess is."""

    def __init__(self, *options: str, exit_on_stdin_eof: bool = True, root: Path | None = None):
        super().__init__()
        self.options = (*(("--exit-on-stdin-eof",) if exit_on_stdin_eof else ()), *options)
        self.own_root = root is None  # a root the test gave stays when the twin stops
        if root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = Path(root)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "mcu.sim", "--root", str(self.root), *self.options]

    def __enter__(self) -> TwinWithOptions:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def stop(self) -> None:
        if self.own_root:
            super().stop()
        else:
            self._end()


class Wire:
    """The twin byte by byte: `python -m mcu.sim` on `root` (kept when it stops) with `options`, its pty opened raw
    here as a client would; the test sends bytes and expects bytes."""

    def __init__(self, root, *options: str):
        self._out = bytearray()
        self._cond = threading.Condition()
        self.twin = TwinWithOptions(*options, root=root)
        self.port = self.twin.start()
        self.fd = os.open(self.port, os.O_RDWR | os.O_NOCTTY)
        tty.setraw(self.fd)
        self._closed = False
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()

    def _collect(self) -> None:
        while not self._closed:
            try:
                ready, _, _ = select.select([self.fd], [], [], 0.1)
                data = os.read(self.fd, 65536) if ready else b""
            except OSError:
                return
            if data:
                with self._cond:
                    self._out += data
                    self._cond.notify_all()

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def expect(self, ending: bytes, timeout: float = 10.0) -> bytes:
        """Everything received up to and including the first `ending` (consumed); fails with what did come."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while (at := self._out.find(ending)) < 0:
                left = deadline - time.monotonic()
                assert left > 0, f"waited {timeout} s for {ending!r}; received {bytes(self._out)!r}"
                self._cond.wait(left)
            got = bytes(self._out[:at + len(ending)])
            del self._out[:at + len(ending)]
            return got

    def raw(self) -> None:
        """Enter the raw REPL as mpremote does, soft reset included."""
        self.send(b"\r\x03")
        self.send(b"\r\x01")
        self.expect(RAW_BANNER + b">")
        self.send(b"\x04")
        assert self.expect(b">").endswith(SOFT_RESET_REPLY)

    def run(self, code: str, timeout: float = 10.0) -> tuple[bytes, bytes]:
        """One raw-paste command at the `>` prompt: (stdout, stderr)."""
        self.send(b"\x05A\x01")
        assert self.expect(b"R\x01\x80\x00\x01", timeout) == b"R\x01\x80\x00\x01"
        self.send(code.encode() + b"\x04")
        self.expect(b"\x04", timeout)  # the end of data, acknowledged (flow-control 0x01s before it)
        out = self.expect(b"\x04", timeout)[:-1]
        err = self.expect(b"\x04>", timeout)[:-2]
        return out, err

    def close(self) -> None:
        self._closed = True
        self._thread.join(timeout=5)
        os.close(self.fd)
        self.twin.stop()
