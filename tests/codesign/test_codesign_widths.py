"""codesign widths' summary cell (`narrowest_exact`): the narrowest tested width from which every wider one is
bit-exact, and what the untested widths leave open."""

from __future__ import annotations

import pytest

from codesign.widths import narrowest_exact


def points(exact_by_bits: dict[int, bool]) -> list[dict]:
    return [{"input": "normal", "dim": 8, "overflow": "wrap", "acc_bits": bits, "bit_exact": int(exact)}
            for bits, exact in exact_by_bits.items()]


@pytest.mark.parametrize("tested, cell", [
    ({36: False, 37: True, 40: True}, "37"),       # 36 tested and not exact: 37 is the narrowest
    ({30: False, 40: True}, "31..40"),             # 31..39 untested: any of them may be the narrowest (said "40")
    ({40: True}, "<=40"),                          # nothing narrower tested
    ({30: True, 40: False}, "never"),              # the widest tested is not exact
    ({30: False, 35: True, 38: False, 40: True}, "39..40"),  # exact below a failing width does not count
])
def test_the_cell_says_only_what_the_tested_widths_show(tested, cell):
    assert narrowest_exact(points(tested), "normal", 8, "wrap") == cell


def test_a_second_run_keeps_the_first_aside_and_rows_are_written_as_they_come(tmp_path, monkeypatch, capsys):
    """widths.csv was overwritten by the next run and written only at the end (a stopped run kept nothing): the
    earlier files go aside as .prev, and each head's row is on disk before the next is computed."""
    import csv

    from codesign import widths

    argv = ["--seq", "16", "--dims", "8", "--bits", "30,40", "--out", str(tmp_path)]
    assert widths.main(argv) == 0
    first = (tmp_path / "widths.csv").read_text()
    seen = []
    real_sweep = widths.sweep

    def watching(*args):  # main passes emit last: the rows on disk each time a point is emitted
        *rest, emit = args

        def spy(point):
            emit(point)
            with open(tmp_path / "widths.csv", newline="") as handle:
                seen.append(len(list(csv.DictReader(handle))))
        return real_sweep(*rest, spy)

    monkeypatch.setattr(widths, "sweep", watching)
    assert widths.main(argv) == 0
    capsys.readouterr()
    assert (tmp_path / "widths.csv.prev").read_text() == first and (tmp_path / "widths.png.prev").exists()
    assert seen == list(range(1, 9))  # 2 inputs × 1 dim × 2 overflows × 2 widths, each on disk as it came
