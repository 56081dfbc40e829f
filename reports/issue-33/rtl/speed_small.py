"""Amaranth's simulator against the Verilator build on tests/rtl/test_rtl_compiled.py's five heads (a 4x2 engine):
host seconds of each run (the build excluded: it is kept from the test's run). From the checkout:
    .venv/bin/python reports/issue-33/rtl/speed_small.py"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "rtl"))

from test_rtl_compiled import DATAPATH, _heads

from codesign.rtl import compiled
from codesign.rtl.sim import simulate_heads

heads = _heads()
compiled.build(DATAPATH, max(h[3].seq for h in heads), max(h[3].dim for h in heads))
began = time.perf_counter()
python = simulate_heads(heads, DATAPATH)
python_s = time.perf_counter() - began
began = time.perf_counter()
built = compiled.simulate_heads_compiled(heads, DATAPATH)
built_s = time.perf_counter() - began
cycles = sum(one.cycles for one in python)
same = all(a.out.same_bits(b.out) and a.cycles == b.cycles for a, b in zip(python, built))
print(f"{len(heads)} heads, {cycles:,} cycles on {DATAPATH.name}: Amaranth {python_s:.2f} s "
      f"({cycles / python_s:,.0f} cycles/s), Verilator {built_s:.3f} s with its process and files "
      f"({cycles / built_s:,.0f} cycles/s); same bits and cycles: {same}")
