"""The CPU target (layer L2, a peer of kernels/, mcu/ and codesign/): the float32 reference timed on this machine.

`target` is its entry point (host/target_api.py's contract); `perf` reads hardware counters through
perf_event_open, `rapl` the package energy counters, `cachegrind` simulates the caches where there are no counters.
"""
