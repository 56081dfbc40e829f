"""results.csv as a file against hostile contents (issue 28): a UTF-8 byte-order mark, a second header, non-finite or
out-of-range cells, a folder where a temporary file would go, line breaks in a message, and appends and drops that
must not parse (or lose) the rows already there."""

import math
import os
import stat

import pytest

from host.errors import ResultsError
from host.results import INT_MAX, Result
from host.results_file import ResultsFile

BASE = dict(run_id="r1", timestamp="2026-11-29T00:00:00+00:00", git_rev="abc", host="h", device="d", target="cpu",
            kernel="numpy", dtype="float32", batch=1, heads=2, seq=17, dim=59, causal=True, seed=0)


def row(**changes):
    return Result(**{**BASE, **changes})


def _written(path, *rows):
    results = ResultsFile(path)
    for r in rows:
        results.append(r)
    return results


def test_a_byte_order_mark_is_read_and_appended_after(tmp_path):
    path = tmp_path / "results.csv"
    _written(path, row(seq=1))
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())  # as Excel saves a CSV as "UTF-8"
    results = ResultsFile(path)
    assert results.read() == [row(seq=1)]
    results.append(row(seq=2))
    assert [r.seq for r in ResultsFile(path).read()] == [1, 2]


def test_a_second_header_in_the_middle_is_named_as_such(tmp_path):
    path = tmp_path / "results.csv"
    _written(path, row(seq=1))
    header, line = path.read_text().splitlines()
    path.write_text(f"{header}\n{line}\n{header}\n{line}\n")  # two files joined with cat
    with pytest.raises(ResultsError, match=r"results.csv:3: a second header line in the middle of the file"):
        ResultsFile(path).read()


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_an_ok_row_with_a_non_finite_figure_is_refused_and_a_wrong_row_keeps_it(value):
    with pytest.raises(ResultsError, match=r"rel_l2=.* in a row of status 'ok'; allowed: a finite number"):
        row(rel_l2=value)
    kept = row(rel_l2=value, status="wrong", message="output overflowed")
    assert kept.rel_l2 is value


def test_cells_beyond_int64_or_float_range_are_refused_naming_the_cell(tmp_path):
    path = tmp_path / "results.csv"
    _written(path, row(seq=1))
    huge = "9" * 400
    header, line = path.read_text().splitlines()
    cells = line.split(",")
    seq_at = header.split(",").index("seq")
    for bad, needle in ((str(10**30), f"seq={10**30} is out of range; allowed: 0..{INT_MAX}"),
                        (huge, "is out of range")):
        cells[seq_at] = bad
        path.write_text(f"{header}\n{','.join(cells)}\n")
        with pytest.raises(ResultsError, match=rf"results.csv:2: .*{needle}"):
            ResultsFile(path).read()
    cells[seq_at] = "1"
    rel_at = header.split(",").index("rel_l2")
    cells[rel_at] = huge  # 400 nines in a float cell parse as inf
    path.write_text(f"{header}\n{','.join(cells)}\n")
    with pytest.raises(ResultsError, match=r"results.csv:2: rel_l2=inf in a row of status 'ok'"):
        ResultsFile(path).read()


def test_a_folder_named_like_the_temporary_file_does_not_stop_a_rewrite(tmp_path):
    path = tmp_path / "results.csv"
    results = _written(path, row(seq=1), row(seq=2))
    (tmp_path / "results.csv.tmp").mkdir()
    (tmp_path / ".results.csv.tmp").mkdir()
    results.rewrite([row(seq=3)])
    assert [r.seq for r in results.read()] == [3]
    results.drop({0})
    assert results.read() == []


def test_a_message_with_line_breaks_is_written_on_one_line(tmp_path):
    path = tmp_path / "results.csv"
    _written(path, row(status="error", message="first\nsecond\r\nthird"))
    assert path.read_text().count("\n") == 2
    [back] = ResultsFile(path).read()
    assert back.message == "first | second | third"


def test_an_append_reads_only_the_tail_not_the_rows_before(tmp_path):
    # O(one row): a row in the middle that a full read refuses does not stop an append, which never parses it.
    path = tmp_path / "results.csv"
    _written(path, row(seq=1), row(seq=2))
    header, first, second = path.read_text().splitlines()
    path.write_text(f"{header}\ngarbage\n{second}\n")
    with pytest.raises(ResultsError, match=r"results.csv:2: 1 cells where the header has"):
        ResultsFile(path).read()
    ResultsFile(path).append(row(seq=3))
    header, garbage, second_again, third = path.read_text().splitlines()
    assert (garbage, second_again) == ("garbage", second)
    path.write_text(f"{header}\n{first}\n{second}\n{third}\n")
    assert [r.seq for r in ResultsFile(path).read()] == [1, 2, 3]


def test_a_torn_tail_longer_than_a_read_chunk_is_cut_to_the_last_whole_row(tmp_path):
    path = tmp_path / "results.csv"
    _written(path, row(seq=1))
    whole = path.stat().st_size
    with path.open("a") as f:
        f.write("r2,2026" + "x" * 200_000)  # a torn last line of 200 KB, no newline
    results = ResultsFile(path)
    assert results.read() == [row(seq=1)] and results.torn_line == 3
    results.repair()
    assert path.stat().st_size == whole


