"""Tests of codesign/rtl: the datapath as Amaranth RTL against the model, and its synthesis by yosys (slow,
marked by tests/conftest.py). Every module skips at collection without Amaranth (the `rtl` extra). Area fixtures go
here; a fixture one module uses stays in that module; shared code is in tests/helpers."""
