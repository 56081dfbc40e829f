"""Tests of host/: the contracts and numerics (problem, results, reference, Q15 model, verdict, timing), the CPU
target and its counters, the report and the sweep's command line. Area fixtures go here; a fixture one module
uses stays in that module; shared code is in tests/helpers, the twin fixtures in tests/conftest.py."""
