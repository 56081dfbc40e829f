"""Contract v2's promise across targets (issue 31): for one problem, the `mcu` rows (the board's server and kernel,
here on the twin, driven through the host's link code as a board is) and the `asic` rows (the datapath's bit model,
whatever its array's shape and dataflow) give identical outputs, values and row shifts, compared directly."""

from __future__ import annotations

import pytest

pytest.importorskip("cobs", reason="cobs is not installed (pip install -e '.[mcu]')")
pytest.importorskip("mpremote", reason="mpremote is not installed (pip install -e '.[mcu]')")
pytest.importorskip("unicorn", reason="unicorn is not installed (pip install -e '.[mcu]')")

from codesign.bits import run_head as datapath_head
from codesign.datapath import Datapath
from host.problem import AttentionProblem
from host.q15 import BC, prepare
from mcu.deploy import deploy
from mcu.head import Session, run_head
from mcu.link import BoardLink

#: Arrays narrower, as wide as and wider than the contract's Bc, square and not, in each dataflow.
ARRAYS = [Datapath(rows=16, cols=16, dataflow="os"), Datapath(rows=32, cols=64, dataflow="ws"),
          Datapath(rows=8, cols=128, dataflow="is"), Datapath(rows=128, cols=8, dataflow="os"),
          Datapath(rows=7, cols=24, dataflow="ws")]


@pytest.fixture(scope="module")
def board(twin):
    deploy(twin.port, 115200, say=lambda line: None)
    return twin.port


@pytest.mark.parametrize("seq,dim,causal", [(97, 59, True), (256, 64, False), (300, 32, True)])
def test_the_board_and_every_datapath_give_one_problem_the_same_bits(board, seq, dim, causal):
    problem = AttentionProblem(seq=seq, dim=dim, causal=causal, seed=seq)
    quantized = prepare(problem, *problem.inputs())
    assert quantized.params.bc == BC
    with BoardLink(board) as link:
        on_board = run_head(Session(link, board, "twin"), quantized.params, *quantized.head(0, 0), 1).out
    assert on_board.shift.any()  # the rows carry their own exponents
    for datapath in ARRAYS:
        on_chip = datapath_head(*quantized.head(0, 0), quantized.params, datapath).out
        assert on_chip.o.tobytes() == on_board.o.tobytes(), (datapath.name, seq, dim, causal)
        assert on_chip.shift.tobytes() == on_board.shift.tobytes(), (datapath.name, seq, dim, causal)
