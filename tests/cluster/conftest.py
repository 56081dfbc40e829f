"""Tests of host.compare --cluster on a local Dask cluster (every one slow: it starts a scheduler and workers).
The module skips at collection without Dask distributed (the `cluster` extra). Area fixtures go here; a fixture
one module uses stays in that module; shared code is in tests/helpers."""
