"""Tests of codesign/: the datapath's bits, cycles and energy, the GEMM model against SCALE-Sim's traces
(tests/data/scalesim), the explorer and the asic target. Area fixtures go here; a fixture one module uses stays
in that module; shared code is in tests/helpers."""
