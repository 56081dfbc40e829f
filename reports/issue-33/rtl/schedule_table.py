"""The head engine's total cycles as codesign/cycles.py has them for it (codesign/rtl/sim.py model_cycles: the model
less its DRAM prologue and epilogue, which the RTL's counter meets in tests/rtl) beside the same windows walked one by
one (schedule_cycles), the model at its datapath's DRAM, and the stages one after another (array + softmax +
divider busy cycles), on the RTL tests' datapaths and two larger ones. Run from the checkout:
    .venv/bin/python reports/issue-33/rtl/schedule_table.py > reports/issue-33/rtl/schedule_table.md"""

from codesign.cycles import head_cycles
from codesign.datapath import Datapath
from codesign.rtl.sim import model_cycles, schedule_cycles

CASES = [
    (Datapath(rows=4, cols=4, exp_lanes=4, dividers=8), 32, 16),
    (Datapath(rows=4, cols=4, exp_lanes=1, dividers=16, div_latency=20), 16, 8),
    (Datapath(rows=3, cols=2, exp_lanes=3, dividers=7, div_latency=19), 97, 3),
    (Datapath(rows=2, cols=4, exp_lanes=2, dividers=3), 17, 8),
    (Datapath(rows=8, cols=8, exp_lanes=8, dividers=16), 64, 32),
    (Datapath(rows=8, cols=8), 256, 64),
    (Datapath(rows=32, cols=32), 1024, 64),
]

print("| datapath | seq | d | causal | model for the RTL (no DRAM) | windows walked | model at its DRAM | stages in "
      "sequence | in sequence / windows |")
print("|---|---|---|---|---|---|---|---|---|")
for dp, seq, dim in CASES:
    for causal in (False, True):
        rtl, _ = model_cycles(dp, seq, dim, causal)
        walked = schedule_cycles(dp, seq, dim, causal)
        model = head_cycles(dp, seq, dim, causal, dp.cols)
        serial = sum(stage.busy_cycles for stage in model.stages.values())
        print(f"| {dp.name} | {seq} | {dim} | {'yes' if causal else 'no'} | {rtl:,} | {walked:,} | "
              f"{model.cycles:,} | {serial:,} | {serial / rtl:.2f} |")
