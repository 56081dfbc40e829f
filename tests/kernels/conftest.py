"""Tests of kernels/: the CUDA kernels' budget, dispatch and byte models everywhere (the fake device), the kernels
themselves against the golden on a GPU (marker `gpu`, skipped with the reason elsewhere). Area fixtures go here;
a fixture one module uses stays in that module; shared code is in tests/helpers."""
