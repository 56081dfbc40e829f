"""The GPU development tools, where they run without a GPU: scripts/sass_order.py (the order of waits, barriers, MMAs
and exponentials in a SASS listing) on a hand-written listing, and the usage errors of scripts/sass_order.py,
scripts/ncu_vs_torch.py and kernels.inference_bench's sweeps."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A cuobjdump-style listing, written by hand: one function whose softmax exponentials sit behind a wait for all
# MMAs (the placement ptxas chose for schedule 2), with encodings and an ignored instruction in between.
LISTING = """
        Function : _Z4demov
        /*0000*/                   BAR.SYNC.DEFER_BLOCKING R19, 0x100 ;    /* 0x000400130000751d */
        /*0010*/                   HGMMA.64x128x16.F32 R88, gdesc[UR12], RZ, !UPT ;    /* 0x01e000000c5879f0 */
        /*0020*/                   HGMMA.64x128x16.F32 R88, gdesc[UR12], R88, gsb0 ;   /* 0x01e000000c5879f0 */
        /*0030*/                   HGMMA.64x128x16.F32 R24, R152, gdesc[UR4].tnspB, R24, gsb0 ; /* 0x41e0 */
        /*0040*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;    /* 0x00008000000079c5 */
        /*0050*/                   BAR.ARV R19, 0x100 ;    /* 0x000400130000751d */
        /*0060*/                   FMNMX R19, R89, R88, !PT ;    /* 0x0000005859137209 */
        /*0070*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;    /* 0x00008000000079c5 */
        /*0080*/                   MUFU.EX2 R88, R88 ;    /* 0x0000005800587308 */
        /*0090*/                   MUFU.EX2 R89, R89 ;    /* 0x0000005900597308 */
        /*00a0*/              @!P0 BRA 0x10 ;    /* 0x0000000000000000 */
