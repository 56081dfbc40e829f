"""What the Hopper kernels (kernels/flash_wgmma.cu, decode_wgmma.cu) need from the host: an sm_90a build and TMA
tensor maps.

CuPy's RawModule always appends the device's own `-arch=sm_90`, and `wgmma` exists only in the architecture-specific
sm_90a target, so `module` compiles through CuPy's NVRTC binding itself and loads the cubin with CuPy. `tensor_map`
encodes the copy engine's descriptor of a (B·H, N, d) 16-bit tensor with the driver's cuTensorMapEncodeTiled (called
through ctypes: CuPy does not wrap it) and returns it in device memory, where the kernel reads it. CuPy is imported
inside functions only, so this module imports on machines without it.

A build is kept on disk (`cache_dir()`, keyed by the sources, the name expressions, the options and NVRTC's version),
as CuPy keeps its RawModule builds: a second process (another cluster worker, the next sweep) loads the cubin instead
of compiling the wgmma kernel again, which takes seconds per variant.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from host.errors import TargetError

SOURCE_DIR = Path(__file__).resolve().parent
#: The Hopper sources built here.
SOURCES = ("flash_wgmma.cu", "decode_wgmma.cu")
#: The headers those sources include, and theirs: NVRTC is handed each by name (no include path).
HEADERS = ("hopper_sync.cuh", "wgmma.cuh", "kv_rows.cuh", "tc_softmax.cuh", "tile_order.cuh", "split_merge.cuh")
# cuTensorMapEncodeTiled's enumerations (cuda.h): 16-bit elements, no interleave, 128-byte swizzle, 128-byte L2
# promotion, out-of-bounds elements read as zeros.
_UINT16, _INTERLEAVE_NONE, _SWIZZLE_128B, _L2_128B, _OOB_ZERO = 1, 0, 3, 2, 0
#: Bytes of one tensor map, and the columns of one copy-engine box (128 bytes of 16-bit elements: the swizzle's row).
MAP_BYTES = 128
BOX_COLUMNS = 64


@functools.lru_cache(maxsize=None)
def module(name: str, expressions: tuple[str, ...]):
    """kernels/`name` (one of SOURCES) built for sm_90a by NVRTC: (cupy.cuda.function.Module, {expression: mangled
    name})."""
    import cupy
    from cupy_backends.cuda.libs import nvrtc

    source = (SOURCE_DIR / name).read_text()
    headers = [(SOURCE_DIR / header).read_bytes() for header in HEADERS]
    options = ["-std=c++17", "-arch=sm_90a", "--device-as-default-execution-space"]
    key = build_key([source.encode(), *headers], expressions, options, nvrtc.getVersion())
    cached = read_build(key)
    if cached is not None:
        cubin, lowered = cached
        loaded = cupy.cuda.function.Module()
        loaded.load(cubin)
        return loaded, lowered
    program = nvrtc.createProgram(source, name, headers, [header.encode() for header in HEADERS])
    try:
        for expression in expressions:
            nvrtc.addNameExpression(program, expression)
        try:
            nvrtc.compileProgram(program, options)
        except nvrtc.NVRTCError as exc:
            log = nvrtc.getProgramLog(program)
            raise TargetError(f"NVRTC could not build kernels/{name} for sm_90a: {exc}: "
                              f"{log.strip()[:2000]}") from None
        lowered = {expression: nvrtc.getLoweredName(program, expression) for expression in expressions}
        cubin = nvrtc.getCUBIN(program)
    finally:
        nvrtc.destroyProgram(program)
    write_build(key, cubin, lowered)
    loaded = cupy.cuda.function.Module()
    loaded.load(cubin)
    return loaded, lowered


def cache_dir() -> Path:
    """Where builds are kept: $KBENCH_CACHE/cubin, else ~/.cache/kbench/cubin."""
    root = os.environ.get("KBENCH_CACHE") or Path.home() / ".cache" / "kbench"
    return Path(root) / "cubin"


def build_key(sources: list[bytes], expressions: tuple[str, ...], options: list[str], version: object) -> str:
    """A build's identity: everything that changes the cubin."""
    digest = hashlib.sha256()
    for part in (*sources, *(e.encode() for e in expressions), *(o.encode() for o in options), repr(version).encode()):
        digest.update(len(part).to_bytes(8, "little") + part)
    return digest.hexdigest()[:32]