def test_drop_removes_the_named_rows_and_copies_the_others_cell_for_cell(tmp_path):
    path = tmp_path / "results.csv"
    rows = [row(seq=s, status="error", message=f"m{s}") for s in (1, 2, 3, 4)]
    results = _written(path, *rows)
    lines = path.read_text().splitlines()
    results.drop({1, 3})
    assert path.read_text().splitlines() == [lines[0], lines[1], lines[3]]
    assert results.read() == [rows[0], rows[2]]


def test_a_drop_that_fails_midway_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "results.csv"
    results = _written(path, row(seq=1), row(seq=2))
    before = path.read_bytes()

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("host.results_file.os.fsync", full_disk)
    with pytest.raises(ResultsError, match=r"cannot rewrite it: No space left on device; its rows stay as they were"):
        results.drop({0})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["results.csv"]


def test_a_bad_byte_far_into_the_file_is_named_by_its_line(tmp_path):
    path = tmp_path / "results.csv"
    _written(path, *[row(seq=s) for s in range(1, 3001)])  # ~1.6 MB: the bad byte lies past the first read chunk
    data = path.read_bytes()
    lines = data.split(b"\n")
    lines[2900] = lines[2900].replace(b"numpy", b"num\xffy")
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(ResultsError, match=r"results.csv:2901: byte 0xff is not UTF-8 text"):
        ResultsFile(path).read()


def test_a_rewrite_keeps_the_file_s_permissions(tmp_path):
    path = tmp_path / "results.csv"
    results = _written(path, row(seq=1), row(seq=2))
    path.chmod(0o664)  # shared with a group: a rewrite must not make it 0600 (mkstemp's mode)
    results.drop({0})
    assert stat.S_IMODE(path.stat().st_mode) == 0o664 and [r.seq for r in results.read()] == [2]


def test_a_results_file_that_is_a_link_is_rewritten_where_it_points(tmp_path):
    elsewhere = tmp_path / "store"
    elsewhere.mkdir()
    target = elsewhere / "results.csv"
    _written(target, row(seq=1), row(seq=2))
    link = tmp_path / "results.csv"
    link.symlink_to(target)
    ResultsFile(link).drop({0})
    assert link.is_symlink() and [r.seq for r in ResultsFile(target).read()] == [2]
    assert sorted(p.name for p in elsewhere.iterdir()) == ["results.csv"]


def test_blank_lines_are_no_rows_and_do_not_shift_a_drop(tmp_path):
    path = tmp_path / "results.csv"
    _written(path, row(seq=1), row(seq=2))
    header, first, second = path.read_text().splitlines()
    path.write_text(f"{header}\n\n{first}\n\n{second}\n\n")  # as `echo >> results.csv` leaves them
    results = ResultsFile(path)
    assert [r.seq for r in results.read()] == [1, 2]
    results.drop({0})
    assert path.read_text() == f"{header}\n{second}\n"


def test_an_append_to_a_file_that_cannot_be_opened_is_one_error_naming_it(tmp_path, monkeypatch):
    path = tmp_path / "results.csv"
    results = _written(path, row(seq=1))
    real_open = os.open

    def refused(name, flags, *args):
        if str(name) == str(path) and flags & os.O_APPEND:
            raise PermissionError(13, "Permission denied")
        return real_open(name, flags, *args)

    monkeypatch.setattr("host.safe_files.os.open", refused)
    with pytest.raises(ResultsError, match=r"results.csv: cannot append to it: Permission denied"):
        results.append(row(seq=2))


def test_the_quick_row_checks_accept_exactly_what_the_full_validation_accepts():
    # RowReader checks numbers by kind and skips __post_init__'s per-field loop when they pass; mutate cells of a
    # valid row at random and compare with Result(**values), which runs the whole validation.
    import random

    from host.results import _KINDS, FIELD_NAMES, RowReader, _parse
    base = row(p50_ms=0.5, min_ms=0.25, timing_source="measured: wall clock", rel_l2=1e-7, temp_c=-3.0, br=16,
               gflops=2.0, cycles=5600).to_row()
    pool = ["", "0", "1", "2", "-1", "-0.5", "0.5", "nan", "inf", "-inf", "1e400", "9" * 25, "x", "ok", "wrong",
            "error", "measured: wall clock", "guessed", "3", "4", "5", "1.0"]
    reader = RowReader(list(FIELD_NAMES))
    rng = random.Random(28)
    for _ in range(5000):
        cells = dict(base)
        for name in rng.sample(FIELD_NAMES, rng.randint(1, 4)):
            cells[name] = rng.choice(pool)
        try:
            quick = reader.result(list(cells.values()))
        except ResultsError:
            quick = None
        try:
            full = Result(**{name: _parse(_KINDS[name], text) for name, text in cells.items()})
        except (ResultsError, ValueError):
            full = None
        assert (quick is None) == (full is None), cells
        assert quick is None or quick.to_row() == full.to_row(), cells  # as text: nan equals nan
