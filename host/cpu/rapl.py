"""CPU energy through RAPL (Running Average Power Limit), as Linux's powercap exposes it: the package domains'
energy counters read before and after a timed window, J per call.

Each top-level package domain is a folder ``<root>/intel-rapl:N`` whose ``name`` is ``package-N`` (AMD's RAPL
appears under the same names); its ``energy_uj`` counts microjoules and wraps to 0 after ``max_energy_range_uj``.
Subdomains (``intel-rapl:N:M``: core, uncore, dram) are parts of a package and are not added again, nor is the MMIO
view of the same package (``intel-rapl-mmio:N``). The figure is the whole socket's energy over the window (every
core, the uncore, any other process running meanwhile), divided by the calls timed in it: what a socket spends per
inference, not what the reference alone costs.

The counters update about once a millisecond, so a window shorter than MIN_WINDOW_S is too coarse and gets no
figure. Where RAPL is absent or unreadable (no powercap folder, no package domain, energy_uj readable by root only
as Linux has made it since the CVE-2020-8694 fix, a counter that did not advance) nothing is measured and the reason
says why: never a zero.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

#: Where Linux's powercap class lives; tests point it at a fake tree.
POWERCAP_ROOT = Path("/sys/class/powercap")
#: A top-level RAPL domain folder; its subdomains (intel-rapl:N:M) and the MMIO view (intel-rapl-mmio:N) do not match.
DOMAIN_DIR = re.compile(r"intel-rapl:\d+")
#: The name file of a package domain.
PACKAGE_NAME = re.compile(r"package-\d+")
#: Shortest window in seconds: ten of the counters' ~1 ms update periods, so a window's figure is within ~10 %.
MIN_WINDOW_S = 0.01
#: The rows' energy_source.
SOURCE = "measured (RAPL package, whole socket)"


@dataclass(frozen=True)
class Energy:
    """Joules per call and how they were measured, or None and why not."""

    joules_per_call: float | None
    source: str = ""
    reason: str = ""

    def note(self) -> str:
        """What a row's message says of it: '' when measured, else 'energy: none (<reason>)'."""
        return "" if self.joules_per_call is not None else f"energy: none ({self.reason})"


@dataclass(frozen=True)
class Domain:
    """One package domain: its folder, name and the counter's range (it wraps to 0 past it)."""

    path: Path
    name: str
    max_range_uj: int


class _Unreadable(Exception):
    """A RAPL file could not be read; the message is the row's reason."""


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().strip())
    except PermissionError:
        raise _Unreadable(f"{path} is not readable by this user (PermissionError: RAPL energy is root-only on "
                          "kernels with the CVE-2020-8694 fix)") from None
    except (OSError, ValueError) as exc:
        raise _Unreadable(f"cannot read {path}: {type(exc).__name__}: {exc}") from None


def package_domains(root: Path | str) -> list[Domain]:
    """The top-level package domains under `root`, by folder name; _Unreadable saying why there are none."""
    root = Path(root)
    if not root.is_dir():
        raise _Unreadable(f"no RAPL: {root} does not exist, as off Linux or in a VM without powercap")
    try:
        folders = sorted(p for p in root.iterdir() if DOMAIN_DIR.fullmatch(p.name))
    except OSError as exc:
        raise _Unreadable(f"cannot list {root}: {type(exc).__name__}: {exc}") from None
    domains = []
    for folder in folders:
        try:
            name = (folder / "name").read_text().strip()
        except OSError:
            continue  # not a domain that says what it is
        if PACKAGE_NAME.fullmatch(name):
            domains.append(Domain(folder, name, _read_int(folder / "max_energy_range_uj")))
    if not domains:
        raise _Unreadable(f"no RAPL package domain under {root}")
    return domains


def delta_uj(before: int, after: int, max_range_uj: int) -> int:
    """Microjoules between two readings of one counter, across at most one wrap to 0 past max_range_uj."""
    return after - before if after >= before else max_range_uj - before + after


class Window:
    """A context manager around a timed window: reads the package counters under `root` (POWERCAP_ROOT when
    None) on entry and exit. `energy(calls)` afterwards: J per call over the window, or None and why (a failure never
    leaves the `with`); a window shorter than `min_window_s` (MIN_WINDOW_S when None) gets no figure."""

    def __init__(self, root: Path | str | None = None, min_window_s: float | None = None):
        # the module's constants are read now, not at import, so that tests may patch them
        self.root = Path(root) if root is not None else POWERCAP_ROOT
        self.min_window_s = min_window_s if min_window_s is not None else MIN_WINDOW_S
        self._domains: list[Domain] = []
        self._before: list[int] = []
        self._after: list[int] = []
        self._seconds = 0.0
        self._start = 0.0
        self._reason = "the window was never run"

    def __enter__(self) -> "Window":
        self._reason = ""
        try:
            self._domains = package_domains(self.root)
            self._before = [_read_int(d.path / "energy_uj") for d in self._domains]
        except _Unreadable as exc:
            self._reason = str(exc)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._seconds = time.perf_counter() - self._start
        if self._reason:
            return
        try:
            self._after = [_read_int(d.path / "energy_uj") for d in self._domains]
        except _Unreadable as exc:
            self._reason = str(exc)

    def energy(self, calls: int) -> Energy:
        """Joules per call of the `calls` calls the window timed, or None and why."""
        if self._reason:
            return Energy(None, reason=self._reason)
        window = f"{self._seconds * 1e3:.3g} ms"
        if self._seconds < self.min_window_s:
            return Energy(None, reason=f"the timed window ({window}) is shorter than {self.min_window_s * 1e3:g} ms, "
                                       "too coarse for RAPL's ~1 ms counter updates")
        deltas = [delta_uj(before, after, d.max_range_uj)
                  for d, before, after in zip(self._domains, self._before, self._after)]
        stuck = [d.name for d, uj in zip(self._domains, deltas) if uj <= 0]
        if stuck:
            return Energy(None, reason=f"the RAPL counter of {', '.join(stuck)} did not advance over {window}")
        return Energy(sum(deltas) / 1e6 / calls, SOURCE)
