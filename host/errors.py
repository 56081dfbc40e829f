"""The one exception tree of kbench.

Every error kbench raises on purpose derives from `KbenchError`. Code branches on these classes, never on message
text. The CLI (`host.compare`) catches `KbenchError` once, prints ``kbench: <message>`` to stderr and exits non-zero.

- `SpecError`: a bad problem, option or argument (also a `ValueError`, so plain callers can catch that).
- `LinkError`: talking to a device failed (serial link, timeouts, a twin that does not answer).
- `TargetError`: the device ran and failed; carries the status and whatever the device said.
- `UnavailableError`: a capability is missing (no GPU, no board, no perf counters); carries the reason.
- `ResultsError`: a results file cannot be read or written as the schema says.
"""

from __future__ import annotations


class KbenchError(Exception):
    """Base of every error kbench raises on purpose."""


class SpecError(KbenchError, ValueError):
    """A problem, option or argument outside its allowed range."""


class LinkError(KbenchError):
    """The host could not talk to a device."""


class TargetError(KbenchError):
    """A target ran and failed; `status` and `detail` say how."""

    def __init__(self, message: str, status: str = "error", detail: str = ""):
        super().__init__(message)
        self.status = status
        self.detail = detail


class UnavailableError(KbenchError):
    """A capability this run needs is missing; the message is the reason."""


class ResultsError(KbenchError):
    """A results file does not match the schema."""
