"""GPU energy per call through NVML (PyPI nvidia-ml-py, module `pynvml`): the board's total-energy counter read
around a window of back-to-back calls, or, where the board does not support that counter, its power readings sampled
through the window and integrated. The window lasts at least WINDOW_S so that the counter's update period (tens of
milliseconds) is a small share of it. The figure is the board's energy while the calls run, idle share included: J
per inference at board level, as the co-design comparison needs it.

Without nvidia-ml-py or an NVML that answers, nothing is measured and the reason says why (never a zero).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

#: Shortest measurement window in seconds.
WINDOW_S = 0.3
#: Power sampling period in seconds, where the energy counter is not supported.
SAMPLE_S = 0.005


@dataclass(frozen=True)
class Energy:
    """Joules per call and how they were measured, or None and why not."""

    joules_per_call: float | None
    source: str = ""
    reason: str = ""


def _handle(pynvml, device_id: int):
    """The NVML handle of the CUDA device `device_id`, matched by PCI bus id (NVML and CUDA may number boards
    differently), else by index."""
    try:
        import cupy

        bus_id = cupy.cuda.Device(device_id).pci_bus_id
        return pynvml.nvmlDeviceGetHandleByPciBusId(bus_id.encode() if isinstance(bus_id, str) else bus_id)
    except Exception:  # noqa: BLE001 - no CuPy bus id or NVML refused it: fall back to the index
        return pynvml.nvmlDeviceGetHandleByIndex(device_id)


def measure(call: Callable[[], object], synchronize: Callable[[], None], device_id: int = 0,
            window_s: float = WINDOW_S) -> Energy:
    """Energy per call of `call` (asynchronous launches; `synchronize` waits for them), over a window of at least
    `window_s` seconds of back-to-back calls."""
    try:
        import pynvml
    except ImportError:
        return Energy(None, reason="nvidia-ml-py is not installed (pip install -e '.[gpu]')")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return Energy(None, reason=f"NVML unavailable: {exc}")
    stop = threading.Event()
    sampler = None
    try:
        handle = _handle(pynvml, device_id)
        synchronize()
        start = time.perf_counter()
        call()
        synchronize()
        one = max(time.perf_counter() - start, 1e-6)
        batch = max(1, min(10_000, int(window_s / one / 4)))  # about a quarter of the window per batch
        try:
            before = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)  # mJ since the driver loaded
            counter = True
        except pynvml.NVMLError:
            counter = False
        samples: list[float] = []
        failures: list[str] = []
        if not counter:
            def sample() -> None:
                while not stop.is_set():
                    try:
                        samples.append(pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3)  # W
                    except pynvml.NVMLError as exc:  # no power reading either: say so, do not trace back
                        failures.append(str(exc))
                        return
                    time.sleep(SAMPLE_S)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
        start = time.perf_counter()
        calls = 0
        while True:  # whole batches until the window is long enough, however the first call's time misled
            for _ in range(batch):
                call()
            synchronize()
            calls += batch
            elapsed = time.perf_counter() - start
            if elapsed >= window_s:
                break
        if counter:
            joules = (pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) - before) / 1e3
            how = "NVML total-energy counter"
        else:
            stop.set()
            sampler.join()
            if not samples:
                return Energy(None, reason="NVML gave no power reading during the window"
                                           + (f" ({failures[0]})" if failures else ""))
            joules = sum(samples) / len(samples) * elapsed
            how = f"NVML power readings ({len(samples)} samples) integrated"
        if joules <= 0:
            return Energy(None, reason=f"the {how} did not advance over {elapsed:.2f} s")
        return Energy(joules / calls, f"measured: {how} over {calls} back-to-back calls ({elapsed:.2f} s)")
    except Exception as exc:  # noqa: BLE001 - energy is an extra: its failure must not cost the row its figures
        return Energy(None, reason=f"energy not measured: {type(exc).__name__}: {exc}")
    finally:
        stop.set()
        if sampler is not None:
            sampler.join()
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
