"""Tags beside a pipelined unit: what a softmax lane issued (valid, position, kind), delayed by the unit's latency so
that it arrives with the result, and the check that the unit's own valid_out came when the tag says it should."""

from __future__ import annotations

from amaranth.hdl import Module, Signal


def keep_for(m: Module, delay: int, signals: list, name: str) -> list:
    """The signals `delay` cycles later: `delay` registers of each one's shape, beside a unit's pipeline."""
    for stage in range(delay):
        delayed = [Signal.like(s, name=f"{name}_{stage}_{n}") for n, s in enumerate(signals)]
        m.d.sync += [late.eq(early) for late, early in zip(delayed, signals)]
        signals = delayed
    return signals
