"""`python -m kernels.headline --variants tc|tf32|wgmma --set NAME`: the development sweep of one kernel's launch
configurations (what chose TC_CONFIGS, TF32_CONFIGS and WGMMA_CONFIGS in kernels/variants.py). Each launch, built
from its variant record, is judged against the float64 golden at the awkward CHECK_SEQS (3 heads), then timed at
N 4096 (16 heads) beside its anchors (kernels/headline_timing.py); every launch is a row of the one results schema,
a table of the timed rows ends the sweep.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Sequence

from host.cli_common import output_folder
from host.out_lock import sweep_lock
from host.errors import SpecError
from host.problem import AttentionProblem
from host.results import FAILED_STATUSES, Result
from host.results_file import ResultsFile
from host.safe_files import keep_aside
from host.target_api import Inputs, RunContext
from host.timing import summarize
from host.verdict import check_float
from kernels import target
from kernels.headline_timing import WARMUP, kernel_ms, rate, ratio, torch_ms
from kernels.variants import FLASH_TC, FLASH_TF32, FLASH_WGMMA, TcConfig, Tf32Config, Variant, WgmmaConfig

#: N of a sweep's timed launches unless --seqs.
VARIANT_SEQS = (4096,)

#: --variants KERNEL --set NAME: the launch configurations a development sweep tries (what scripts/gpu_tc_bench.py,
#: gpu_tf32_bench.py and gpu_wgmma_bench.py did), per head dimension; "all" is the sweep that chose the committed
#: TC_CONFIGS, TF32_CONFIGS and WGMMA_CONFIGS (kernels/variants.py), "quick" one launch per d.
#: A persistent launch's blocks: one an SM of the H100 SXM and the H200 (132), the Hopper parts this runs on; the
#: kernel walks every tile whatever the grid, so another count is slower, never wrong.
PERSISTENT_BLOCKS = 132
VARIANT_SETS = {
    "tc": {"all": {64: [TcConfig(4, 64, 2), TcConfig(8, 64, 2), TcConfig(4, 128, 1), TcConfig(4, 128, 2)],
                   128: [TcConfig(8, 128, 1), TcConfig(4, 32, 2), TcConfig(8, 32, 2), TcConfig(4, 64, 2),
                         TcConfig(8, 64, 2)]},
           "quick": {64: [TcConfig(4, 64, 1)], 128: [TcConfig(4, 64, 1)]}},
    "tf32": {"all": {64: [Tf32Config(4, 32, 2, False), Tf32Config(4, 32, 1, True), Tf32Config(4, 64, 1, True),
                          Tf32Config(8, 64, 1, True)],
                     128: [Tf32Config(8, 64, 1, False), Tf32Config(8, 32, 1, False), Tf32Config(4, 32, 1, False)]},
             "quick": {64: [Tf32Config(4, 32, 2, False)], 128: [Tf32Config(8, 64, 1, False)]}},
    "wgmma": {"all": {64: [WgmmaConfig(128, c, 2, s) for c in (2, 3) for s in (0, 1, 2)]
                      + [WgmmaConfig(128, 2, 3, 2), WgmmaConfig(128, 3, 3, 2)],
                      128: [WgmmaConfig(128, 2, 2, s) for s in (0, 1, 2)] + [WgmmaConfig(128, 2, 3, 2)]},
              "quick": {64: [WgmmaConfig(128, 2, 3, 2)], 128: [WgmmaConfig(128, 2, 3, 2)]},
              "stages": {64: [WgmmaConfig(128, 2, 3, s) for s in (0, 1, 2)] + [WgmmaConfig(128, 2, 4, 2)],
                         128: [WgmmaConfig(128, 2, 3, s) for s in (0, 1, 2)]},
              # issue 34: three consumer warpgroups (Br 192, FlashAttention-3's d-64 tile) now that the producer
              # warpgroup and the turns exist (last tried at 2 stages, schedule 0), the stage count at each d, and
              # the larger key blocks (FA3's Bc 176 at d 128; Bc 192 fills 227 KB at d 128 with 2 stages): the
              # softmax bookkeeping a block (max, shuffles, rescale of O) spread over more MMA work
              "i34": {64: [WgmmaConfig(128, 2, 3, 2), WgmmaConfig(128, 3, 3, 2), WgmmaConfig(128, 3, 4, 2),
                           WgmmaConfig(128, 2, 4, 2), WgmmaConfig(192, 2, 2, 2), WgmmaConfig(192, 2, 3, 2)],
                      128: [WgmmaConfig(128, 2, 3, 2), WgmmaConfig(128, 2, 2, 2), WgmmaConfig(176, 2, 2, 2),
                            WgmmaConfig(192, 2, 2, 2)],
                      },
              # issue 34: the launch now beside its persistent form (PERSISTENT_BLOCKS blocks walking the tiles, the
              # next tile's Q and keys loaded under this one's last P·V and epilogue), and the persistent Bc 176 /
              # 192 launches
              "persist": {64: [WgmmaConfig(128, 2, 3, 2), WgmmaConfig(128, 2, 3, 2, PERSISTENT_BLOCKS),
                               WgmmaConfig(192, 2, 3, 2, PERSISTENT_BLOCKS)],
                          128: [WgmmaConfig(128, 2, 3, 2), WgmmaConfig(128, 2, 3, 2, PERSISTENT_BLOCKS),
                                WgmmaConfig(176, 2, 2, 2, PERSISTENT_BLOCKS)]},
              # after the first persist run (H100, N 4096): Bc 192 at d 64 with and without the persistent grid
              "bc192": {64: [WgmmaConfig(128, 2, 3, 2), WgmmaConfig(192, 2, 3, 2),
                             WgmmaConfig(192, 2, 3, 2, PERSISTENT_BLOCKS)],
                        128: [WgmmaConfig(128, 2, 3, 2), WgmmaConfig(128, 2, 3, 2, PERSISTENT_BLOCKS)]},
              # K released after S, V after P·V (FlashAttention-3's order): two stages of the larger key blocks
              # should hold where one release after P·V starved them (Bc 176 at d 128: 22 % slower on the H100);
              # and schedule 3 (the exponentials no longer behind the wait for the warpgroup's own P·V) with it
              "early_k": {64: [WgmmaConfig(192, 2, 3, 2), WgmmaConfig(192, 2, 3, 2, 0, True),
                               WgmmaConfig(192, 2, 2, 2, 0, True), WgmmaConfig(192, 2, 3, 3, 0, True)],
                          128: [WgmmaConfig(128, 2, 3, 2), WgmmaConfig(128, 2, 3, 2, 0, True),
                                WgmmaConfig(176, 2, 2, 2, 0, True), WgmmaConfig(192, 2, 2, 2, 0, True),
                                WgmmaConfig(128, 2, 3, 3, 0, True)]},
              # schedule 3 beside the launches now, with and without K released early, and at d 128 Bc 176 on the
              # two stages that 227 KB hold (schedule 3 takes two only with K released early)
              "sched3": {64: [WgmmaConfig(192, 2, 3, 2), WgmmaConfig(192, 2, 3, 3), WgmmaConfig(192, 2, 3, 3, 0, True)],
                         128: [WgmmaConfig(128, 2, 3, 2), WgmmaConfig(128, 2, 3, 3),
                               WgmmaConfig(128, 2, 3, 3, 0, True), WgmmaConfig(176, 2, 2, 3, 0, True)]}},
}
VARIANT_SETS["tc"]["d128"] = {128: VARIANT_SETS["tc"]["all"][128]}
RECORDS = {"tc": FLASH_TC, "tf32": FLASH_TF32, "wgmma": FLASH_WGMMA}
#: The awkward lengths each launch is checked at (3 heads) before it is timed at N 4096 (16 heads).
CHECK_SEQS = (1, 17, 1000, 4097)
DEFAULT_OUT = Path("reports/latest/variants")


def configured(record: Variant, config: tuple, dim: int) -> Variant:
    """`record` launching `config` at head dimension `dim`, causal or not."""
    keys = [dim] if record is FLASH_WGMMA else [(dim, False), (dim, True)]
    return dataclasses.replace(record, configs=tuple((key, config) for key in keys))


def variant_row(chosen: Variant, problem: AttentionProblem, iters: int, dev, context: RunContext,
                timed: bool) -> Result:
    """One launch of `chosen` judged against the float64 golden (host/verdict.py) and, when `timed`, timed with the
    device's timer; a launch over the device's shared memory is skipped, one that fails to build or run an error."""
    config = chosen.config(problem)
    [launch_record] = chosen.launches(problem, config.br, config.bc)
    fields = dict(br=config.br, bc=config.bc, warmup=WARMUP if timed else 0,
                  message=f"{launch_record.function}: {launch_record.block[0]} threads, {launch_record.smem} B shared")
    if launch_record.smem > dev.smem_optin():
        return context.result(problem, "gpu", "flash", dev.describe(), status="skipped",
                              **{**fields, "message": fields["message"] + f" > {dev.smem_optin()} B opt-in"})
    try:
        inputs = Inputs(problem)
        launch = dev.launcher("flash", problem, inputs, config.br, config.bc, chosen.path, chosen=chosen)
        launch.launch()
        out = launch.output()
        target.check_output("flash", out)
        verdict = check_float(out, problem, inputs.golden_from(dev.golden))
        if timed:
            fields.update(summarize(dev.event_times(launch.launch, WARMUP, iters)).as_fields(),
                          timing_source=dev.timing_source)
    except Exception as exc:  # noqa: BLE001 - a launch that does not build or run is its row; the sweep goes on
        return context.result(problem, "gpu", "flash", dev.describe(), status="error",
                              **{**fields, "message": f"{fields['message']}: {type(exc).__name__}: {exc}"[:500]})
    return context.result(problem, "gpu", "flash", dev.describe(), verdict=verdict, **fields)


def anchors(kind: str, problem: AttentionProblem, iters: int, settings: target.Settings) -> dict[str, float | None]:
    """Median ms of what a variant is timed beside: torch FLASH and cuDNN (16-bit), torch EFFICIENT and the FFMA
    kernel (3xTF32), and the mma.sync kernel beside wgmma."""
    if kind == "tf32":
        found = {"EFFICIENT": torch_ms(problem, iters, settings)[0],
                 "FFMA": kernel_ms("flash", problem, iters, dataclasses.replace(settings, fp32_path="simt"))}
    else:
        found = {name: torch_ms(problem, iters, settings, f"{name}_ATTENTION")[0] for name in ("FLASH", "CUDNN")}
    if kind == "wgmma":
        found["mma.sync"] = kernel_ms("flash", problem, iters, dataclasses.replace(settings, tc_path="mma"))
    return found


def variants_sweep(kind: str, chosen_set: str, iters: int, seq_scale: int, settings: target.Settings,
                   out: Path, seqs: Sequence[int] = VARIANT_SEQS) -> int:
    """Every launch of VARIANT_SETS[kind][chosen_set], in each dtype of the kernel and both masks: checked at the
    awkward CHECK_SEQS, then timed at each N of `seqs` (already divided by the scale) beside its anchors; rows into
    OUT/results.csv (a previous one kept aside, OUT locked while it runs), a table on stdout; 1 where one of this
    run's rows failed."""
    if chosen_set not in VARIANT_SETS[kind]:
        raise SpecError(f"--set {chosen_set!r} has no {kind} variants; allowed: {', '.join(VARIANT_SETS[kind])}")
    context = RunContext.start()
    with sweep_lock(output_folder(out), "kernels.headline --variants"):  # before the previous file is moved aside
        keep_aside(out / "results.csv")  # results.csv.prev (.1, .2, ...): each run's file holds its rows alone
        results = ResultsFile(out / "results.csv")
        try:
            written = sweep_variants(kind, chosen_set, iters, seq_scale, settings, results, context, seqs)
        except KeyboardInterrupt:  # what the stop kept, before guard's one line
            print(f"kbench: the {sum(1 for _ in results.rows())} rows measured before the stop are in "
                  f"{results.path}", file=sys.stderr)
            raise
    return 1 if any(row.status in FAILED_STATUSES for row in written) else 0