"""


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_sass_order_collapses_runs_and_keeps_the_wait_before_the_exponentials(tmp_path):
    listing = tmp_path / "demo.sass"
    listing.write_text(LISTING)
    done = run("scripts/sass_order.py", str(listing))
    assert done.returncode == 0, done.stderr
    # by hand: the FMNMX is not a shown kind; the two S MMAs read A from shared memory, the P·V one from registers
    assert done.stdout.splitlines() == [
        "_Z4demov",
        "  0000  BAR.SYNC.DEFER_BLOCKING",
        "  0010  HGMMA.64x128x16.F32 (smem A) ×2",
        "  0030  HGMMA.64x128x16.F32 (P from registers)",
        "  0040  WARPGROUP.DEPBAR.LE gsb0, 0x1",
        "  0050  BAR.ARV",
        "  0070  WARPGROUP.DEPBAR.LE gsb0, 0x0",
        "  0080  MUFU.EX2 ×2",
        "  00a0  BRA",
    ]


def test_sass_order_refuses_a_file_that_is_no_listing_in_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("no functions here\n")
    done = run("scripts/sass_order.py", str(tmp_path / "notes.txt"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "holds no 'Function :' header" in done.stderr
    two = run("scripts/sass_order.py", str(tmp_path / "notes.txt"), "more")
    assert two.returncode == 2 and "usage: sass_order.py FILE.sass" in two.stderr


def test_sass_order_names_a_missing_file_and_prints_its_usage_on_help(tmp_path):
    missing = run("scripts/sass_order.py", str(tmp_path / "none.sass"))
    assert (missing.returncode, missing.stderr) == (2, f"kbench: error: {tmp_path / 'none.sass'} does not exist; "
                                                       "allowed: a file of cuobjdump --dump-sass output\n")
    helped = run("scripts/sass_order.py", "--help")
    assert helped.returncode == 0 and "cuobjdump" in helped.stdout


def test_sass_order_takes_an_mma_without_a_second_operand(tmp_path):
    # a truncated HGMMA line (no comma): listed as an MMA reading shared memory, not an IndexError
    (tmp_path / "cut.sass").write_text("Function : f\n/*0000*/ HGMMA.64x128x16.F32 R88 ;\n")
    done = run("scripts/sass_order.py", str(tmp_path / "cut.sass"))
    assert (done.returncode, done.stdout.splitlines()) == (0, ["f", "  0000  HGMMA.64x128x16.F32 (smem A)"]), done


def test_ncu_vs_torch_drive_without_a_gpu_says_why_in_one_line():
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed here: the drive would run")
    done = run("scripts/ncu_vs_torch.py", "drive", "decode_b1_4k")
    assert done.returncode == 1 and done.stderr.startswith("kbench: ncu_vs_torch drive needs a GPU: ") and \
        done.stderr.count("\n") == 1, done.stderr


def test_ncu_vs_torch_names_its_cases_on_a_bad_one():
    done = run("scripts/ncu_vs_torch.py", "drive", "decode_b1_9k")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "CASE from decode_b1_4k, decode_b1_16k, prefill_d128_4k, prefill_d64_1k; got drive decode_b1_9k" \
        in done.stderr


def test_ncu_vs_torch_profile_without_a_gpu_says_so_once_and_keeps_nothing_half_written(tmp_path):
    """profile under a stand-in ncu that runs the driver: no GPU is one line and exit 1 at the first case (each case
    printed 'ncu exit 1'); an OUTDIR that is a file is one line (a FileExistsError traceback); --help is the usage."""
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed here: the drive would run")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ncu").write_text('#!/bin/sh\nshift 8\nexec "$@"\n')  # drop ncu's 8 options, run the driver
    (bin_dir / "ncu").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "scripts/ncu_vs_torch.py", "profile", str(out)], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, env=env)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("kbench: ncu_vs_torch drive needs a GPU: ") and \
        done.stderr.endswith("; no case profiled\n") and done.stderr.count("\n") == 1, done.stderr
    assert sorted(path.name for path in out.iterdir()) == ["decode_b1_4k.txt"]  # the first case's log, whole
    (tmp_path / "file").write_text("x")
    done = subprocess.run([sys.executable, "scripts/ncu_vs_torch.py", "profile", str(tmp_path / "file")],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert (done.returncode, done.stderr) == (2, f"kbench: error: OUTDIR {tmp_path / 'file'} is not a folder; "
                                                 "allowed: a folder (new or existing)\n")
    helped = run("scripts/ncu_vs_torch.py", "--help")
    assert helped.returncode == 0 and "profile OUTDIR [CASE ...]" in helped.stdout


def test_the_decode_benchmark_takes_one_sweep_a_run():
    both = run("-m", "kernels.inference_bench", "--split-sweep", "--launch-sweep")
    assert both.returncode == 2 and both.stderr.count("\n") == 1
    assert "argument --launch-sweep: not allowed with argument --split-sweep" in both.stderr


@pytest.mark.parametrize("args, needle", [
    (["--split-sweep", "--quick", "--max-gib", "1"], "--quick, --max-gib shape the grid, which --split-sweep replaces"),
    (["--launch-sweep", "--no-other"], "--no-other shape the grid, which --launch-sweep replaces"),
    (["--out", __file__], "is a file; allowed: a folder"),  # the user's error, before the machine's lack of a GPU
])
def test_the_decode_benchmark_refuses_options_it_would_drop_and_a_bad_out_first(args, needle):
    done = run("-m", "kernels.inference_bench", *args)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and needle in done.stderr, done.stderr


def test_the_sweep_names_a_bad_out_before_the_missing_gpu():
    done = run("-m", "kernels.sweep", "--out", __file__)
    assert done.returncode == 2 and "is a file; allowed: a folder" in done.stderr, done.stderr


@pytest.mark.parametrize("env,code,line", [
    ({"STEPS": "shapes bogus"}, 2, "kbench: error: STEPS: unknown step 'bogus'; allowed: shapes ncu launch decode "
                                   "bench variants"),
    ({"OUT": "FILE", "STEPS": "launch"}, 2, "kbench: error: OUT FILE is not a folder; allowed: a folder (new or "
                                            "existing)"),
    ({"STEPS": "launch variants", "PATH": "/usr/bin:/bin"}, 3,
     "kbench: no NVIDIA GPU here (nvidia-smi is missing or sees none); these steps need one"),
])
def test_the_device_run_script_refuses_before_any_step_and_fails_when_a_step_does(tmp_path, env, code, line):
    """scripts/gpu_merge_persist_run.sh: a typo'd step or an OUT that is a file before any device time is spent, no
    GPU in one line (it ran every step into an archive and exited 0 with all of them failed)."""
    if env.get("OUT") == "FILE":
        env["OUT"] = str(tmp_path / "file")
        (tmp_path / "file").write_text("x")
        line = line.replace("FILE", env["OUT"])
    env.setdefault("OUT", str(tmp_path / "out"))
    if "PATH" in env and Path("/usr/bin/nvidia-smi").exists():
        pytest.skip("this machine has nvidia-smi")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_merge_persist_run.sh")], capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", **env})
    assert (proc.returncode, proc.stderr) == (code, line + "\n")
    assert not (tmp_path / "out").exists()


def test_the_device_run_script_exits_1_when_a_step_fails_and_keeps_an_earlier_calls_output(tmp_path):
    """With a stand-in nvidia-smi on a machine without a GPU, the launch step fails: exit 1 (it was 0), the step's
    exit in log.txt, and an earlier call's log.txt kept aside."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: stand-in'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    (out / "log.txt").write_text("an earlier call's log\n")
    path = f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_merge_persist_run.sh")], capture_output=True,
                          text=True, timeout=120, env={"PATH": path, "OUT": str(out), "STEPS": "launch"})
    assert proc.returncode == 1, proc.stderr
    assert "launch: exit 1" in (out / "log.txt").read_text() and (out / "launch.tgz").exists()
    [aside] = out.glob("log.txt.prev.*")
    assert aside.read_text() == "an earlier call's log\n"
