"""Simulated cache figures for the CPU target where hardware counters are missing: the float32 reference under
valgrind's cachegrind.

Valgrind 3.19 has no client request to start and stop instrumentation around one call, so the figures are
differential: a probe process (this module's ``__main__``) runs twice under ``valgrind --tool=cachegrind
--cache-sim=yes``, both times importing numpy and kbench, generating the problem's seeded inputs and making one warm
call of ``attention(q, k, v, causal, np.float32)``; the full run then makes the measured call, the baseline run does
not. The full run's summary totals minus the baseline's are the figures of one warm call. The two runs go in
parallel (they are independent simulations, so the counts do not depend on scheduling).

The subtraction is only as good as the two runs are alike, so everything but the call is held equal: both command
lines have one length (``--measured`` against ``--baseline``; an extra argument shifts the stack and with it the
simulated misses by thousands), PYTHONHASHSEED=0 fixes the interpreter's hashing, a gc.collect() precedes the call,
and the probe leaves through os._exit so interpreter teardown is not simulated. Identical runs then agree to a few
thousand instructions and to the miss.

Mapping onto `host.cpu.perf.Counters`: instructions = Ir; llc_loads = D1mr + D1mw (data accesses that miss the simulated
L1 and so reach the simulated last level); llc_misses = DLmr + DLmw; cycles = None, since cachegrind simulates no
timing. The last level's geometry is valgrind's guess from this machine's CPUID and is named in the reason.

The child runs with OPENBLAS_NUM_THREADS=1 and OMP_NUM_THREADS=1: valgrind serialises threads anyway, and it hides
AVX-512 from the guest, so BLAS picks narrower kernels than it would natively. These are simulated figures of a
single-thread run: a guide to cache behaviour, not a stand-in for hardware timing.

Probe: ``python -m host.cpu.cachegrind --batch B --heads H --seq N --dim d --causal 0|1 --seed S``
``[--baseline | --measured]``. Exit status: 0 measured; 2 bad arguments only (one ``kbench: error:`` line naming the
value); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from host.cli_common import Parser, exit_statuses, guard, integer
from host.cpu.perf import Counters
from host.problem import LIMITS, AttentionProblem
from host.reference import attention

SOURCE = "cachegrind (simulated)"

#: The folder that holds host/: the child's working directory and PYTHONPATH entry, so that `host` imports there.
PROJECT_ROOT = Path(__file__).resolve().parents[2]

#: The cachegrind events the mapping needs.
NEEDED = ("Ir", "D1mr", "D1mw", "DLmr", "DLmw")


def cachegrind_available() -> tuple[bool, str]:
    """(True, "") when valgrind is on PATH, else (False, how to get it)."""
    if shutil.which("valgrind") is None:
        return False, "valgrind not installed (apt install valgrind)"
    return True, ""


def parse_out(text: str) -> tuple[dict[str, int], str]:
    """The summary totals of a cachegrind out file by event name, and the LL cache description ("" if absent).

    Reads the ``events:`` line (names) and the ``summary:`` line (totals in the same order). ValueError when either
    is missing or they disagree in length.
    """
    events: list[str] | None = None
    summary: list[int] | None = None
    ll = ""
    for line in text.splitlines():
        if line.startswith("events:"):
            events = line.split(":", 1)[1].split()
        elif line.startswith("summary:"):
            summary = [int(word) for word in line.split(":", 1)[1].split()]
        elif line.startswith("desc:") and "LL cache:" in line:
            ll = line.split("LL cache:", 1)[1].strip()
    if events is None or summary is None:
        raise ValueError("cachegrind out file lacks its events: or summary: line")
    if len(events) != len(summary):
        raise ValueError(f"cachegrind summary has {len(summary)} totals for {len(events)} events")
    return dict(zip(events, summary)), ll


def counters_from_totals(full: dict[str, int], baseline: dict[str, int], ll: str = "") -> Counters:
    """Counters of the measured call: full-run totals minus baseline totals, mapped as the module docstring says.

    A difference that comes out negative means run-to-run noise outweighs the call: that figure is None, with why.
    """
    absent = [name for name in NEEDED if name not in full or name not in baseline]
    if absent:
        return Counters.missing(f"cachegrind reported no {', '.join(absent)} (was --cache-sim=yes given?)")
    delta = {name: full[name] - baseline[name] for name in NEEDED}
    figures = {
        "instructions": delta["Ir"],
        "llc_loads": delta["D1mr"] + delta["D1mw"],
        "llc_misses": delta["DLmr"] + delta["DLmw"],
    }
    noisy = [name for name, value in figures.items() if value < 0]
    reasons = ["cycles are not simulated by cachegrind" + (f"; simulated LL cache: {ll}" if ll else "")]
    if noisy:
        reasons.append(f"{', '.join(noisy)} below the run-to-run noise of the differential measurement")
    return Counters(
        llc_loads=None if "llc_loads" in noisy else figures["llc_loads"],
        llc_misses=None if "llc_misses" in noisy else figures["llc_misses"],
        instructions=None if "instructions" in noisy else figures["instructions"],
        cycles=None,
        source=SOURCE,
        reason="; ".join(reasons),
    )


def probe_args(problem: AttentionProblem, baseline: bool) -> list[str]:
    """The probe's command-line arguments for `problem`."""
    args = ["--batch", str(problem.batch), "--heads", str(problem.heads), "--seq", str(problem.seq),
            "--dim", str(problem.dim), "--causal", str(int(problem.causal)), "--seed", str(problem.seed)]
    return args + (["--baseline"] if baseline else ["--measured"])


