"""One head (seed 0, not causal) through the Verilator-built head engine of a square array at the default datapath:
the Verilog's size, the build's seconds, the simulation's seconds and rate, the cycles against codesign/cycles.py's
(sim.model_cycles: the model less its DRAM prologue and epilogue) and the window-by-window walk, the stage counters
against the model's busy cycles, and the bits against host/q15.py. From the checkout:
.venv/bin/python reports/issue-33/rtl/one_head.py SEQ DIM SIDE [VHEAD] (8x8_seq256_d64.txt is `256 64 8`,
32x32_seq1024_d64.txt `1024 64 32`; VHEAD: an executable compiled.build made for that engine, simulated without a
build)."""

import sys
import time
from pathlib import Path

from codesign.datapath import Datapath
from codesign.rtl import compiled
from codesign.rtl.sim import model_cycles, schedule_cycles
from host.problem import AttentionProblem
from host.q15 import attention_q15, prepare

seq, dim, side = (int(arg) for arg in sys.argv[1:4])
dp = Datapath(rows=side, cols=side)
print("datapath", dp.name, "seq", seq, "dim", dim, flush=True)
if len(sys.argv) > 4:  # a build kept from an earlier run (its vhead), not rebuilt: `... SEQ DIM SIDE VHEAD`
    binary = Path(sys.argv[4])
    print("prebuilt", binary, flush=True)
else:
    began = time.time()
    binary, _ = compiled.build(dp, seq, dim, timeout_s=4800)  # 80 min: the 32x32 build on the 2-core VM
    print("build_s", round(time.time() - began, 1), binary.parent.name, flush=True)
print("verilog_mb", round((binary.parent / "head.v").stat().st_size / 1e6, 1), flush=True)
problem = AttentionProblem(seq=seq, dim=dim, causal=False, seed=0)
quantized = prepare(problem, *problem.inputs(), dp.cols)
head = (*quantized.head(0, 0), quantized.params)
began = time.time()
(rtl,) = compiled.simulate_heads_compiled([head], dp, binary)
seconds = time.time() - began
print("sim_s", round(seconds, 1), "cycles", rtl.cycles, rtl.stage_cycles, "rate", round(rtl.cycles / seconds))
model, model_head = model_cycles(dp, seq, dim, False)
busy = {name: stage.busy_cycles for name, stage in model_head.stages.items()}
print("model", model, busy, "same_cycles", rtl.cycles == model, "same_stages", rtl.stage_cycles == busy)
print("schedule", schedule_cycles(dp, seq, dim, False))
print("bit_exact_with_q15", rtl.out.same_bits(attention_q15(*head)))