def sweep_variants(kind: str, chosen_set: str, iters: int, seq_scale: int, settings: target.Settings,
                   results: ResultsFile, context: RunContext, seqs: Sequence[int]) -> list[Result]:
    """variants_sweep's body: the checks and the timed rows, each appended to `results` as it ends; this run's
    rows."""
    record, dev = RECORDS[kind], target.backend(settings)
    print(f"device: {dev.describe()}", flush=True)  # the fake says it is numpy on the CPU before any row
    checks = sorted({max(1, seq // seq_scale) for seq in CHECK_SEQS})
    table, written = [], []
    for dtype in record.dtypes:
        for dim, configs in VARIANT_SETS[kind][chosen_set].items():
            for causal in (False, True):
                checked = AttentionProblem(heads=3, seq=1, dim=dim, causal=causal, dtype=dtype)
                for config in configs:
                    chosen = configured(record, config, dim)
                    for seq in checks:
                        results.append(row := variant_row(chosen, checked.with_(seq=seq), iters, dev, context,
                                                          timed=False))
                        written.append(row)
                        print(f"  check {row.message.split(':')[0]} N={seq} causal={int(causal)}: {row.status}",
                              file=sys.stderr, flush=True)
                for n in seqs:
                    timed = checked.with_(heads=16, seq=n)
                    beside = anchors(kind, timed, iters, settings)
                    for config in configs:
                        results.append(row := variant_row(configured(record, config, dim), timed, iters, dev,
                                                          context, timed=True))
                        table.append((row, config, beside))
                        written.append(row)
    print_variants(table)
    print(f"{results.path}")
    return written


def print_variants(table: list) -> None:
    """The timed rows: the launch, ms and TFLOP/s (host/problem.py's FLOP formula), each anchor's TFLOP/s and our
    speed over it."""
    for row, config, beside in table:
        problem = AttentionProblem(heads=row.heads, seq=row.seq, dim=row.dim, causal=row.causal, dtype=row.dtype)
        ours = row.p50_ms
        versus = "  ".join(f"{name} {rate(problem, ms)} (x{ratio(ms, ours)})" if ours and ms else f"{name} -"
                           for name, ms in beside.items())
        timing = f"{ours:8.3f} ms {rate(problem, ours):>6} TFLOP/s" if ours else f"{row.status:>24}"
        if ours and row.status != "ok":  # a wrong row keeps its time: its verdict must show beside it
            timing += f" {row.status.upper()}"
        print(f"{row.dtype:<9} N{row.seq:<6} d{row.dim:<4} causal={int(row.causal)} {tuple(config)!s:<20} {timing}  "
              f"{versus}")
