"""Build-if-stale for the Q15 kernel's outputs in mcu/native/build/: the one place that runs `make -C mcu/native`.

`built(target, output)` runs `make -C mcu/native <target>` when `output` is missing or older than any of the kernel's
sources, and returns `output`; when make cannot run or fails, UnavailableError names the make target and carries
make's last stderr line. Used by mcu/q15_c.py (target `host`, the ctypes library) and mcu/sim/q15emu.py (target
`arm`, the Cortex-M4 ELF the twin executes). Make itself decides what to rebuild; the staleness check only saves a
process start on every import. An output that is not a whole ELF file (cut short by a full disk or a killed copy:
loading a truncated shared library kills the process with SIGBUS) counts as stale, is removed and built again; the
Makefile writes each output under a temporary name and renames it, so a killed build leaves none.
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

from host.errors import UnavailableError

NATIVE = Path(__file__).resolve().parent / "native"
BUILD = NATIVE / "build"
#: What every build output depends on (the Makefile's prerequisites for `host` and `arm`).
SOURCES = ("attention_q15.c", "attention_q15_divide.c", "attention_q15_stream.c", "attention_q15_describe.c",
           "kbench_frame.c", "attention_q15.h", "attention_q15_core.h", "attention_q15_pair.h", "kbench_frame.h",
           "Makefile")
#: A cold `make arm` (cross-compile, link, objdump) takes a few seconds on the 2-core VM; this bounds a hung tool.
MAKE_TIMEOUT_S = 300
#: What each target needs beyond make and a C compiler, said when it fails.
NEEDS = {"host": "a host C compiler (cc)", "twin": "a host C compiler (cc)",
         "arm": "arm-none-eabi-gcc (Debian: gcc-arm-none-eabi; scripts/setup.sh installs it)"}


def whole_elf(path: Path) -> bool:
    """Whether `path` is an ELF file at least as long as its header says: its program and section header tables (the
    section headers are the last thing a linker writes) lie inside the file."""
    try:
        with open(path, "rb") as f:
            header = f.read(64)
            size = f.seek(0, 2)
    except OSError:
        return False
    if len(header) < 52 or header[:4] != b"\x7fELF" or header[4] not in (1, 2) or header[5] != 1:
        return False
    if header[4] == 2:  # ELF64: e_phoff, e_shoff at 32 and 40; e_phentsize .. e_shnum at 54
        if len(header) < 64:
            return False
        phoff, shoff = struct.unpack_from("<QQ", header, 32)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", header, 54)
    else:  # ELF32: e_phoff, e_shoff at 28 and 32; e_phentsize .. e_shnum at 42
        phoff, shoff = struct.unpack_from("<II", header, 28)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", header, 42)
    return phoff + phentsize * phnum <= size and shoff + shentsize * shnum <= size


def stale(output: Path, sources: tuple[str, ...] = SOURCES) -> bool:
    """True when `output` is missing, older than one of `sources` (names in mcu/native), or not a whole ELF file
    (then it is removed, so that make builds it again)."""
    if not output.exists():
        return True
    newest = max((NATIVE / name).stat().st_mtime for name in sources)
    if output.stat().st_mtime < newest:
        return True
    if output.suffix in (".so", ".elf") and not whole_elf(output):
        output.unlink(missing_ok=True)
        return True
    return False


def built(target: str, output: Path, sources: tuple[str, ...] = SOURCES) -> Path:
    """`output`, after `make -C mcu/native <target>` if it is stale; UnavailableError says why it could not be."""
    if not stale(output, sources):
        return output
    command = f"make -C mcu/native {target}"
    try:
        done = subprocess.run(["make", "-C", str(NATIVE), target], capture_output=True, text=True,
                              timeout=MAKE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        raise UnavailableError(f"{command} could not run: {exc}") from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output on stderr)"])[-1]
        needs = f" (needs {NEEDS[target]})" if target in NEEDS else ""
        raise UnavailableError(f"{command} failed{needs}: {last}")
    if not output.exists():
        raise UnavailableError(f"{command} succeeded but did not make {output.relative_to(NATIVE)}")
    return output
