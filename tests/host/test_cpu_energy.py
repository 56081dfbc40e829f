"""CPU energy through RAPL (host/cpu/rapl.py) against fake powercap trees whose counters we set: package domains only,
wrap-around, and the reasons when RAPL is absent, unreadable or stuck; and a CPU row that carries the figure, or
says why not."""

import os
from pathlib import Path

import pytest

from host.cpu import rapl
from host.cpu import target as cpu
from host.problem import AttentionProblem
from host.target_api import Inputs, RunContext, RunOptions

RANGE_UJ = 262_143_328_850  # a real package's max_energy_range_uj (about 262 kJ)


def domain(root: Path, folder: str, name: str, energy_uj: int, max_range_uj: int = RANGE_UJ) -> Path:
    """A powercap domain folder as Linux lays it out: name, energy_uj, max_energy_range_uj."""
    path = root / folder
    path.mkdir(parents=True)
    (path / "name").write_text(name + "\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{max_range_uj}\n")
    return path


def set_counter(path: Path, energy_uj: int) -> None:
    (path / "energy_uj").write_text(f"{energy_uj}\n")


@pytest.fixture
def two_sockets(tmp_path):
    """Two packages, plus what must not be counted again: a package's core subdomain, its dram subdomain, the MMIO
    view of package 0, and the control-type folder."""
    root = tmp_path / "powercap"
    p0 = domain(root, "intel-rapl:0", "package-0", 1_000_000)
    p1 = domain(root, "intel-rapl:1", "package-1", 5_000_000)
    others = [domain(root, "intel-rapl:0:0", "core", 10), domain(root, "intel-rapl:0:1", "dram", 10),
              domain(root, "intel-rapl-mmio:0", "package-0", 10)]
    (root / "intel-rapl").mkdir()
    return root, p0, p1, others


def test_advancing_counters_give_the_packages_energy_per_timed_call(two_sockets):
    root, p0, p1, others = two_sockets
    calls = 4
    with rapl.Window(root, min_window_s=0) as window:
        set_counter(p0, 1_000_000 + 300_000)  # 0.3 J
        set_counter(p1, 5_000_000 + 100_000)  # 0.1 J
        for other in others:
            set_counter(other, 10 + 9_000_000)  # would add 9 J per domain if counted
    got = window.energy(calls)
    assert got.joules_per_call == pytest.approx((300_000 + 100_000) / 1e6 / calls)
    assert got.source == "measured (RAPL package, whole socket)" and got.reason == "" and got.note() == ""


def test_a_counter_that_wraps_past_its_range_is_counted_across_the_wrap(tmp_path):
    root = tmp_path / "powercap"
    max_range = 1_000_000
    before, after = max_range - 1_000, 500
    p0 = domain(root, "intel-rapl:0", "package-0", before, max_range)
    with rapl.Window(root, min_window_s=0) as window:
        set_counter(p0, after)
    expected_uj = (max_range - before) + after  # up to the range, then from 0 to `after`
    assert window.energy(1).joules_per_call == pytest.approx(expected_uj / 1e6)
    assert rapl.delta_uj(before, after, max_range) == expected_uj and rapl.delta_uj(10, 30, max_range) == 20


def test_a_counter_that_did_not_advance_gives_no_figure_and_names_it(two_sockets):
    root, p0, p1, _ = two_sockets
    with rapl.Window(root, min_window_s=0) as window:
        set_counter(p0, 1_000_000 + 1)  # package-1 stays put
    got = window.energy(3)
    assert got.joules_per_call is None and got.source == ""
    assert "package-1 did not advance" in got.reason and "package-0" not in got.reason
    assert got.note() == f"energy: none ({got.reason})"


def test_a_window_shorter_than_the_minimum_gives_no_figure(two_sockets):
    root, p0, p1, _ = two_sockets
    with rapl.Window(root) as window:  # the default minimum: far longer than this window
        set_counter(p0, 2_000_000)
        set_counter(p1, 6_000_000)
    got = window.energy(1)
    assert got.joules_per_call is None and f"shorter than {rapl.MIN_WINDOW_S * 1e3:g} ms" in got.reason


