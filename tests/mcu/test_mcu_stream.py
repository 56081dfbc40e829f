"""Streamed heads on the board twin (issue 15, docs/protocol.md "Streamed heads"): a head whose K and V^T do not fit
the board's heap goes a key chunk at a time into the query rows' state on the board, and comes back bit-exact with
the model, through repeats, a noisy line at the link tests' threefold rates, soft resets mid-stream (the chunk in
flight restarts from its first key: its state died with the session), a twin killed mid-head, and a killed and
resumed sweep.

Heads stream naturally on the twin's real 100 KB heap at seq 128, dim 64 (its largest free block, with the frame
server's buffers in the heap, holds no 32 KB K and V^T whole), in key chunks of the contract's Bc (64); the
noisy tests shrink the heap the planner sees instead (`small_heap`), so that a dim-8 head streams in key chunks of
one Bc block (1 KB of K, cut smaller by the link's chunk policy once the line loses a frame: mcu/chunks.py)."""

from __future__ import annotations

import csv
import os
import re
import signal
from pathlib import Path

import pytest

pytest.importorskip("mpremote", reason="mpremote is not installed (pip install -e '.[mcu]')")
pytest.importorskip("unicorn", reason="unicorn is not installed (pip install -e '.[mcu]')")

import numpy as np

from helpers import run_module
from helpers.planner_heap import cap_planner_heap
from host import q15
from host.sweep import cli as compare
from host.results_file import ResultsFile
from mcu import planner, target
from mcu.deploy import deploy
from mcu.link import BoardLink
from mcu.twin_process import start_twin

#: The heap the noisy tests let the planner see: room for one Bc block of K and V^T at dim 8 (64 keys: 2 KB), the
#: state's header (32 B) and 8 query rows (Q, O, shift and state: 8 · (32 + 1 + 80) B) beside the server's reserve
#: and the planner's slack: 2,984 B, less than a seq 97 head's K and V^T whole with one row (4·97·8 + 33 = 3,137 B).
SMALL_HEAP = planner.SERVER_RESERVE + planner.SLACK + 4 * 8 * q15.BC + 32 + 8 * 113


@pytest.fixture
def small_heap(monkeypatch):
    cap_planner_heap(monkeypatch, SMALL_HEAP)


