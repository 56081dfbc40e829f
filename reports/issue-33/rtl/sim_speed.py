"""Amaranth's simulator on heads of several shapes: the host seconds to build the head engine's simulator and to run
one head, the basis of codesign/rtl/sim.py's estimate_seconds (docs/performance.md). From the checkout:
    .venv/bin/python reports/issue-33/rtl/sim_speed.py run [N ...] > reports/issue-33/rtl/sim_speed.txt
    .venv/bin/python reports/issue-33/rtl/sim_speed.py fit reports/issue-33/rtl/sim_speed.txt
`run` (shapes N ... of SHAPES, by default all) prints the machine's load and a matmul anchor (codesign/console.py)
before and after, then one row per shape (COLUMNS): the datapath, the head, its cycles; the build's seconds
(elaborating the engine and building Amaranth's simulator, timed on its own); simulate_heads' seconds (its own build,
loading the memories, running to done, reading O back); the run loop's cycles and CPU seconds alone (from its first
progress call to its last); a pure-Python anchor's CPU ms; the 1-minute load average. Seconds are wall-clock and this
process's CPU seconds: the simulator is one Python thread, so its CPU seconds are what an idle machine's wall clock
would show; on a loaded machine the wall clock is longer by the share of a core it did not get.
`fit` fits the head's CPU seconds (simulate_heads' less a build) by least squares, relative to each shape's own, to
codesign/rtl/sim.py CYCLE_US's form (each stage's busy cycles from sim.model_cycles times what the simulator evaluates
while it works), and beside it the form before (every cycle alike: base + R·C + R·d + E + D), each with its errors on
the heads measured and with each head left out of the fit in turn; then the build's CPU seconds, and each shape's
measured total beside estimate_seconds' (whatever its coefficients are when it runs)."""

import os
import sys
import time

import numpy as np

from codesign.console import machine
from codesign.datapath import Datapath
from codesign.rtl.sim import estimate_seconds, model_cycles, simulate_heads
from host.problem import AttentionProblem
from host.q15 import prepare

#: (R, C, E, D, seq, d, causal): one term at a time around 4×4 E4 D8 d16, and corners: R against C at one R·C, many
#: lanes and dividers on a small array, a 16×16; seq gives each head some 5,000 cycles.
SHAPES = [
    (2, 2, 1, 1, 37, 3, True),
    (2, 4, 2, 3, 12, 59, False),
    (4, 4, 4, 8, 34, 16, False),
    (4, 4, 4, 8, 17, 64, False),
    (4, 4, 1, 1, 16, 16, False),
    (4, 4, 16, 8, 34, 16, False),
    (4, 4, 4, 64, 35, 16, False),
    (4, 4, 16, 32, 17, 64, False),
    (8, 8, 8, 16, 46, 32, False),
    (8, 8, 1, 1, 29, 8, False),
    (2, 8, 8, 4, 29, 32, True),
    (8, 2, 2, 16, 17, 32, False),
    (16, 16, 16, 32, 80, 16, False),
    (16, 2, 2, 4, 21, 16, False),
    (2, 16, 2, 4, 49, 16, False),
    (8, 8, 1, 4, 13, 64, False),
    (2, 2, 16, 64, 27, 8, False),
    (16, 4, 4, 8, 59, 8, False),
    (4, 16, 8, 16, 41, 64, True),
    (8, 4, 32, 8, 41, 16, False),
    (4, 8, 2, 32, 33, 32, False),
    (16, 16, 4, 4, 80, 8, False),
]
COLUMNS = ("R C E D seq d causal cycles build_s build_cpu_s sim_s sim_cpu_s loop_cycles loop_cpu_s anchor_cpu_ms "
           "load1")
#: The anchor: CPU seconds of a fixed pure-Python loop (what the simulator is), median of 3, taken before each shape:
#: how much a busy machine slowed a CPU second then. Recorded only: dividing by it did not bring the fit closer.
ANCHOR_LOOP = 1_000_000


def anchor_cpu_s() -> float:
    times = []
    for _ in range(3):
        began = time.process_time()
        sum(i * i for i in range(ANCHOR_LOOP))
        times.append(time.process_time() - began)
    return sorted(times)[1]


def run(shapes: list[int]) -> None:
    from amaranth.sim import Simulator

    from codesign.rtl.head import HeadEngine

    print(f"# {machine().line()}")
    print(f"# {COLUMNS}")
    for R, C, E, D, seq, d, causal in (SHAPES[n] for n in shapes):
        dp = Datapath(rows=R, cols=C, exp_lanes=E, dividers=D)
        problem = AttentionProblem(seq=seq, dim=d, causal=causal, seed=0)
        quantized = prepare(problem, *problem.inputs(), dp.cols)
        head = (*quantized.head(0, 0), quantized.params)
        anchor = anchor_cpu_s()
        wall, cpu = time.perf_counter(), time.process_time()
        Simulator(HeadEngine(dp, seq, d))  # what simulate_heads builds before its first head
        build_wall, build_cpu = time.perf_counter() - wall, time.process_time() - cpu
        marks = []  # (simulated cycles so far, CPU seconds) at each progress call: every 1,000 cycles and the end

        def progress(cycles: int, marks: list = marks) -> None:
            marks.append(((marks[-1][0] if marks else 0) + cycles, time.process_time()))

        wall, cpu = time.perf_counter(), time.process_time()
        (rtl,) = simulate_heads([head], dp, progress)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        assert rtl.cycles == model_cycles(dp, seq, d, causal)[0], (dp.name, rtl.cycles)
        # the run loop alone: from the first progress call to the last (no build, no loading, no reading back)
        loop_cycles, loop_cpu = marks[-1][0] - marks[0][0], marks[-1][1] - marks[0][1]
        print(R, C, E, D, seq, d, int(causal), rtl.cycles, f"{build_wall:.2f}", f"{build_cpu:.2f}", f"{wall:.2f}",
              f"{cpu:.2f}", loop_cycles, f"{loop_cpu:.3f}", f"{anchor * 1e3:.1f}", f"{os.getloadavg()[0]:.2f}",
              flush=True)
    print(f"# {machine().line()}")


