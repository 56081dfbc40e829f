"""kernels.budget: the flash kernel's shared-memory formula, residency per SM, the device profiles and the CLI."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from helpers import ROOT, run_module
from host.errors import SpecError, UnavailableError
from kernels.budget import (FLOAT_BYTES, PROFILES, DeviceLimits, allocated_smem, blocks_per_sm, fits,
                            flash_smem_bytes, largest_square_tile, main, query_device)

H200, A100, T4 = PROFILES["h200"], PROFILES["a100"], PROFILES["t4"]


# Expected values: the unpadded sum 4·(Br·d + 2·Bc·d + Br·Bc + 3·Br) in each comment, plus the padding: K rows by 4
# and S rows by 4 floats when d % 4 == 0, i.e. 16·(Br + Bc) B; otherwise Q and K rows by 1 and S rows by 4,
# 4·(5·Br + Bc).
@pytest.mark.parametrize("br, bc, dim, expected", [
    (64, 64, 64, 68_352),      # 4·(64·64 + 2·64·64 + 64·64 + 3·64) = 4·(4096 + 8192 + 4096 + 192) = 4·16,576
    (96, 96, 64, 114_816),     # 4·(6144 + 12,288 + 9216 + 288) = 4·27,936
    (128, 128, 64, 169_472),   # 4·(8192 + 16,384 + 16,384 + 384) = 4·41,344
    (64, 64, 128, 117_504),    # 4·(8192 + 16,384 + 4096 + 192) = 4·28,864
    (32, 128, 64, 93_056),     # Br ≠ Bc: 4·(32·64 + 2·128·64 + 32·128 + 3·32) = 4·(2048 + 16,384 + 4096 + 96)
    (1, 1, 1, 52),             # 4·(1 + 2 + 1 + 3)
    (17, 5, 59, 7_276),        # awkward: 4·(17·59 + 2·5·59 + 17·5 + 3·17) = 4·(1003 + 590 + 85 + 51) = 4·1729
])
def test_flash_smem_bytes_matches_the_hand_arithmetic(br, bc, dim, expected):
    assert FLOAT_BYTES == 4
    assert flash_smem_bytes(br, bc, dim) == expected


@pytest.mark.parametrize("args, bad", [((0, 64, 64), "Br=0"), ((64, -1, 64), "Bc=-1"), ((64, 64, 257), "dim=257"),
                                       ((64.0, 64, 64), "Br=64.0")])
def test_flash_smem_bytes_rejects_bad_sizes_quoting_them(args, bad):
    with pytest.raises(SpecError, match=bad):
        flash_smem_bytes(*args)


def test_profiles_hold_the_published_and_measured_figures():
    assert DeviceLimits("NVIDIA H200", 132, 233_472, 49_152, 232_448, 1_024, 65_536, 2_048) == H200
    assert (H200.smem_alloc_granularity, H200.max_blocks_per_sm) == (128, 32)   # the defaults: sm_80+
    assert (T4.smem_alloc_granularity, T4.max_blocks_per_sm) == (256, 16)       # sm_75
    assert (A100.sms, A100.smem_per_sm, A100.smem_per_block_optin, A100.reserved_smem_per_block) == \
        (108, 167_936, 166_912, 1_024)
    assert (T4.sms, T4.smem_per_sm, T4.smem_per_block_optin, T4.reserved_smem_per_block) == (40, 65_536, 65_536, 0)
    for limits in PROFILES.values():  # opt-in per block never exceeds the SM, and the reservation fills the gap
        assert limits.smem_per_block_optin + limits.reserved_smem_per_block <= limits.smem_per_sm
    with pytest.raises(dataclasses.FrozenInstanceError):
        H200.sms = 1  # type: ignore[misc]


@pytest.mark.parametrize("smem, threads, expected", [
    (111_744, 128, 2),   # 233,472 // (111,744 + 1,024) = 233,472 // 112,768 = 2 (3 × 112,768 = 338,304 > 233,472)
    (165_376, 128, 1),   # 233,472 // 166,400 = 1
    (115_456, 128, 2),   # 2 × (115,456 + 1,024) = 232,960 ≤ 233,472: fits by 512 B
    (115_713, 128, 1),   # 2 × (115,713 + 1,024) = 233,474 > 233,472: the reservation decides (without it: 2)
    (232_448, 128, 1),   # exactly the opt-in limit: 233,472 // 233,472 = 1
    (232_449, 128, 0),   # one byte over the opt-in limit: does not launch
    (66_304, 128, 3),    # 233,472 // 67,328 = 3
    (10_000, 128, 16),   # shared memory allows 233,472 // 11,024 = 21; threads allow 2048 // 128 = 16
    (10_000, 1024, 2),   # threads: 2048 // 1024 = 2
    (0, 256, 8),         # no shared memory: threads alone, 2048 // 256 = 8
    (0, 128, 16),
    # 45,576 + 1,024 = 46,600, allocated in 128 B units as 46,720: 5 × 46,720 = 233,600 > 233,472 → 4, as the
    # H200's driver answered (without the rounding: 5 × 46,600 = 233,000 ≤ 233,472 → 5)
    (45_576, 128, 4),
    (45_568, 128, 5),    # 46,592 = 364 × 128: 5 × 46,592 = 232,960 ≤ 233,472
    (0, 32, 32),         # threads would allow 2048 // 32 = 64; the SM holds at most 32 blocks (the driver agrees)
])
def test_blocks_per_sm_on_the_h200_counts_the_reservation_and_threads(smem, threads, expected):
    assert blocks_per_sm(smem, H200, threads) == expected


def test_allocated_smem_adds_the_reservation_and_rounds_to_the_unit():
    assert allocated_smem(111_744, H200) == 112_768     # 111,744 + 1,024 = 881 × 128 already
    assert allocated_smem(45_576, H200) == 46_720       # 46,600 → 365 × 128
    assert allocated_smem(0, H200) == 1_024
    assert allocated_smem(29_056, T4) == 29_184         # no reservation; 256 B units: 114 × 256
    assert allocated_smem(0, T4) == 0


def test_blocks_per_sm_without_a_reservation_on_the_t4():
    assert blocks_per_sm(32_768, T4) == 2        # 65,536 // 32,768 = 2: no reserved bytes on sm_75
    assert blocks_per_sm(32_769, T4) == 1
    assert blocks_per_sm(21_760, T4) == 3        # 85 × 256: 3 × 21,760 = 65,280 ≤ 65,536
    assert blocks_per_sm(21_761, T4) == 2        # → 22,016 in 256 B units: 3 × 22,016 = 66,048 > 65,536
    assert blocks_per_sm(0, T4, 32) == 16        # threads allow 1024 // 32 = 32; Turing holds at most 16 blocks
    assert blocks_per_sm(0, T4, 128) == 8        # 1024 threads // 128
    with pytest.raises(SpecError, match="threads_per_block=0"):
        blocks_per_sm(1024, T4, 0)
    with pytest.raises(SpecError, match="smem_bytes=-1"):
        blocks_per_sm(-1, T4)


@pytest.mark.parametrize("limits, dim, expected", [
    # (unpadded sums below; the padding adds 32·t B at d = 64 and 128)
    # H200, 233,472 B per SM, 1,024 B reserved per block:
    #   d=64:  t=96: 2 × (111,744 + 3,072 + 1,024) = 231,680 ≤ 233,472;  t=128: 2 × (165,376 + 4,096 + 1,024) > → 96
    (H200, 64, 96),
    #   d=128: t=48: 4·(6144 + 12,288 + 2304 + 144) + 1,536 = 85,056, 2 × 86,080 = 172,160 ≤ 233,472;
    #          t=64: 115,456 + 2,048 = 117,504, 2 × 118,528 = 237,056 > 233,472 → 48
    (H200, 128, 48),
    # A100, 167,936 B per SM, 1,024 reserved:
    #   d=64:  t=64: 2 × (66,304 + 1,024) = 134,656 ≤ 167,936;  t=96: 2 × 112,768 = 225,536 > → 64
    (A100, 64, 64),
    #   d=128: t=32: 4·(4096 + 8192 + 1024 + 96) = 53,632, 2 × 54,656 = 109,312 ≤ 167,936;
    #          t=48: 4·(6144 + 12,288 + 2304 + 144) = 83,520, 2 × 84,544 = 169,088 > 167,936 (by 1,152 B) → 32
    (A100, 128, 32),
    # T4, 65,536 B per SM, nothing reserved:
    #   d=64:  t=32: 4·(2048 + 4096 + 1024 + 96) = 29,056, 2 × 29,056 = 58,112 ≤ 65,536;
    #          t=48: 4·(3072 + 6144 + 2304 + 144) = 46,656, 2 × 46,656 = 93,312 > → 32
    (T4, 64, 32),
    #   d=128: t=16: 4·(2048 + 4096 + 256 + 48) = 25,792, 2 × 25,792 = 51,584 ≤ 65,536;
    #          t=32: 2 × 53,632 = 107,264 > → 16
    (T4, 128, 16),
])
def test_largest_square_tile_with_two_blocks_per_sm(limits, dim, expected):
    assert largest_square_tile(dim, limits) == expected


def test_largest_square_tile_other_targets_and_none():
    # one block per SM on the H200 at d=64: t=128 (165,376 + 1,024 ≤ 233,472); t=160: 4·(10,240 + 20,480 + 25,600 +
    # 480) = 227,200 ≤ 232,448 and 228,224 ≤ 233,472 → 160; t=192: 4·(12,288 + 24,576 + 36,864 + 576) = 297,216 > → 160
    assert largest_square_tile(64, H200, min_blocks=1) == 160
    assert largest_square_tile(64, H200, candidates=(128, 256)) is None
    assert largest_square_tile(64, H200, candidates=(96, 8, 64)) == 96   # order of candidates does not matter


def test_fits_names_the_bytes_and_the_limit():
    ok, why = fits(64, 64, 64, H200)
    assert ok and "68,352 B" in why and "opt-in" in why                    # over 48 KB: needs the opt-in attribute
    ok, why = fits(32, 32, 64, H200)
    assert ok and "30,080 B" in why and "49,152 B default" in why
    ok, why = fits(128, 128, 128, H200)                                     # 4·(16,384 + 32,768 + 16,384 + 384)
    assert not ok
    assert "267,776 B" in why and "232,448 B opt-in limit" in why and "NVIDIA H200" in why
    ok, why = fits(32, 32, 128, T4)                                         # 53,632 ≤ 65,536: fits with opt-in
    assert ok and "54,656 B" in why and "65,536 B opt-in limit" in why
    ok, why = fits(48, 48, 128, T4)                                         # 4·(6144 + 12,288 + 2304 + 144)
    assert not ok and "85,056 B" in why and "65,536 B opt-in limit of Tesla T4" in why


def test_query_device_says_why_without_a_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy → ImportError, as on a machine without CuPy
    with pytest.raises(UnavailableError, match="CuPy is not installed"):
        query_device()


def test_importing_the_module_imports_no_cupy():
    code = "import sys, kernels.budget; print('cupy' in sys.modules)"
    probe = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert probe.stdout.strip() == "False", probe.stderr


def test_cli_prints_the_table_and_the_largest_tile_with_its_arithmetic():
    done = run_module("kernels.budget", "--dim", "64", "--device", "h200")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "largest Br = Bc with at least 2 resident blocks per SM: 96" in out
    assert "2 × (114,816 + 1,024) = 231,680 ≤ 233,472 → 2 blocks/SM" in out
    assert "2 × (169,472 + 1,024) = 340,992 > 233,472 → 1 block/SM" in out
    assert "profile" in out and "not a query" in out
    assert "S tile" in out and "Br·Bc" in out and "linear in d" in out
    row64 = next(line for line in out.splitlines() if line.split()[:1] == ["64"])
    assert "66.8*" in row64                      # 68,352 B = 66.75 KB, over 48 KB: needs opt-in
    assert done.stderr == ""


def test_cli_without_a_gpu_or_device_defaults_to_the_h200_profile_and_says_so():
    done = run_module("kernels.budget", "--dim", "128")
    assert done.returncode == 0, done.stderr
    if "queried from the GPU" not in done.stdout:
        assert "'h200' profile" in done.stdout and "not a query" in done.stdout
        assert "largest Br = Bc with at least 2 resident blocks per SM: 48" in done.stdout
        assert "261.5x" in done.stdout           # Br=Bc=128 at d=128 is over the opt-in limit


def test_cli_over_the_opt_in_limit_and_no_tile():
    done = run_module("kernels.budget", "--dim", "256", "--device", "t4", "--br-bc", "32,64")
    assert done.returncode == 0, done.stderr
    assert "none among 32, 64" in done.stdout
    assert "opt-in limit → 0 blocks/SM" in done.stdout     # 4·(32·256·3 + 1024 + 96) = 102,784 > 65,536


@pytest.mark.parametrize("args, names", [
    (["--dim", "0"], ["0", "1..256"]),
    (["--dim", "300"], ["300", "1..256"]),
    (["--dim", "sixty"], ["sixty", "1..256"]),
    (["--dim", "64", "--device", "v100"], ["v100", "h200, a100, t4"]),
    (["--dim", "64", "--br-bc", "8,,16"], ["8,,16"]),
    (["--dim", "64", "--br-bc", "8,x"], ["'x'", "1..1024"]),
    (["--dim", "64", "--br-bc", "0,8"], ["0", "1..1024"]),
    ([], ["--dim"]),
    (["--dim", "64", "--bogus"], ["--bogus"]),
])
def test_bad_arguments_exit_2_with_one_line(args, names):
    done = run_module("kernels.budget", *args)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kbench: error: "), done.stderr
    for name in names:
        assert name in lines[0]


def test_main_in_process_returns_2(capsys):
    assert main(["--dim", "999"]) == 2
    assert capsys.readouterr().err.startswith("kbench: error: argument --dim: dim=999 is out of range; allowed: 1..256")


@pytest.mark.gpu
def test_query_device_matches_the_gpu_and_the_driver_occupancy():
    import cupy
    from cupy.cuda import driver

    limits = query_device()
    attrs = cupy.cuda.Device().attributes
    assert limits.sms == attrs["MultiProcessorCount"]
    assert limits.smem_per_sm == attrs["MaxSharedMemoryPerMultiprocessor"]
    assert limits.smem_per_block_default == attrs["MaxSharedMemoryPerBlock"]
    assert limits.smem_per_block_optin == attrs["MaxSharedMemoryPerBlockOptin"]
    assert limits.reserved_smem_per_block == attrs["ReservedSharedMemoryPerBlock"]
    assert limits.regs_per_sm == attrs["MaxRegistersPerMultiprocessor"]
    assert limits.max_threads_per_sm == attrs["MaxThreadsPerMultiProcessor"]
    if "H200" in limits.name:
        assert dataclasses.replace(limits, name=H200.name) == H200

    # The driver's occupancy for a kernel with no static shared memory and few registers is what blocks_per_sm
    # computes: shared memory (reservation, allocation unit), threads and the cap on blocks per SM.
    kernel = cupy.RawKernel('extern "C" __global__ void touch(float* out) {'
                            ' extern __shared__ float buf[]; buf[threadIdx.x] = threadIdx.x; __syncthreads();'
                            ' if (threadIdx.x == 0) out[blockIdx.x] = buf[blockDim.x - 1]; }', "touch")
    kernel.max_dynamic_shared_size_bytes = limits.smem_per_block_optin
    sizes = [flash_smem_bytes(tile, tile, dim) for dim in (59, 64, 128) for tile in (8, 17, 32, 48, 64, 96, 128)]
    sizes += [0, 1, 45_568, 45_576, limits.smem_per_block_optin]
    for smem in sizes:
        if smem > limits.smem_per_block_optin:
            continue
        for threads in (32, 128, 256):
            expected = driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, threads, smem)
            assert blocks_per_sm(smem, limits, threads) == expected, (smem, threads)