def child_env() -> dict[str, str]:
    """This process's environment with one BLAS thread, a fixed hash seed and the project on PYTHONPATH."""
    env = dict(os.environ)
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0")
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT)] + [p for p in [env.get("PYTHONPATH", "")] if p])
    return env


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def simulate_reference(problem: AttentionProblem, timeout_s: float = 1800) -> Counters:
    """Simulated cache figures of one warm float32 reference call of `problem`; every figure None and a reason
    when valgrind is missing, fails or runs past timeout_s (seconds, both runs together)."""
    ok, reason = cachegrind_available()
    if not ok:
        return Counters.missing(reason)
    if not problem.square:
        shape = ", ".join(f"{name} {value}" for name, value in (("q_len", problem.q_len),
                                                                ("kv_heads", problem.kv_heads)) if value)
        return Counters.missing(f"cache simulation runs self-attention with a K/V head per query head only; this "
                                f"problem has {shape}")
    valgrind = shutil.which("valgrind")
    with tempfile.TemporaryDirectory(prefix="kbench-cachegrind-") as tmp:
        runs = {}
        deadline = time.monotonic() + timeout_s
        stderr = {}
        try:
            for name in ("full", "baseline"):
                out_file = Path(tmp) / f"{name}.out"
                command = [valgrind, "--tool=cachegrind", "--cache-sim=yes", "-q",
                           f"--cachegrind-out-file={out_file}",
                           sys.executable, "-m", "host.cpu.cachegrind", *probe_args(problem, name == "baseline")]
                process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=child_env(), stdin=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                runs[name] = (process, out_file)
            for name, (process, _) in runs.items():
                _, stderr[name] = process.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except OSError as e:
            return Counters.missing(f"valgrind could not be started: {e}")
        except subprocess.TimeoutExpired:
            return Counters.missing(f"cachegrind run of {problem.shape} ran past timeout_s={timeout_s:g} s")
        finally:
            for process, _ in runs.values():
                if process.poll() is None:
                    process.kill()
                    process.communicate()
        totals = {}
        ll = ""
        for name, (process, out_file) in runs.items():
            if process.returncode != 0:
                return Counters.missing(f"cachegrind {name} run failed (exit {process.returncode}): "
                                        f"{_last_line(stderr[name])}")
            try:
                totals[name], ll = parse_out(out_file.read_text(encoding="utf-8", errors="replace"))
            except (OSError, ValueError) as e:
                return Counters.missing(f"cachegrind {name} run left no usable out file: {e}")
    return counters_from_totals(totals["full"], totals["baseline"], ll)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m host.cpu.cachegrind", description="The probe: inputs and one warm call, then "
                    "(unless --baseline) the measured call of the float32 reference, run under cachegrind by "
                    "simulate_reference.", epilog=exit_statuses(__doc__))
    for name, meaning in (("batch", "batch size B"), ("heads", "heads H"), ("seq", "sequence length N"),
                          ("dim", "head dimension d")):
        parser.add_argument(f"--{name}", type=integer(name, *LIMITS[name]), required=True, help=f"{meaning} (required)")
    parser.add_argument("--causal", choices=("0", "1"), required=True,
                        help="causal masking (required; one mask: the probe measures one call)")
    parser.add_argument("--seed", type=integer("seed", 0), required=True, help="input seed (required)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--baseline", action="store_true", help="skip the measured call")
    mode.add_argument("--measured", action="store_true", help="make the measured call (the default; spelt out by "
                      "simulate_reference so both runs' command lines have one length)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The probe: inputs and one warm call, then (unless --baseline) the measured call of the float32 reference."""
    def body() -> int:
        args = build_parser().parse_args(argv)
        problem = AttentionProblem(batch=args.batch, heads=args.heads, seq=args.seq, dim=args.dim,
                                   causal=args.causal == "1", seed=args.seed)
        q, k, v = problem.inputs()  # (B, H, N, d) each
        attention(q, k, v, problem.causal, np.float32)  # warm: first-call costs stay in both runs
        gc.collect()  # no collection left pending to land inside the measured call
        if not args.baseline:
            attention(q, k, v, problem.causal, np.float32)
        return 0

    return guard(body)


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    os._exit(status)  # skip interpreter teardown, whose cost differs from run to run, so both runs end alike
