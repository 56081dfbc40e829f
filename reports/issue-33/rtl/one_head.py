"""One head (seed 0, not causal) through the Verilator-built head engine of a square array at the default datapath:
the build's seconds, the simulation's seconds and rate, the cycles against schedule_cycles and the model's, and the
bits against host/q15.py. From the checkout: .venv/bin/python reports/issue-33/rtl/one_head.py SEQ DIM SIDE
(8x8_seq256_d64.txt is `256 64 8`)."""

import sys
import time

from codesign.cycles import head_cycles
from codesign.datapath import Datapath
from codesign.rtl import compiled
from codesign.rtl.sim import schedule_cycles
from host.problem import AttentionProblem
from host.q15 import attention_q15, prepare

seq, dim, side = (int(arg) for arg in sys.argv[1:4])
dp = Datapath(rows=side, cols=side)
began = time.time()
binary, _ = compiled.build(dp, seq, dim)
print("build_s", round(time.time() - began, 1), binary.name, flush=True)
problem = AttentionProblem(seq=seq, dim=dim, causal=False, seed=0)
quantized = prepare(problem, *problem.inputs(), dp.cols)
head = (*quantized.head(0, 0), quantized.params)
began = time.time()
(rtl,) = compiled.simulate_heads_compiled([head], dp)
seconds = time.time() - began
print("sim_s", round(seconds, 1), "cycles", rtl.cycles, rtl.stage_cycles, "rate", round(rtl.cycles / seconds))
model = head_cycles(dp, seq, dim, False, dp.cols)
print("model", model.cycles, {name: stage.busy_cycles for name, stage in model.stages.items()})
print("bit_exact_with_q15", rtl.out.same_bits(attention_q15(*head)))
schedule = schedule_cycles(dp, seq, dim, False)
print("schedule", schedule, "same_cycles", rtl.cycles == schedule)
