"""kernels/q15.cu builds with nvcc for sm_90 at every template instance the launcher can ask for (D = 32 .. 256),
warnings as errors, without a register spill or a stack frame, and its PTX holds the four int8 MMA forms of the
byte split (CI; skipped without nvcc)."""

import re
import shutil
import subprocess

import pytest

from helpers import ROOT
from kernels.q15_launch import ARGS, instances

SIGNATURE = ("const short*, const short*, const short*, short*, unsigned char*, int, int, int, int, int, int, int")


def unit(tmp_path) -> str:
    """A translation unit of kernels/q15.cu with every instance of kernels/q15_launch.py."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    assert len(SIGNATURE.split(",")) == len(ARGS)
    source = tmp_path / "unit_q15.cu"
    source.write_text(f'#include "{ROOT / "kernels" / "q15.cu"}"\n' + "".join(
        f"template __global__ void {launch.function}({SIGNATURE});\n" for launch in instances()))
    return str(source)


def test_the_q15_kernel_compiles_for_sm90_without_spills(tmp_path):
    done = subprocess.run(["nvcc", "-arch=sm_90", "-std=c++17", "-Werror", "all-warnings", "-Xptxas", "-v", "-c",
                           "-o", str(tmp_path / "unit.o"), unit(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    frames = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", done.stderr)
    assert len(frames) == len(instances()) and all(frame == ("0", "0", "0") for frame in frames), done.stderr


def test_the_ptx_holds_the_four_int8_mma_forms(tmp_path):
    ptx = tmp_path / "unit.ptx"
    done = subprocess.run(["nvcc", "-arch=sm_90", "-std=c++17", "-ptx", "-o", str(ptx), unit(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    text = ptx.read_text()
    for types in ("s8.s8", "s8.u8", "u8.s8", "u8.u8"):
        assert f"mma.sync.aligned.m16n8k32.row.col.s32.{types}.s32" in text
