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


class _PowerSampler:
    """Board power read every SAMPLE_S in a thread, for boards without NVML's total-energy counter."""

    def __init__(self, pynvml, handle):
        self.samples: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(pynvml, handle), daemon=True)
        self._thread.start()

    def _sample(self, pynvml, handle) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3)  # W
            except pynvml.NVMLError as exc:  # no power reading either: say so, do not trace back
                self.failures.append(str(exc))
                return
            time.sleep(SAMPLE_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _batch(call: Callable[[], object], synchronize: Callable[[], None], window_s: float) -> int:
    """Calls per batch: about a quarter of the window, from one call's time."""
    synchronize()
    start = time.perf_counter()
    call()
    synchronize()
    one = max(time.perf_counter() - start, 1e-6)
    return max(1, min(10_000, int(window_s / one / 4)))


def _window(call: Callable[[], object], synchronize: Callable[[], None], batch: int,
            window_s: float) -> tuple[int, float]:
    """Whole batches of back-to-back calls until the window is long enough (however the first call's time misled);
    return (calls, seconds)."""
    start = time.perf_counter()
    calls = 0
    while True:
        for _ in range(batch):
            call()
        synchronize()
        calls += batch
        elapsed = time.perf_counter() - start
        if elapsed >= window_s:
            return calls, elapsed


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
    sampler = None
    try:
        handle = _handle(pynvml, device_id)
        batch = _batch(call, synchronize, window_s)
        try:
            before = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)  # mJ since the driver loaded
        except pynvml.NVMLError:
            before = None
            sampler = _PowerSampler(pynvml, handle)
        calls, elapsed = _window(call, synchronize, batch, window_s)
        if sampler is None:
            joules = (pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) - before) / 1e3
            how = "NVML total-energy counter"
        else:
            sampler.stop()
            if not sampler.samples:
                return Energy(None, reason="NVML gave no power reading during the window"
                                           + (f" ({sampler.failures[0]})" if sampler.failures else ""))
            joules = sum(sampler.samples) / len(sampler.samples) * elapsed
            how = f"NVML power readings ({len(sampler.samples)} samples) integrated"
        if joules <= 0:
            return Energy(None, reason=f"the {how} did not advance over {elapsed:.2f} s")
        return Energy(joules / calls, f"measured: {how} over {calls} back-to-back calls ({elapsed:.2f} s)")
    except Exception as exc:  # noqa: BLE001 - energy is an extra: its failure must not cost the row its figures
        return Energy(None, reason=f"energy not measured: {type(exc).__name__}: {exc}")
    finally:
        if sampler is not None:
            sampler.stop()
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