def test_an_absent_powercap_folder_says_so(tmp_path):
    root = tmp_path / "no-such-powercap"
    with rapl.Window(root, min_window_s=0) as window:
        pass
    got = window.energy(5)
    assert got.joules_per_call is None and got.source == ""
    assert str(root) in got.reason and "does not exist" in got.reason
    assert got.note().startswith("energy: none (no RAPL: ")


def test_a_powercap_folder_without_package_domains_says_so(tmp_path):
    root = tmp_path / "powercap"
    domain(root, "intel-rapl:0:0", "core", 1)
    domain(root, "intel-rapl:0", "psys", 1)  # a platform domain, not a package
    with rapl.Window(root, min_window_s=0) as window:
        pass
    assert window.energy(1).reason == f"no RAPL package domain under {root}"


def test_a_root_only_counter_gives_a_permission_reason(two_sockets, monkeypatch):
    """As on kernels with the CVE-2020-8694 fix (energy_uj mode 0400, read by a user): a mock, since the tests may run
    as root, which chmod does not stop."""
    root, *_ = two_sockets
    read_text = Path.read_text

    def refuse_energy(self, *args, **kwargs):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", refuse_energy)
    with rapl.Window(root, min_window_s=0) as window:
        pass
    got = window.energy(1)
    assert got.joules_per_call is None and "intel-rapl:0/energy_uj is not readable" in got.reason
    assert "PermissionError" in got.reason


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 file: chmod cannot deny it")
def test_a_mode_000_counter_gives_a_permission_reason(two_sockets):
    root, p0, *_ = two_sockets
    (p0 / "energy_uj").chmod(0)
    try:
        with rapl.Window(root, min_window_s=0) as window:
            pass
    finally:
        (p0 / "energy_uj").chmod(0o644)
    assert "PermissionError" in window.energy(1).reason


def test_this_machines_rapl_answers_without_raising():
    with rapl.Window() as window:
        sum(range(1000))
    got = window.energy(1)
    assert (got.joules_per_call is None) == bool(got.reason)
    assert got.joules_per_call is None or got.joules_per_call > 0


def _cpu_row(iters: int):
    problem = AttentionProblem(batch=1, heads=1, seq=17, dim=8, causal=False, seed=0)
    options = RunOptions(context=RunContext("test", "rev", "host"), kernel="numpy", warmup=2, iters=iters)
    [row] = cpu.run(problem, Inputs(problem), options)
    return row


def test_a_cpu_row_carries_the_energy_of_its_timed_calls(tmp_path, monkeypatch):
    """Each call of the reference adds uj_per_call to the fake counter, so only the timed calls inside the window
    (not the warm-ups, not the counters' call after it) make the figure: exactly uj_per_call per call."""
    root = tmp_path / "powercap"
    p0 = domain(root, "intel-rapl:0", "package-0", 0)
    uj_per_call = 2_500
    total = [0]
    real = cpu.attention

    def metered(*args, **kwargs):
        total[0] += uj_per_call
        set_counter(p0, total[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(cpu, "attention", metered)
    monkeypatch.setattr(rapl, "POWERCAP_ROOT", root)
    monkeypatch.setattr(rapl, "MIN_WINDOW_S", 0.0)
    row = _cpu_row(iters=5)
    assert row.status == "ok" and row.energy_j == pytest.approx(uj_per_call / 1e6)
    assert row.energy_source == rapl.SOURCE and "energy" not in row.message


def test_a_cpu_row_without_rapl_says_why_and_keeps_its_figures(tmp_path, monkeypatch):
    root = tmp_path / "absent"
    monkeypatch.setattr(rapl, "POWERCAP_ROOT", root)
    row = _cpu_row(iters=3)
    assert row.status == "ok" and row.p50_ms > 0 and row.energy_j is None and row.energy_source == ""
    assert f"energy: none (no RAPL: {root} does not exist" in row.message