def _fit(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(coefficients, relative errors, relative errors with each row left out of the fit) of y ≈ X · coefficients,
    least squares relative to each y (a slow shape does not outweigh the rest)."""
    coef, *_ = np.linalg.lstsq(X / y[:, None], np.ones_like(y), rcond=None)
    left_out = []
    for n in range(len(y)):
        keep = np.arange(len(y)) != n
        others, *_ = np.linalg.lstsq(X[keep] / y[keep, None], np.ones(keep.sum()), rcond=None)
        left_out.append(X[n] @ others / y[n] - 1)
    return coef, X @ coef / y - 1, np.array(left_out)


def _band(errors: np.ndarray) -> str:
    return f"{errors.min():+.0%} to {errors.max():+.0%} (rms {np.sqrt((errors ** 2).mean()):.0%})"


def fit(path: str) -> None:
    with open(path, encoding="utf-8") as handle:
        rows = np.array([[float(x) for x in line.split()] for line in handle if line.strip() and line[0] != "#"])
    R, C, E, D, seq, d, causal, cycles, _, build, _, sim, *_ = rows.T
    head = sim - build  # CPU seconds of the head in simulate_heads: loading, running, reading back
    busy = []
    for shape in rows[:, :7].astype(int):
        dp = Datapath(rows=shape[0], cols=shape[1], exp_lanes=shape[2], dividers=shape[3])
        model = model_cycles(dp, shape[4], shape[5], bool(shape[6]))[1]
        busy.append([model.stages[name].busy_cycles for name in ("array", "softmax", "divider")])
    array, softmax, divider = np.array(busy, dtype=float).T
    # per stage busy: what the simulator evaluates only while the stage works (codesign/rtl/sim.py CYCLE_US)
    X = np.column_stack([cycles * R * d, array * R * C, softmax * E, softmax * E * R * C, divider * D * R * d]) * 1e-6
    coef, errors, left_out = _fit(X, head)
    print("head, CPU µs: {:.3g}·R·d every cycle + {:.3g}·R·C while the array is busy + ({:.3g}·E + {:.3g}·E·R·C) "
          "while the softmax unit is busy + {:.3g}·D·R·d while the divider bank is busy".format(*coef))
    print(f"  against the measured heads: {_band(errors)}; each left out of the fit: {_band(left_out)}")
    old = np.column_stack([cycles, cycles * R * C, cycles * R * d, cycles * E, cycles * D]) * 1e-6
    old_coef, old_errors, old_left_out = _fit(old, head)
    print("the form before (every cycle alike), refitted: {:.3g} + {:.3g}·R·C + {:.3g}·R·d + {:.3g}·E + {:.3g}·D µs "
          "per cycle".format(*old_coef))
    print(f"  against the measured heads: {_band(old_errors)}; each left out of the fit: {_band(old_left_out)}")
    B = np.column_stack([np.ones_like(E), E, D, R * C])
    build_coef, build_errors, _ = _fit(B, build)
    print("build, CPU s: {:.3g} + {:.3g}·E + {:.3g}·D + {:.3g}·R·C".format(*build_coef)
          + f"; against the measured builds: {_band(build_errors)}")
    print("R C E D seq d cycles | head fitted | build fitted | total CPU s, estimate_seconds, error")
    now_errors = []
    for n, shape in enumerate(rows[:, :7].astype(int)):
        dp = Datapath(rows=shape[0], cols=shape[1], exp_lanes=shape[2], dividers=shape[3])
        now = estimate_seconds(dp, shape[4], shape[5], bool(shape[6]))
        now_errors.append(now / sim[n] - 1)
        print(f"{' '.join(str(x) for x in shape[:6])} {cycles[n]:.0f} | {head[n]:.1f} {X[n] @ coef:.1f} | "
              f"{build[n]:.2f} {B[n] @ build_coef:.2f} | {sim[n]:.1f} {now:.1f} {now_errors[-1]:+.0%}")
    print(f"estimate_seconds (codesign/rtl/sim.py as it is) against the measured total: {_band(np.array(now_errors))}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        run([int(n) for n in sys.argv[2:]] or list(range(len(SHAPES))))
    elif sys.argv[1:2] == ["fit"] and len(sys.argv) == 3:
        fit(sys.argv[2])
    else:
        sys.exit("usage: sim_speed.py run | fit FILE")
