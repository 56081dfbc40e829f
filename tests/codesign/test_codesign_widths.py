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
