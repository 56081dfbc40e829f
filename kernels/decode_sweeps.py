"""Forced launches of the split-KV decode path beside the planner's, at Llama 3 8B's decode shape (fp16, 32 query
heads on 8 K/V heads, d 128), each judged against the planned launch's output before it is timed (issue 32):

- `split_sweep` (`python -m kernels.inference_bench --split-sweep`): block counts, as multiples of the SM count,
  at q_len 1;
- `launch_sweep` (`--launch-sweep`, Hopper only): the Hopper split kernel's key block and stage count, and its
  in-place merge against the combine launch, at the planner's block count: eager and CUDA-graph replays (the
  batch-1 steps a decode server replays), beside a kernel that only reads the same K and V bytes.

The benchmark (kernels/inference_bench.py) owns the CLI; kernels/decode_timing.py the inputs and timers.
"""

from __future__ import annotations

import dataclasses

from host.problem import AttentionProblem
from kernels import target
from kernels.cuda import stream_read
from kernels.decode_timing import DIM, HEADS, KV_HEADS, agreeing_us, device_tensors, replay_us
from kernels.launch_configs import WgmmaSplitConfig
from kernels.variants import SPLIT_WGMMA

#: --split-sweep: (batch, kv_len) points, and the block counts forced at each as multiples of the SM count (besides
#: one block a tile: no tile split), up to one block a unit.
SWEEP_POINTS = ((1, 4096), (1, 16384), (1, 65536), (1, 131072), (8, 4096), (32, 4096), (64, 4096), (64, 16384))
SWEEP_SM_MULTIPLES = (0.5, 1, 1.5, 2, 3, 4, 8)

#: --launch-sweep: (q_len, batch, kv_len) points where ours trailed cuDNN or the copy goal at batch 1 (run 9), and
#: the Hopper split launches tried at each: (label, key block, stages, merge in place). The first is the launch now
#: (WGMMA_SPLIT_CONFIGS at d 128); more stages keep more K/V bytes in flight an SM (six of 32 KB: 230,576 B of
#: shared memory), Bc 128 halves the per-block softmax bookkeeping and the stage waits, and "combine" is the
#: separate merge launch the in-place merge replaced.
LAUNCH_POINTS = ((1, 1, 4096), (1, 1, 16384), (1, 1, 65536), (1, 8, 4096), (16, 1, 16384))
LAUNCH_CHOICES = (("Bc64 s4", 64, 4, True), ("Bc64 s6", 64, 6, True), ("Bc64 s2", 64, 2, True),
                  ("Bc128 s3", 128, 3, True), ("Bc64 s4 combine", 64, 4, False))


def split_sweep(args, settings: target.Settings, writer) -> None:
    """Ours at q_len 1 with forced block counts beside the planner's, judged against the planned launch's output."""
    dev = target.backend(settings)
    sms = dev.sm_count()
    counts = [round(f * sms) for f in SWEEP_SM_MULTIPLES]
    print(f"{'batch':>5} {'kv_len':>7} {'planned':>7} {'tiles':>6} " + " ".join(f"{c:>6}" for c in counts) + "  (us)")
    for batch, kv_len in SWEEP_POINTS:
        problem = AttentionProblem(batch=batch, heads=HEADS, kv_heads=KV_HEADS, seq=kv_len, q_len=1, dim=DIM,
                                   dtype="float16")
        tensors = device_tensors(problem, seed=batch + kv_len)
        plan = target.launch_plan(problem, settings, dev)
        planned = target.launcher("flash", problem, tensors, plan.br, plan.bc, dev, plan.path, plan.parts)
        planned.launch()
        tiles = batch * KV_HEADS  # one 16-row tile a K/V head at q_len 1
        cells = []
        for parts in (tiles, *counts):
            if parts > tiles * -(-kv_len // plan.bc):
                cells.append("-")
                continue
            launch = target.launcher("flash", problem, tensors, plan.br, plan.bc, dev, plan.path, parts)
            us = agreeing_us(dev, launch, planned, f"{parts} blocks against the planned {plan.parts}", args.iters)
            cells.append(f"{us:.1f}")
            writer.writerow([batch, kv_len, plan.parts, parts, f"{us:.2f}"])
            del launch
        print(f"{batch:>5} {kv_len:>7} {plan.parts:>7} " + " ".join(f"{c:>6}" for c in cells), flush=True)
        del planned, tensors


def launch_choice(bc: int, stages: int, merges: bool):
    """The Hopper split-KV variant launching key block `bc` with `stages` stages at d 128, merging in place or not."""
    return dataclasses.replace(SPLIT_WGMMA, configs=((DIM, WgmmaSplitConfig(bc, stages)),), merges=merges)


def launch_sweep(args, settings: target.Settings, writer) -> None:
    """Each LAUNCH_CHOICES launch at each LAUNCH_POINTS point, at the planner's block count, judged against the
    planned launch's output, then timed eagerly (µs) and from a CUDA graph (`g:` µs); the read-only kernel of the
    same K and V bytes beside them (graph)."""
    dev = target.backend(settings)
    if dev.capability() != 90:
        print("launch sweep: skipped: the Hopper split-KV kernel needs sm_90", flush=True)
        return
    head = " ".join(f"{label:>16}" for label, *_ in LAUNCH_CHOICES)
    print(f"{'q_len':>5} {'batch':>5} {'kv_len':>7} {'blocks':>6} {head} {'g:read':>7}   (eager µs / g: graph µs)",
          flush=True)
    for q_len, batch, kv_len in LAUNCH_POINTS:
        problem = AttentionProblem(batch=batch, heads=HEADS, kv_heads=KV_HEADS, seq=kv_len, q_len=q_len, dim=DIM,
                                   dtype="float16")
        tensors = device_tensors(problem, seed=batch * kv_len + q_len)
        plan = target.launch_plan(problem, settings, dev)
        planned = target.launcher("flash", problem, tensors, plan.br, plan.bc, dev, plan.path, plan.parts)
        planned.launch()
        cells = []
        for label, bc, stages, merges in LAUNCH_CHOICES:
            chosen = launch_choice(bc, stages, merges)
            launch = dev.launcher("flash", problem, tensors, 64, bc, plan.path, chosen=chosen, parts=plan.parts)
            eager = agreeing_us(dev, launch, planned, f"{label} against the planned launch", args.iters)
            replay = replay_us(dev, "ours", launch.launch, args.iters)
            cells.append(f"{eager:.1f}/{replay:.1f}" if replay else f"{eager:.1f}/-")
            writer.writerow([q_len, batch, kv_len, plan.parts, label, f"{eager:.2f}",
                             f"{replay:.2f}" if replay else ""])
            del launch
        read = replay_us(dev, "read", stream_read(tensors.k, tensors.v), args.iters)
        print(f"{q_len:>5} {batch:>5} {kv_len:>7} {plan.parts:>6} " + " ".join(f"{c:>16}" for c in cells)
              + f" {f'{read:.1f}' if read else '-':>7}", flush=True)
        del planned, tensors
