"""The asic target of host.compare: the Q15 problem on a modelled systolic datapath (codesign/), one kernel per
datapath the --asic-… options describe (its short name, e.g. sa32x32-os-acc40).

A row carries the datapath's output judged like every Q15 row (bit-exact with host/q15.py at the contract's Bc,
host.q15.BC, whatever the array's shape, and within the contract's bound of the float64 golden), and its latency from
the cycle model at the given clock, marked modelled: nothing here is measured on hardware; Br is the query tile of the
datapath's mapping (R, unless the mapper chose another under the overlap schedule). Its GFLOP/s and GB/s (of the
datapath's modelled DRAM bytes) are RunContext.result's, over that modelled latency. The roof is the model's own: R×C
MACs (2 operations each) per cycle and the DRAM interface's bytes per cycle.

Every shape of the contract runs (`supports`): a decode problem's q_len queries are the array's M (one tile of
q_len rows: a decode step of one query fills 1 of R rows of an output-stationary array), grouped K/V heads run their
query heads one after another, each K/V head read once for its group when the K/V buffers hold it (else again for
each query head); the row's message says which, and on a datapath of several arrays or the overlap schedule it names
the mapper's mapping."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from codesign.buffers import buffer_shortfall
from codesign.datapath import Datapath
from codesign.evaluate import evaluate, mapping_note
from codesign.mapper import tile_heights
from codesign.options import add_datapath_options, datapaths
from host.errors import SpecError
from host.problem import AttentionProblem
from host.q15 import BC, SEQ_MAX
from host.results import Result
from host.target_api import Inputs, RunOptions

#: The model is deterministic: one evaluation, no warm-up.
REPEATS = (0, 1)
#: --resume matches asic rows by kernel name alone: the name carries the whole datapath, and rows' device strings
#: describe each datapath (not one device for the target).
RESUME_BY_DEVICE = False
PREFIX = "asic-"
TIMING_SOURCE = "modelled: codesign cycle model"


@dataclass(frozen=True)
class Settings:
    """The datapaths to evaluate, one kernel each."""

    datapaths: tuple[Datapath, ...] = (Datapath(),)


def add_options(group: argparse._ArgumentGroup) -> None:
    add_datapath_options(group, prefix=PREFIX, lists=True)


def settings(args: argparse.Namespace) -> Settings:
    if "asic" in (getattr(args, "targets", None) or ("asic",)) and (getattr(args, "warmup", None) is not None
                                                                    or getattr(args, "iters", None) is not None):
        print("kbench: --warmup and --iters do not apply to the asic target: its model is evaluated once per row",
              file=sys.stderr)
    return Settings(datapaths(args, prefix=PREFIX))


#: A model needs no device of a cluster worker's own: any worker runs its rows (host/target_api.py ClusterNeeds).
CLUSTER = None


def kernels(settings: Settings) -> dict[str, str]:
    """{kernel name: dtype}: one kernel per datapath, named by its short name."""
    return {datapath.name: "q15" for datapath in settings.datapaths}


#: The kernel names a sweep with default options runs (host.compare lists them; `kernels` gives the real ones).
KERNELS = kernels(Settings())


def available(settings: Settings = Settings()) -> tuple[bool, str]:
    """A model runs wherever numpy does."""
    return True, f"codesign datapath model ({', '.join(kernels(settings))})"


def supports(problem: AttentionProblem) -> tuple[bool, str]:
    """Every shape within the Q15 contract's keys: self-attention, decode against a KV cache (q_len < seq) and grouped
    K/V heads."""
    if problem.seq > SEQ_MAX:
        return False, f"seq={problem.seq} is past the Q15 contract's {SEQ_MAX} keys (host.q15.SEQ_MAX)"
    return True, ""


def device(settings: Settings | None = None, session: object = None) -> str:
    """What the rows ran on: the datapath when there is one, else the model in general."""
    if settings is not None and len(settings.datapaths) == 1:
        return settings.datapaths[0].describe()
    return "ASIC model (codesign)"


def run(problem: AttentionProblem, inputs: Inputs, options: RunOptions[Settings]) -> list[Result]:
    """Evaluate `problem` on the datapath named by options.kernel; one row with its verdict and modelled latency. The
    datapath computes the Q15 contract, so its row is a q15 row whatever dtype `problem` was posed in."""
    problem = problem.with_(dtype="q15")
    chosen = {datapath.name: datapath for datapath in (options.settings or Settings()).datapaths}
    if options.kernel not in chosen:
        raise SpecError(f"kernel {options.kernel!r} is not a datapath of this sweep; allowed: {', '.join(chosen)}")
    dp = chosen[options.kernel]
    # the smallest query tile the datapath's mapper may choose: R under the serial schedule, one row under overlap
    smallest = dp.rows if dp.schedule == "serial" else min(tile_heights(dp, problem.queries))
    shortfall = buffer_shortfall(dp, problem.dim, tile_rows=smallest)
    if shortfall:  # this datapath cannot run this head at all: a missing capability, not a failure to retry
        return [options.context.result(problem, target="asic", kernel=dp.name, device=dp.describe(), br=smallest,
                                       bc=BC, status="skipped", message=f"skipped: {shortfall}")]
    result = evaluate(problem, inputs, dp)
    ms = result.latency_s * 1e3
    stages = result.head.stages
    macs = "the array's" if dp.arrays == 1 else f"the {dp.arrays} arrays'"
    note = (f"modelled: array {stages['array'].utilisation:.0%} busy-utilised, softmax "
            f"{stages['softmax'].utilisation:.0%}, overall {result.model.utilisation:.1%} of {macs} MACs; "
            f"DRAM stalls {result.model.stall_cycles} cycles; K/V {result.head.buffering['kv']}")
    mapping = mapping_note(result.model)
    if mapping:
        note += f"; {mapping}"
    if result.overflows:
        note += f"; {result.overflows} accumulator results overflowed ({dp.acc_bits}-bit, {dp.overflow})"
    return [options.context.result(
        problem, target="asic", kernel=dp.name, device=dp.describe(), br=result.model.mapping.tile_rows, bc=BC,
        mean_ms=ms, p50_ms=ms, p99_ms=ms, min_ms=ms, iters=1, warmup=0, model_bytes=result.dram_bytes,
        peak_gflops=2 * dp.arrays * dp.rows * dp.cols * dp.clock_hz / 1e9,
        peak_gbps=dp.dram_bytes_per_cycle * dp.clock_hz / 1e9,
        peak_source=f"model: {dp.arrays if dp.arrays > 1 else ''}{' x ' if dp.arrays > 1 else ''}{dp.rows}x{dp.cols} "
                    f"MACs and {dp.dram_bytes_per_cycle:g} DRAM B/cycle at {dp.clock_hz / 1e6:g} MHz",
        cycles=result.cycles, clock_hz=int(dp.clock_hz), timing_source=TIMING_SOURCE, verdict=result.verdict,
        message=note)]
