"""mcu.sim.calibrate's command line: a bad --timeout is one `kbench: error:` line with status 2, and a case whose
checksum differs from host/q15.py is status 1 with a line naming it (the devices stood in for: no twin is started)."""

from __future__ import annotations

import pytest

from mcu.sim import calibrate


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-5", "1e9", "x", ""])
def test_a_timeout_that_is_not_a_finite_number_in_range_is_one_error_line(value, capsys):
    assert calibrate.main([f"--timeout={value}"]) == 2  # (as one word: argparse takes "-inf" for an option)
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("kbench: error: argument --timeout: --timeout="), err
    assert f"{value!r}" in err or f"={value} " in err
    assert err.rstrip().endswith("allowed: 1..86400") and "Traceback" not in err


class FakeTwin:
    def terminate(self) -> None:
        pass

    def wait(self, timeout: float) -> int:
        return 0


def devices(monkeypatch, wrong: dict[str, tuple[int, int, int]]):
    """The twin and board stood in for: each gives every case's right checksum but `wrong[device]`'s."""
    def run_on(port, code, timeout_s):
        results = []
        for seq, dim, bc in calibrate.CASES:
            total = calibrate.expected_checksum(seq, dim, bc) ^ (1 if wrong.get(port) == (seq, dim, bc) else 0)
            results.append(calibrate.CaseResult(seq, dim, bc, 1000 * seq, total))
        return results

    monkeypatch.setattr(calibrate, "start_twin", lambda root: (FakeTwin(), "twin"))
    monkeypatch.setattr(calibrate, "run_on", run_on)


def test_every_case_bit_exact_is_status_0(monkeypatch, capsys):
    devices(monkeypatch, {})
    assert calibrate.main(["--serial", "board"]) == 0
    out, err = capsys.readouterr()
    assert out.count("bit-exact") == len(calibrate.CASES) and err == ""


@pytest.mark.parametrize("device", ["twin", "board"])
def test_a_case_that_differs_is_status_1_with_a_line_naming_it(monkeypatch, capsys, device):
    devices(monkeypatch, {device: (64, 32, 16)})
    assert calibrate.main(["--serial", "board"]) == 1
    out, err = capsys.readouterr()
    assert out.count("DIFFER from host/q15.py") == 1 and "| 64 | 32 | 16 |" in out.splitlines()[4]
    assert err == (f"kbench: 1 of {len(calibrate.CASES)} cases differ from host/q15.py: seq=64 dim=32 Bc=16 on the "
                   f"{device}\n")