def read_build(key: str) -> tuple[bytes, dict[str, str]] | None:
    """(cubin, lowered names) kept under `key`; None when absent or unreadable (it is built again)."""
    folder = cache_dir()
    try:
        cubin = (folder / f"{key}.cubin").read_bytes()
        lowered = json.loads((folder / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    if not cubin or not isinstance(lowered, dict) or lowered.get("cubin_bytes") != len(cubin):
        return None
    return cubin, lowered["names"]


def write_build(key: str, cubin: bytes, lowered: dict[str, str]) -> None:
    """Keep a build (each file replaced whole, so a reader never sees half of one); a cache that cannot be written
    only costs the next process a compile."""
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in ((f"{key}.cubin", cubin),
                           (f"{key}.json", json.dumps({"cubin_bytes": len(cubin), "names": lowered}).encode())):
            with tempfile.NamedTemporaryFile(dir=folder, delete=False) as part:
                part.write(data)
            os.replace(part.name, folder / name)
    except OSError:
        return


@functools.lru_cache(maxsize=None)
def _encode():
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise TargetError(f"the CUDA driver library (libcuda.so.1) did not load: {exc}", status="skipped") from exc
    encode = driver.cuTensorMapEncodeTiled
    encode.restype = ctypes.c_int
    return encode


def tensor_map(array, box_rows: int):
    """The copy engine's map of a C-contiguous (B·H, N, d) array of 16-bit elements, boxes of 64 columns ×
    `box_rows` rows, 128-byte swizzle, zeros past N; as a cupy uint8 array of 128 bytes in device memory."""
    import cupy

    bh, n, d = array.shape
    if array.dtype.itemsize != 2 or not array.flags.c_contiguous or d % BOX_COLUMNS:
        raise TargetError(f"a tensor map needs a C-contiguous 16-bit (B·H, N, d) array with d a multiple of "
                          f"{BOX_COLUMNS}; got {array.dtype} {array.shape}")
    storage = (ctypes.c_uint8 * (MAP_BYTES + 64))()  # the driver wants the map 64-byte aligned
    address = (ctypes.addressof(storage) + 63) & ~63
    dims = (ctypes.c_uint64 * 3)(d, n, bh)
    strides = (ctypes.c_uint64 * 2)(2 * d, 2 * n * d)  # bytes, for every dimension but the innermost
    box = (ctypes.c_uint32 * 3)(BOX_COLUMNS, box_rows, 1)
    steps = (ctypes.c_uint32 * 3)(1, 1, 1)
    status = _encode()(ctypes.c_void_p(address), _UINT16, 3, ctypes.c_void_p(array.data.ptr), dims, strides, box,
                       steps, _INTERLEAVE_NONE, _SWIZZLE_128B, _L2_128B, _OOB_ZERO)
    if status != 0:
        raise TargetError(f"cuTensorMapEncodeTiled failed with CUresult {status} for shape {array.shape}, box "
                          f"{BOX_COLUMNS}×{box_rows}")
    return cupy.asarray(np.frombuffer(ctypes.string_at(address, MAP_BYTES), dtype=np.uint8))


def kernel(name: str, expression: str, smem: int):
    """The built kernel `expression` (an instantiation of a template in kernels/`name`), allowed `smem` bytes of
    dynamic shared memory."""
    from cupy.cuda import driver

    loaded, names = module(name, (expression,))
    fn = loaded.get_function(names[expression])
    attribute = getattr(driver, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 8)
    driver.funcSetAttribute(fn.ptr, attribute, smem)
    return fn
