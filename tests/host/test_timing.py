"""The shared timing summary: percentiles and the bootstrap interval of the median."""

import numpy as np
import pytest

from host.errors import SpecError
from host.timing import summarize, time_calls


def test_summary_statistics():
    t = summarize([5.0, 1.0, 2.0, 3.0, 4.0])
    assert (t.mean_ms, t.p50_ms, t.min_ms, t.iters) == (3.0, 3.0, 1.0, 5)
    assert 4.9 < t.p99_ms <= 5.0
    assert t.p50_ci_low_ms <= t.p50_ms <= t.p50_ci_high_ms


def test_median_interval_separates_different_distributions_and_not_noise():
    rng = np.random.default_rng(0)
    a = summarize(1.0 + 0.05 * rng.standard_normal(200))
    b = summarize(1.2 + 0.05 * rng.standard_normal(200))
    c = summarize(1.0 + 0.05 * rng.standard_normal(200))
    assert a.p50_ci_high_ms < b.p50_ci_low_ms
    assert a.p50_ci_low_ms < c.p50_ci_high_ms and c.p50_ci_low_ms < a.p50_ci_high_ms
    assert a.p50_ci_high_ms - a.p50_ci_low_ms < 0.05


def test_constant_and_single_samples_have_a_point_interval():
    assert summarize([2.0, 2.0, 2.0]).p50_ci_low_ms == summarize([2.0, 2.0, 2.0]).p50_ci_high_ms == 2.0
    assert summarize([4.0]).p50_ci_high_ms == 4.0


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [-1.0]])
def test_bad_samples_are_refused(bad):
    with pytest.raises(SpecError):
        summarize(bad)


def test_time_calls_warms_up_then_times_each_call():
    calls = []
    samples = time_calls(lambda: calls.append(1), warmup=3, iters=4)
    assert len(calls) == 7 and len(samples) == 4 and all(s >= 0 for s in samples)
    with pytest.raises(SpecError, match="iters=0"):
        time_calls(lambda: None, warmup=0, iters=0)
