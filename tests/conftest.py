"""Shared test setup: hardware markers skip with the reason the capability is missing."""

from __future__ import annotations

import pytest

from helpers import board_missing, gpu_missing


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reasons = {}
    for item in items:
        for marker, probe in (("gpu", gpu_missing), ("board", board_missing)):
            if item.get_closest_marker(marker) is not None:  # a marker, not a parameter id that happens to match
                if marker not in reasons:
                    reasons[marker] = probe()
                if reasons[marker]:
                    item.add_marker(pytest.mark.skip(reason=reasons[marker]))
