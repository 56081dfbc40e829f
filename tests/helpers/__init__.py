"""What the tests share (the project root, running a module, capability probes; the board's side in helpers.board,
the twin's in helpers.twin): imported by test modules and conftests alike, which never import each other."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def gpu_missing() -> str:
    """Why there is no usable GPU here ("" when there is one)."""
    try:
        import cupy  # tests may import it; the packages under test import it only under kernels/

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - any failure means no GPU for the tests
        return f"no usable CUDA GPU ({type(exc).__name__}: {exc})"
    return "" if count else "no CUDA device"


def board_missing() -> str:
    """Why there is no board here ("" when KBENCH_SERIAL names a serial port that exists)."""
    port = os.environ.get("KBENCH_SERIAL", "")
    if not port:
        return "no board: set KBENCH_SERIAL to the STM32F407's serial port to run board tests"
    return "" if Path(port).exists() else f"no board: KBENCH_SERIAL={port} does not exist"


def run_module(*args: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    """Run `python -m <args>` from the project root, capturing text output."""
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          **kwargs)


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


#: The MicroPython WebAssembly port that scripts/setup.sh test installs (npm), which runs the board's code in tests.
WASM_PACKAGE = ROOT / ".cache" / "mpy-wasm" / "node_modules" / "@micropython" / "micropython-webassembly-pyscript"


def folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file of a folder by name and contents: what a refused sweep must leave exactly as it was."""
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}
