"""The serial schedule's windows (codesign/serial_windows.py) in closed form, as codesign/cycles.py counts them, against
the same windows walked one by one (codesign/rtl/sim.py schedule_cycles, what the head engine's counter meets), on
awkward shapes and without simulating: arrays with R > C and R < C, E below and above r·k, d that takes one or several
P·V folds, causal and not, one tile or many, with the divider bank holding or not. And a case by hand."""

from __future__ import annotations

import pytest

from codesign.cycles import head_cycles
from codesign.datapath import Datapath
from codesign.rtl.sim import model_cycles, schedule, schedule_cycles

DATAPATHS = [Datapath(rows=4, cols=2, exp_lanes=1, dividers=4), Datapath(rows=2, cols=4, exp_lanes=3, dividers=2),
             Datapath(rows=3, cols=2, exp_lanes=3, dividers=7, div_latency=19),
             Datapath(rows=8, cols=8, exp_lanes=16, dividers=32), Datapath(rows=16, cols=16, exp_lanes=2, dividers=1),
             Datapath(rows=32, cols=32)]


@pytest.mark.parametrize("dp", DATAPATHS, ids=lambda dp: dp.name)
@pytest.mark.parametrize("seq", [1, 17, 97, 130])
@pytest.mark.parametrize("dim", [1, 59, 64])
@pytest.mark.parametrize("causal", [False, True])
def test_the_closed_form_is_the_walk(dp, seq, dim, causal):
    assert model_cycles(dp, seq, dim, causal)[0] == schedule_cycles(dp, seq, dim, causal)


def test_the_shapes_hold_and_do_not_hold():
    """Not vacuous: the bank holds on some of these heads and not on others."""
    holds = [schedule(dp, seq, 59, causal)[1] > 0 for dp in DATAPATHS for seq in (17, 97) for causal in (False, True)]
    assert any(holds) and not all(holds)


def test_three_tiles_by_hand():
    dp = Datapath(rows=2, cols=2, exp_lanes=2, dividers=2, div_latency=18)
    head = head_cycles(dp, 5, 1, False, 2)
    # Tiles of 2, 2 and 1 rows, each over blocks of 2, 2 and 1 keys: 9 steps. QKᵀ on the 2x2 os array is one fold
    # of T + R + C − 2 = 1 + 2 = 3 cycles whatever the rows and keys; P·V one fold of keys + 2: 4, 4 and 3.
    # Softmax (E 2, latencies score 3, EXP2 4, rescale 2): max pass ⌈r·k/2⌉ + 3 + ⌈log₂ k⌉, exp ⌈(r·k + r)/2⌉ + 4,
    # rescale ⌈r·2/2⌉ + 2 after a tile's first block. r 2: k 2 → me 2+3+1 + 3+4 = 13, k 1 → 1+3+0 + 2+4 = 10,
    # rescale 4. r 1: k 2 → 1+3+1 + 2+4 = 11, k 1 → 1+3 + 1+4 = 9, rescale 3.
    # Windows max(pv before + qk after, max(me, pv before) + rescale):
    #   tile 0: block 0 max(0 + 3, 13) = 13; block 1 max(4 + 3, max(13, 4) + 4) = 17; block 2 max(4 + 3, max(10, 4)
    #   + 4) = 14 → 44. tile 1: max(3 + 3, 13) = 13 (the P·V before is tile 0's 1-key block), 17, 14 → 44.
    #   tile 2 (1 row): max(3 + 3, 11) = 11; max(4 + 3, 11 + 3) = 14; max(4 + 0, max(9, 4) + 3) = 12 → 37.
    # Fill 3 (the first QKᵀ), tail 3 (the last P·V). Divider: peak pass 1 + ⌈r/2⌉ waves of 18: 19 (r 2), 19 (r 1).
    # The bank takes tile 0 at the end of tile 1's first window and tile 1 at the end of tile 2's: 17 + 14 + 11 = 42
    # apart, no hold; tile 2 after the tail: 14 + 12 + 3 = 29 after tile 1's, no hold; its 19 exposed.
    # 3 + 44 + 44 + 37 + 3 + 19 = 150, plus the DRAM prologue and epilogue.
    assert head.fill == 3 and head.array_tail == 3 and head.divider_tail == 19
    assert head.cycles - head.prologue - head.epilogue == 150 == schedule_cycles(dp, 5, 1, False)
    assert schedule(dp, 5, 1, False)[1] == 0
