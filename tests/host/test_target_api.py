"""The target contract (host/target_api.py): every registered target module is a TargetModule over its own Settings,
declares what a cluster worker needs from it, and gets its throughput from RunContext.result, not from itself."""

import argparse
import dataclasses
import typing

import numpy as np
import pytest

from host.problem import AttentionProblem
from host.sweep.registry import TARGETS, target_module
from host.target_api import ClusterNeeds, RunContext, RunOptions, TargetModule
from host.verdict import check_float

CONTEXT = RunContext("run", "rev", "host")
PROBLEM = AttentionProblem(heads=2, seq=17, dim=8)


@pytest.mark.parametrize("name", TARGETS)
def test_each_target_module_is_a_target_module_over_its_own_settings(name):
    module = target_module(name)
    members = list(TargetModule.__annotations__) + [key for key in vars(TargetModule) if not key.startswith("_")]
    assert [member for member in members if not hasattr(module, member)] == []
    hints = typing.get_type_hints(module.run)
    assert hints["options"] == RunOptions[module.Settings], "run names its Settings class, not object"
    assert dataclasses.is_dataclass(module.Settings) and module.Settings.__dataclass_params__.frozen


@pytest.mark.parametrize("name", TARGETS)
def test_cluster_declarations_use_the_targets_own_fields_and_flags(name):
    needs = target_module(name).CLUSTER
    if needs is None:
        return
    assert isinstance(needs, ClusterNeeds) and needs.settings is target_module(name).Settings
    fields = {field.name for field in dataclasses.fields(needs.settings)}
    assert set(needs.options) <= fields
    compare, worker = argparse.ArgumentParser(), argparse.ArgumentParser()
    target_module(name).add_options(compare.add_argument_group())
    needs.add_options(worker.add_argument_group())
    for flag in needs.options.values():  # the same flag, spelled the same, in host.compare and on a worker
        assert flag in compare._option_string_actions and flag in worker._option_string_actions, flag
    assert needs.resource and needs.usage


def test_a_timed_row_gets_its_rates_from_its_p50_and_bytes():
    gold = np.zeros(PROBLEM.shape)
    verdict = check_float(gold.astype(np.float32), PROBLEM, gold)
    row = CONTEXT.result(PROBLEM, "cpu", "numpy", "dev", verdict=verdict, p50_ms=2.0, timing_source="measured: x")
    # 4·B·H·N²·d FLOPs over 2 ms; the problem's minimum bytes (Q, K, V read, O written) over 2 ms
    assert row.gflops == PROBLEM.flops() / 2e-3 / 1e9 and row.model_bytes == PROBLEM.min_bytes()
    assert row.gbps == PROBLEM.min_bytes() / 2e-3 / 1e9
    own = CONTEXT.result(PROBLEM, "gpu", "naive", "dev", verdict=verdict, p50_ms=2.0, model_bytes=1000,
                         timing_source="measured: x")
    assert own.model_bytes == 1000 and own.gbps == 1000 / 2e-3 / 1e9, "a target's own bytes are kept"
    failed = CONTEXT.result(PROBLEM, "gpu", "naive", "dev", status="error", message="boom")
    assert failed.gflops is None and failed.gbps is None and failed.model_bytes is None
    with pytest.raises(ValueError, match="derived"):
        CONTEXT.result(PROBLEM, "cpu", "numpy", "dev", verdict=verdict, p50_ms=2.0, gflops=1.0,
                       timing_source="measured: x")


def test_the_asic_rows_rates_are_those_of_its_modelled_latency():
    from codesign.target import Settings, run
    from host.target_api import Inputs

    [row] = run(PROBLEM, Inputs(PROBLEM), RunOptions(CONTEXT, Settings().datapaths[0].name, settings=Settings()))
    seconds = row.p50_ms / 1e3
    assert row.timing_source.startswith("modelled") and row.gflops == PROBLEM.flops() / seconds / 1e9
    assert row.model_bytes != PROBLEM.min_bytes() and row.gbps == row.model_bytes / seconds / 1e9, "DRAM bytes"
