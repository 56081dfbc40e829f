"""The MCU target's rows carry their verdict: on the twin, an output that differs from host/q15.py in one element is
`wrong` (figures kept, the sweep exits 1), the same sweep untouched is `ok`; rows say their sensors are modelled and
carry the Cortex-M4's datasheet roof."""

import numpy as np
import pytest

pytest.importorskip("mpremote", reason="mpremote is not installed (pip install -e '.[mcu]')")
pytest.importorskip("unicorn", reason="unicorn is not installed (pip install -e '.[mcu]')")

from host.sweep import cli as compare
from host.results_file import ResultsFile
from mcu import target


@pytest.mark.parametrize("corrupt", [None, "value", "shift"])
def test_a_corrupted_board_output_gives_a_wrong_row(monkeypatch, tmp_path, corrupt):
    """One bit of one value, or of one row's shift (contract v2: a row is o · 2^(s_V - 15 - g)), per head."""
    real = target.run_head

    def run_head(session, params, q, k, v, repeats):
        head = real(session, params, q, k, v, repeats)
        if corrupt == "value":
            head.out.o[3, 1] ^= 4  # one bit of one element, as a flaky SRAM cell or a bad READ would leave it
        elif corrupt == "shift":
            head.out.shift[3] ^= 1  # one bit of row 3's shift: the whole row off by a factor of 2
        return head

    monkeypatch.setattr(target, "run_head", run_head)
    code = compare.main(["--targets", "mcu", "--sim", "--seq", "17", "--dim", "8", "--heads", "2", "--causal", "0",
                         "--out", str(tmp_path)])
    [row] = ResultsFile(tmp_path / "results.csv").read()
    assert row.cycles > 0 and row.rel_l2 is not None and row.p50_ms > 0
    assert row.sensors_source == "modelled" and row.temp_c is not None
    assert row.timing_source == "modelled: board twin's cycle model"
    assert row.peak_source.startswith("datasheet: Cortex-M4") and row.peak_gflops == pytest.approx(
        4 * row.clock_hz / 1e9)
    if corrupt:
        assert code == 1 and row.status == "wrong" and row.bit_exact is False
        differ = "2 of 272 values differ" if corrupt == "value" else "2 of 34 row shifts differ"  # one per head
        assert f"not bit-exact with host/q15.py ({differ}" in row.message, row.message
    else:
        assert code == 0 and row.status == "ok" and row.bit_exact is True and np.isfinite(row.max_abs)
