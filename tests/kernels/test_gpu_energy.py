"""GPU energy through NVML (kernels/energy.py): the counter path and the power-sampling path against a stand-in NVML
whose readings we choose (CI), the reasons when NVML is missing or fails, and on a GPU (marker gpu) rows that carry
a measured energy per call."""

import sys
import types

import pytest

from kernels import energy


class FakeNvml(types.ModuleType):
    """pynvml's surface as kernels/energy.py uses it; the energy counter advances by `mj_per_call` per call."""

    class NVMLError(Exception):
        pass

    def __init__(self, counter=True, mj_per_call=250.0, watts=400.0, fail_init=False):
        super().__init__("pynvml")
        self.counter, self.mj_per_call, self.watts, self.fail_init = counter, mj_per_call, watts, fail_init
        self.total_mj, self.shut = 1_000_000.0, False

    def nvmlInit(self):
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetHandleByPciBusId(self, bus):
        return "handle"

    def nvmlDeviceGetHandleByIndex(self, index):
        return "handle"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.counter:
            raise self.NVMLError("Not Supported")
        return self.total_mj

    def nvmlDeviceGetPowerUsage(self, handle):
        return self.watts * 1e3  # mW


def run_with(monkeypatch, nvml, window_s=0.05):
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    calls = []

    def call():
        calls.append(1)
        nvml.total_mj += nvml.mj_per_call

    return energy.measure(call, lambda: None, window_s=window_s), calls


def test_the_counter_gives_joules_per_call(monkeypatch):
    nvml = FakeNvml(mj_per_call=250.0)
    result, calls = run_with(monkeypatch, nvml)
    # each call advances the counter by 250 mJ, so the window's difference over its calls is 0.25 J per call
    assert result.joules_per_call == pytest.approx(0.25)
    assert result.source.startswith("measured: NVML total-energy counter over ") and result.reason == ""
    assert len(calls) >= 2 and nvml.shut


def test_without_the_counter_power_samples_are_integrated(monkeypatch):
    nvml = FakeNvml(counter=False, watts=400.0)
    result, calls = run_with(monkeypatch, nvml, window_s=0.1)
    # 400 W over the window, divided by its calls: 400 · elapsed / calls; elapsed ≥ 0.1 s
    assert result.source.startswith("measured: NVML power readings (") and "integrated over" in result.source
    timed = len(calls) - 1  # the first call sized the window
    assert result.joules_per_call * timed >= 400 * 0.1 * 0.9


def test_missing_or_failing_nvml_says_why(monkeypatch):
    result, _ = run_with(monkeypatch, FakeNvml(fail_init=True))
    assert result.joules_per_call is None and result.reason == "NVML unavailable: Driver Not Loaded"
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    result = energy.measure(lambda: None, lambda: None)
    assert result.joules_per_call is None and "nvidia-ml-py is not installed" in result.reason


def test_a_counter_that_does_not_move_is_no_figure(monkeypatch):
    result, _ = run_with(monkeypatch, FakeNvml(mj_per_call=0.0))
    assert result.joules_per_call is None and "did not advance" in result.reason


@pytest.mark.gpu
def test_gpu_rows_carry_measured_energy():
    from host.problem import AttentionProblem
    from host.target_api import Inputs, RunContext, RunOptions
    from kernels import target

    problem = AttentionProblem(heads=16, seq=2048, dim=64, dtype="float16")
    options = RunOptions(context=RunContext("t", "t", "t"), kernel="flash", warmup=1, iters=3,
                         settings=target.Settings())
    [row] = target.run(problem, Inputs(problem), options)
    assert row.status == "ok", row.message
    assert row.energy_j is not None and row.energy_j > 0, row.message
    assert row.energy_source.startswith("measured: NVML")
    # board power over the call: between 10 W and the H200's 700 W cap
    assert 10 < row.energy_j / (row.p50_ms / 1e3) < 1000


def test_power_readings_that_fail_give_a_reason_not_a_traceback(monkeypatch, capfd):
    nvml = FakeNvml(counter=False)

    def broken(handle):
        raise nvml.NVMLError("Not Supported")

    nvml.nvmlDeviceGetPowerUsage = broken
    result, _ = run_with(monkeypatch, nvml)
    assert result.joules_per_call is None and "no power reading" in result.reason and "Not Supported" in result.reason
    assert "Traceback" not in capfd.readouterr().err and nvml.shut


def test_a_call_that_fails_in_the_window_costs_the_energy_only(monkeypatch):
    nvml = FakeNvml(counter=False)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    state = {"calls": 0}

    def call():
        state["calls"] += 1
        if state["calls"] > 3:
            raise RuntimeError("launch failed")

    result = energy.measure(call, lambda: None, window_s=0.05)
    assert result.joules_per_call is None and result.reason == "energy not measured: RuntimeError: launch failed"
    assert nvml.shut
