"""A smaller board heap for the MCU tests: mcu.planner.plan patched to plan against at most `limit` bytes free, so
a head that would fit the twin whole streams instead (the planner's own arithmetic, only the heap it is told of is
smaller)."""

from __future__ import annotations

from host import q15
from mcu import planner


def cap_planner_heap(monkeypatch, limit: int) -> None:
    """Make mcu.planner.plan see at most `limit` bytes of free heap for the rest of the test."""
    real = planner.plan

    def plan(seq, dim, heap_free, reserve, bc=q15.BC, largest=None, **shape):
        return real(seq, dim, min(heap_free, limit), reserve, bc, largest=largest, **shape)

    monkeypatch.setattr(planner, "plan", plan)
