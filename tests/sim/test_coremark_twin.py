"""CoreMark on the board twin (scripts/coremark_twin.py): the twin's cycle model held to published Cortex-M4 scores.

The CoreMark run needs CoreMark's sources, which stay outside this project: it runs only when KBENCH_COREMARK names
a CoreMark folder (github.com/eembc/coremark) and skips with the reason otherwise. KBENCH_COREMARK_ITERATIONS sets
the iterations per run: 100 by default (a few seconds of emulation per seed set; every CoreMark check but its
10-second rule applies), or `auto` for CoreMark's full 10 s of modelled time (3-4 minutes per seed set on the
2-core VM), which must also print "Correct operation validated".

The expected figure. Published: 3.37 CoreMark/MHz (ST, STM32F407: 566 CoreMark at 168 MHz) and 3.40 (Arm,
Cortex-M4); neither names its compiler in what we found. The twin measures 2.398 for GCC 12.2 -O2
(reports/bench-mcu/coremark/), 0.705-0.712 of those. The accepted band is 0.67-0.75 of the published figures,
2.28-2.53 CoreMark/MHz, about +-5 % around the measurement:
- it fails if the model's taken-branch refill moves by one cycle either way (P=1 gives 2.65, P=3 gives 2.19: the
  refill is 19 % of the modelled cycles), or if loads lose or gain their second cycle (22 % of the cycles);
- it leaves +-5 % for another GCC release's -O2 code (only 12.2 was measured: a different compiler is the first
  thing to suspect when this fails with the model unchanged);
- it cannot reach the published figures: this binary executes 295 k instructions per iteration, so even one cycle per
  instruction would give at most 3.39 (docs/twin.md, "CoreMark").
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, have

SCRIPT = ROOT / "scripts" / "coremark_twin.py"
PUBLISHED = (3.37, 3.40)  # ST's STM32F407 figure, Arm's Cortex-M4 figure (CoreMark/MHz)
RATIO = (0.67, 0.75)  # twin (GCC 12.2 -O2) / published: measured 0.705-0.712
COREMARK_PER_MHZ = (RATIO[0] * PUBLISHED[1], RATIO[1] * PUBLISHED[0])  # 2.278 .. 2.528


def coremark_missing() -> str:
    """Why the CoreMark run cannot happen here ("" when it can)."""
    folder = os.environ.get("KBENCH_COREMARK", "")
    if not folder:
        return "no CoreMark sources: set KBENCH_COREMARK to a checkout of github.com/eembc/coremark"
    if not (Path(folder) / "coremark.md5").is_file():
        return f"KBENCH_COREMARK={folder} is not a CoreMark folder (no coremark.md5)"
    if not have("arm-none-eabi-gcc"):
        return "arm-none-eabi-gcc not found (Debian: gcc-arm-none-eabi)"
    missing = [name for name in ("unicorn", "capstone", "elftools") if importlib.util.find_spec(name) is None]
    if missing:
        return f"the twin's emulator needs {', '.join(missing)} (pip install -e '.[mcu]')"
    return ""


def run_script(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_coremark_on_the_twin_validates_and_scores_against_the_published_figures():
    reason = coremark_missing()
    if reason:
        pytest.skip(reason)
    iterations = os.environ.get("KBENCH_COREMARK_ITERATIONS", "100")
    done = run_script("--coremark", os.environ["KBENCH_COREMARK"], "--iterations", iterations, "--opt=-O2", "--json",
                      timeout=3500)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    runs = json.loads(done.stdout.splitlines()[-1])["runs"]
    assert [run["seeds"] for run in runs] == ["performance", "validation"]
    for run in runs:
        # CoreMark's own checks: known seeds, list/matrix/state CRCs equal its table, data types; the 10 s rule is
        # the only error a short run may print.
        assert run["checks_passed"], run
        if run["seconds"] >= 10:
            assert run["validated"] and run["errors"] == [], run
        else:
            assert run["errors"] == ["ERROR! Must execute for at least 10 secs for a valid result!"], run
        if iterations != "auto":
            assert run["iterations"] == int(iterations)
        ratio = run["coremark_per_mhz"] / PUBLISHED[0], run["coremark_per_mhz"] / PUBLISHED[1]
        assert COREMARK_PER_MHZ[0] <= run["coremark_per_mhz"] <= COREMARK_PER_MHZ[1], (
            f"{run['seeds']}: {run['coremark_per_mhz']:.4f} CoreMark/MHz is {ratio[1]:.3f}-{ratio[0]:.3f} of the "
            f"published 3.37-3.40, outside {RATIO[0]}-{RATIO[1]}")


def test_a_folder_without_coremark_is_refused_with_the_reason(tmp_path):
    done = run_script("--coremark", str(tmp_path), "--iterations", "1", timeout=60)
    assert done.returncode == 2
    assert "not a CoreMark folder" in done.stderr and "eembc/coremark" in done.stderr


def test_a_changed_coremark_source_is_refused(tmp_path):
    """CoreMark's rules allow changes to core_portme* only; the script checks coremark.md5 as `make check` does."""
    (tmp_path / "core_main.c").write_text("int main(void) { return 0; }\n")
    (tmp_path / "coremark.md5").write_text("4a9e6dadce1ac3866381021fbe843fc9  core_main.c\n")
    done = run_script("--coremark", str(tmp_path), "--iterations", "1", timeout=60)
    assert done.returncode == 2
    assert "core_main.c differs from coremark.md5" in done.stderr


def test_iterations_must_be_positive_or_auto(tmp_path):
    done = run_script("--coremark", str(tmp_path), "--iterations", "0", timeout=60)
    assert done.returncode == 2 and "positive number or auto" in done.stderr
