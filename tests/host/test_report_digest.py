"""The report's one pass (host/report/digest.py): what it gathers from a stream equals what the list gives, it stops
holding rows past SUMMARY_ROWS, and its first not-ok rows are exactly the first of the fully sorted list (issue 28:
a million-row folder is rendered without holding a million Results)."""

from __future__ import annotations

import random

import pandas

from host.report.digest import NOT_OK_LISTED, Digest, not_ok_key
from host.report.markdown import markdown
from host.report.plots import results_frame
from host.report.render import read_results
from test_report import GPU_RUN
from test_report_large import many, write_csv


def test_the_digest_keeps_rows_only_up_to_its_limit():
    small = Digest.of(many(10), keep=10)
    assert not small.summarised and len(small.rows) == 10
    large = Digest.of(many(11), keep=10)
    assert large.summarised and large.rows is None and large.count == 11
    assert sum(large.statuses.values()) == 11 and sum(large.run_rows.values()) == 11


def test_the_first_not_ok_rows_are_those_of_the_whole_list_sorted():
    rows = many(3000)
    random.Random(5).shuffle(rows)
    digest = Digest.of(rows, keep=10)
    bad = [r for r in rows if r.status != "ok"]
    assert digest.not_ok == len(bad)
    assert digest.first_not_ok() == sorted(bad, key=not_ok_key)[:NOT_OK_LISTED]  # sorted() is stable, as the digest


def test_a_streamed_render_says_what_the_list_says(tmp_path):
    rows = many(2500)
    digest = read_results(write_csv(tmp_path, rows))
    assert digest.summarised and digest.count == 2500
    drawn = []
    assert markdown(digest, [GPU_RUN], drawn) == markdown(rows, [GPU_RUN], drawn)
    streamed, listed = results_frame(digest), results_frame(rows)
    pandas.testing.assert_frame_equal(streamed, listed)  # NaN where both are NaN
    assert streamed.attrs == listed.attrs and len(streamed) == 4 * 97  # 4 plotted kinds (ok, wrong) x 97 lengths
