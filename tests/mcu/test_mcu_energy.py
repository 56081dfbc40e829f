"""MCU energy from the STM32F407's datasheet (mcu/power.py): latency × DS8626 Table 20's run current × VDD, scaled
by ST's µA/MHz away from 168 MHz; and on the twin, end to end through host.compare, a row whose energy is its own
latency times those constants, while a row that failed carries none."""

import pytest

from helpers.twin import needs_twin
from host.sweep import cli as compare
from host.errors import TargetError
from host.results_file import ResultsFile
from mcu import power, target

MHZ = 1e6


def test_the_datasheet_figures_agree_with_each_other():
    # ST's 238 µA/MHz is Table 20's 40 mA over 168 MHz, to the datasheet's rounding (40 / 168 = 0.2381 mA/MHz)
    per_mhz_at_168 = power.RUN_CURRENT_PER_MHZ_A * power.DATASHEET_CLOCK_HZ / MHZ
    assert per_mhz_at_168 == pytest.approx(power.RUN_CURRENT_A, rel=1e-3)
    assert 1.8 <= power.VDD_V <= 3.6  # DS8626 Table 14's operating range


def test_at_168_mhz_energy_is_latency_times_40_ma_times_vdd():
    seconds = 0.25e-3
    got = power.energy(seconds, power.DATASHEET_CLOCK_HZ)
    assert got.joules == pytest.approx(seconds * power.RUN_CURRENT_A * power.VDD_V)
    assert got.source == "datasheet"
    ratio = power.RUN_CURRENT_ALL_PERIPHERALS_A / power.RUN_CURRENT_A  # 87 / 40
    assert got.note == (f"energy: datasheet {power.RUN_CURRENT_A * 1e3:g} mA × {power.VDD_V:g} V at 168 MHz "
                        f"(DS8626 Table 20, peripherals disabled; all enabled: {ratio:.1f}× more)")
    assert f"{ratio:.1f}" == "2.2"


@pytest.mark.parametrize("clock_hz", [16_000_000, 84_000_000])
def test_another_clock_scales_the_current_by_the_datasheets_per_mhz_figure(clock_hz):
    seconds = 1e-3
    amps = power.RUN_CURRENT_PER_MHZ_A * clock_hz / MHZ
    got = power.energy(seconds, clock_hz)
    assert power.run_current_a(clock_hz) == pytest.approx(amps)
    assert got.joules == pytest.approx(seconds * amps * power.VDD_V)
    assert f"238 µA/MHz × {clock_hz / MHZ:g} MHz" in got.note and f"at {clock_hz / MHZ:g} MHz" in got.note


def test_no_clock_gives_no_figure_and_says_why():
    got = power.energy(1e-3, 0)
    assert got.joules is None and got.source == "" and got.note.startswith("energy: none (")


@needs_twin
def test_a_twin_row_carries_its_latency_times_the_datasheet_power(tmp_path):
    code = compare.main(["--targets", "mcu", "--sim", "--seq", "17", "--dim", "8", "--heads", "2", "--causal", "0",
                         "--out", str(tmp_path)])
    [row] = ResultsFile(tmp_path / "results.csv").read()
    assert code == 0 and row.status == "ok"
    seconds = row.p50_ms / 1e3
    assert seconds == pytest.approx(row.cycles / row.clock_hz)  # one timed repeat: the latency is its DWT cycles
    assert row.energy_j == pytest.approx(seconds * power.run_current_a(row.clock_hz) * power.VDD_V)
    assert row.energy_source == "datasheet"
    assert power.energy(seconds, row.clock_hz).note in row.message
    assert "energy J" in (tmp_path / "results.md").read_text()


@needs_twin
def test_a_row_without_timing_carries_no_energy(tmp_path, monkeypatch):
    def run_head(session, params, q, k, v, repeats):
        raise TargetError("the board's q15attn is not timed (not a Cortex-M4 build): no DWT cycles")

    monkeypatch.setattr(target, "run_head", run_head)
    code = compare.main(["--targets", "mcu", "--sim", "--seq", "17", "--dim", "8", "--heads", "1", "--causal", "0",
                         "--out", str(tmp_path)])
    [row] = ResultsFile(tmp_path / "results.csv").read()
    assert code == 1 and row.status == "error" and "no DWT cycles" in row.message
    assert row.p50_ms is None and row.energy_j is None and row.energy_source == ""