def rows(out: Path) -> list[dict]:
    with open(out / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_streamed_heads_repeat_bit_exact_with_the_same_cycles(small_heap):
    """Awkward shapes streamed through a live twin, two repeats each (the keys go twice: the state cannot be
    rewound); the twin's cycle model is deterministic, so both repeats take the same cycles."""
    with start_twin() as twin:
        deploy(twin.port, 115200, say=lambda line: None)
        with BoardLink(twin.port) as link:
            session = target.Session(link, twin.port, "test")
            for seq, dim, causal in ((97, 8, True), (130, 7, False), (300, 3, True)):
                rng = np.random.default_rng(seq)
                q, k, v = (rng.integers(-32768, 32768, (seq, dim)).astype(np.int16) for _ in range(3))
                params = q15.Q15Params(seq, dim, causal, q15.BC, 23170, 22)
                head = target.run_head(session, params, q, k, v, repeats=2)
                assert head.keys == q15.BC < seq, "the small heap makes the head stream, one Bc block at a time"
                assert head.out.same_bits(q15.attention_q15(q, k, v, params)), (seq, dim, causal)
                assert head.cycles[0] == head.cycles[1] > 0


def test_streamed_rows_of_a_sweep_are_ok_and_say_so(tmp_path):
    assert compare.main(["--targets", "mcu", "--sim", "--seq", "128", "--dim", "64", "--heads", "2", "--causal",
                         "both", "--out", str(tmp_path)]) == 0
    got = ResultsFile(tmp_path / "results.csv").read()
    assert len(got) == 2 and all(r.status == "ok" and r.bit_exact is True for r in got)
    assert all(f"streamed: {q15.BC} keys of K and V^T on the board at a time" in r.message for r in got)


def test_a_noisy_line_streams_bit_exact(tmp_path, small_heap):
    """drop = flip = 0.0009 per byte and delays (the link tests' threefold rates): every lost request or reply of a
    streamed head is resent (a resent STREAM answered from the reply cache, never run twice) and the row is exact.
    One causal head: each lost frame costs a reply timeout, and a streamed head has many frames."""
    assert compare.main(["--targets", "mcu", "--sim", "--seq", "97", "--dim", "8", "--heads", "1", "--causal", "1",
                         "--sim-faults", "drop=0.0009,flip=0.0009,delay=0.02,seed=3", "--out", str(tmp_path)]) == 0
    [row] = ResultsFile(tmp_path / "results.csv").read()
    assert row.status == "ok" and row.bit_exact is True and "streamed" in row.message
    retries = sum(int(n) for n in re.findall(r"(\d+) retries", row.message))
    assert retries >= 1, row.message  # the faults did hit, and were survived


def test_resets_mid_stream_restart_the_block_and_the_head_goes_on(tmp_path, small_heap):
    """A soft reset every 40 frames the board receives: each session completes a block of query rows or two and
    loses the one in flight, whose next session starts it from key 0; the rows stay exact."""
    assert compare.main(["--targets", "mcu", "--sim", "--seq", "97", "--dim", "8", "--heads", "1", "--causal",
                         "both", "--sim-faults", "reset=40,seed=3", "--out", str(tmp_path)]) == 0
    got = ResultsFile(tmp_path / "results.csv").read()
    assert sorted(r.causal for r in got) == [False, True]
    assert all(r.status == "ok" and r.bit_exact is True and "streamed" in r.message for r in got)
    assert all("resumed over" in r.message for r in got), [r.message for r in got]


def test_a_twin_killed_mid_stream_is_restarted_and_the_head_redone(monkeypatch, tmp_path):
    """The twin dies right after the second head's first STREAM with key0 > 0: the state it held is gone, and the
    block of query rows starts again from key 0 in a fresh twin."""
    from mcu import messages as m
    from mcu.link import BoardLink

    real, killed = BoardLink.request, []

    def request(link, kind, payload=b"", *args, **kwargs):
        reply = real(link, kind, payload, *args, **kwargs)
        if kind == m.Kind.STREAM and m.STREAM.unpack(payload)[2] > 0 and len(heads) == 2 and not killed:
            killed.append(m.STREAM.unpack(payload))
            twins[-1].process.kill()
            twins[-1].process.wait()
        return reply

    heads, twins = [], []
    real_run_head = target.run_head

    def run_head(session, *args):
        heads.append(1)
        twins.append(session.twin)
        return real_run_head(session, *args)

    monkeypatch.setattr(BoardLink, "request", request)
    monkeypatch.setattr(target, "run_head", run_head)
    assert compare.main(["--targets", "mcu", "--sim", "--seq", "128", "--dim", "64", "--heads", "2", "--causal", "0",
                         "--out", str(tmp_path)]) == 0
    [row] = ResultsFile(tmp_path / "results.csv").read()
    assert killed and killed[0][2] == q15.BC  # (row0, nrows, key0, nkeys): the second key chunk of the first block
    assert row.status == "ok" and row.bit_exact is True
    assert "the twin exited (status -9) and was restarted" in row.message


def test_a_killed_streamed_sweep_resumes_without_losing_or_repeating_a_row(tmp_path):
    grid = ("--targets", "mcu", "--sim", "--seq", "17,128", "--dim", "64", "--heads", "1", "--causal", "both",
            "--out", str(tmp_path))
    killed = run_module("host.compare", *grid, timeout=600,
                        env={**os.environ, "KBENCH_STOP_AFTER_ROWS": "2", "KBENCH_STOP_SIGNAL": "KILL"})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    before = rows(tmp_path)
    assert len(before) == 2
    done = run_module("host.compare", *grid, "--resume", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    after = rows(tmp_path)
    assert sorted((int(r["seq"]), r["causal"]) for r in after) == [(17, "0"), (17, "1"), (128, "0"), (128, "1")]
    assert all(r["status"] == "ok" and r["bit_exact"] == "1" for r in after)
    assert all("streamed" in r["message"] for r in after if r["seq"] == "128")
    assert [r["run_id"] for r in after[:len(before)]] == [r["run_id"] for r in before]  # kept, not redone
