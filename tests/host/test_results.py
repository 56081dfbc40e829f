"""The Result schema: validation, CSV round trip, append-per-row, torn last lines, schema version checks, and where
a row's timing comes from (timing_source)."""

import csv
import dataclasses
import math
import re

import pytest

from host.errors import ResultsError
from host.results import ADDED_COLUMNS, FIELD_NAMES, SCHEMA_VERSION, Result
from host.results_file import ResultsFile
from host.run_log import RunInfo, read_runs

BASE = dict(run_id="r1", timestamp="2026-11-29T00:00:00+00:00", git_rev="abc", host="h", device="d", target="cpu",
            kernel="numpy", dtype="float32", batch=1, heads=2, seq=17, dim=59, causal=True, seed=0)
WALL = dict(timing_source="measured: wall clock")


def row(**changes):
    return Result(**{**BASE, **changes})


def test_round_trip_keeps_every_field_exactly(tmp_path):
    original = row(p50_ms=0.1 + 0.2, min_ms=0.1, **WALL, rel_l2=1.5e-7, bit_exact=False, temp_c=-4.5, br=16, bc=32,
                   counters_reason="hardware counters not supported")
    results = ResultsFile(tmp_path / "results.csv")
    results.append(original)
    results.append(original.replace(seq=97))
    back = results.read()
    assert back == [original, original.replace(seq=97)]
    header = (tmp_path / "results.csv").read_text().splitlines()[0].split(",")
    assert tuple(header) == FIELD_NAMES and "schema_version" in header


@pytest.mark.parametrize("changes,needle", [
    (dict(status="fine"), "status='fine'"),
    (dict(status="error"), "needs a message"),
    (dict(p50_ms=-1.0), "p50_ms=-1.0"),
    (dict(seq="17"), "seq='17'"),
    (dict(bit_exact=1), "bit_exact=1"),
    (dict(p50_ms=1.0, min_ms=2.0), "min_ms=2.0"),
    (dict(schema_version=SCHEMA_VERSION + 1), "schema_version"),
    (dict(schema_version=0), "schema_version=0"),
    (dict(timing_source="guessed: by eye"), "timing_source='guessed: by eye' is not allowed; allowed: empty, or "
                                            "'measured: <how>' or 'modelled: <how>'"),
    (dict(timing_source="measured"), "timing_source='measured'"),  # the kind without how
    (dict(timing_source="Measured: wall clock"), "timing_source='Measured: wall clock'"),
    (dict(p50_ms=1.0, min_ms=1.0), "a row with p50_ms=1.0 needs a timing_source"),
    (dict(cycles=5600), "a row with cycles=5600 needs a timing_source"),
    (dict(p50_ms=1.0, timing_source=""), "'measured: <how>' or 'modelled: <how>'"),
    # no target measures a problem outside host/problem.py's LIMITS and dtypes (seq 0 was read as a row)
    (dict(p50_ms=0.0, min_ms=0.0, timing_source="measured: wall clock"), "p50_ms=0.0 in a row of status 'ok'"),
    (dict(seq=0), "seq=0 is out of range; allowed: 1..1048576"),
    (dict(dim=257), "dim=257 is out of range; allowed: 1..256"),
    (dict(heads=0), "heads=0 is out of range; allowed: 1..4096"),
    (dict(batch=0), "batch=0 is out of range; allowed: 1..4096"),
    (dict(seed=2**32), "seed=4294967296 is out of range; allowed: 0..4294967295"),
    (dict(dtype="float8"), "dtype='float8' is unknown; allowed: float32, float16, bfloat16, q15"),
    # an ok row's own figures outside its verdict: a hand-edited file (the report showed it ok, --resume kept it)
    # the limit derived here, not read off the code: 8 · 2⁻²⁴ · (1 + √59 + √17) for float32, d 59, N 17
    (dict(rel_l2=0.9), f"rel_l2=0.9 in a row of status 'ok'; allowed: at most "
                       f"{8 * 2.0**-24 * (1 + math.sqrt(59) + math.sqrt(17)):.3g} (float32, d 59, N 17"),
    (dict(rel_l2=float("nan")), "rel_l2=nan in a row of status 'ok'"),
    (dict(dtype="q15", bit_exact=False), "bit_exact=False in a q15 row of status 'ok'; allowed: True"),
    (dict(kernel="num\x00py"), "kernel='num\\x00py' holds a NUL byte; allowed: text without one"),
])
def test_invalid_rows_are_refused_naming_the_field(changes, needle):
    with pytest.raises(ResultsError) as info:
        row(**changes)
    assert needle in str(info.value)


def test_an_ok_rows_error_may_reach_its_tolerance_and_a_wrong_row_keeps_any():
    from host.tolerance import rel_l2_limit

    limit = rel_l2_limit("float32", 59, 17)
    assert row(rel_l2=limit).rel_l2 == limit
    with pytest.raises(ResultsError):
        row(rel_l2=limit * 1.001)
    assert row(rel_l2=0.9, status="wrong", message="wrong (test)").rel_l2 == 0.9
    assert row(rel_l2=0.9, dtype="q15", bit_exact=True).bit_exact  # Q15 rows: bit-exactness is the test


def test_config_key_ignores_the_run_but_not_the_problem():
    assert row(run_id="other", p50_ms=3.0, min_ms=1.0, **WALL).config_key() == row().config_key()
    assert row(seq=18).config_key() != row().config_key()
    assert row(br=16).config_key() != row().config_key()


def test_a_torn_last_line_is_ignored_and_repaired(tmp_path):
    results = ResultsFile(tmp_path / "results.csv")
    results.append(row())
    with results.path.open("a") as out:
        out.write("r1,2026-11-29,abc,h,d,cpu,num")  # a writer killed mid-row
    assert results.read() == [row()]
    results.append(row(seq=97))
    assert [r.seq for r in results.read()] == [17, 97]


def test_a_newer_schema_version_is_refused_with_advice(tmp_path):
    path = tmp_path / "results.csv"
    ResultsFile(path).append(row())
    path.write_text(path.read_text().replace(f",{SCHEMA_VERSION}\n", f",{SCHEMA_VERSION + 7}\n"))
    with pytest.raises(ResultsError, match=f"schema version '{SCHEMA_VERSION + 7}'; this kbench reads versions "
                                          f"1..{SCHEMA_VERSION}"):
        ResultsFile(path).read()


def _old_file(path, version: int, rows: list[dict]) -> None:
    """A results file of an older schema `version`: without the columns later versions added."""
    later = {name for added, columns in ADDED_COLUMNS.items() if added > version for name in columns}
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=[name for name in FIELD_NAMES if name not in later],
                                extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows({**cells, "schema_version": str(version)} for cells in rows)


def test_a_version_1_file_is_read_and_upgraded_when_appended_to(tmp_path):
    """Version 2 added status `wrong` and the peak_source and sensors_source columns, version 3 timing_source; a
    version 1 file (as a GPU box of an older kbench wrote it) is read with those columns empty, and an append
    rewrites it in this version's columns, its old row still saying version 1."""
    path = tmp_path / "results.csv"
    _old_file(path, 1, [row(seq=5).to_row()])
    [read] = ResultsFile(path).read()
    assert read == row(seq=5, schema_version=1) and read.peak_source == "" and read.timing_source == ""
    ResultsFile(path).append(row(seq=6))
    assert path.read_text().splitlines()[0].split(",") == list(FIELD_NAMES)
    assert [(r.seq, r.schema_version) for r in ResultsFile(path).read()] == [(5, 1), (6, SCHEMA_VERSION)]


def test_a_version_2_file_with_timing_is_read_without_a_timing_source(tmp_path):
    """Version 2 rows carry p50_ms and cycles but never recorded where they came from: they are read with
    timing_source empty (not refused, not guessed), keep version 2 through an upgrade and a replace (as nsight's
    merge does), while a new row with the same figures and no source is refused."""
    path = tmp_path / "results.csv"
    figures = dict(p50_ms=2.0, min_ms=1.5, cycles=336_000)
    cells = {**row(seq=5, **figures, **WALL).to_row(), "timing_source": "not a column of version 2"}
    _old_file(path, 2, [cells])
    assert "timing_source" not in path.read_text()
    [read] = ResultsFile(path).read()
    assert (read.timing_source, read.schema_version, read.p50_ms, read.cycles) == ("", 2, 2.0, 336_000)
    ResultsFile(path).append(row(seq=6, **figures, timing_source="modelled: board twin's cycle model"))
    old, new = ResultsFile(path).read()
    assert (old.timing_source, old.schema_version) == ("", 2)
    assert (new.timing_source, new.schema_version) == ("modelled: board twin's cycle model", SCHEMA_VERSION)
    assert old.replace(measured_bytes=4096).schema_version == 2
    with pytest.raises(ResultsError, match="p50_ms=2.0 needs a timing_source"):
        old.replace(schema_version=SCHEMA_VERSION)


def test_a_bad_cell_is_named(tmp_path):
    path = tmp_path / "results.csv"
    ResultsFile(path).append(row(p50_ms=1.0, min_ms=1.0, **WALL))
    path.write_text(path.read_text().replace(",1.0,", ",fast,", 1))
    with pytest.raises(ResultsError, match="fast"):
        ResultsFile(path).read()


def test_rewrite_replaces_rows_atomically(tmp_path):
    results = ResultsFile(tmp_path / "results.csv")
    for seq in (1, 17, 97):
        results.append(row(seq=seq))
    results.rewrite([r for r in results.read() if r.seq != 17])
    assert [r.seq for r in results.read()] == [1, 97]
    assert not list(tmp_path.glob("*.tmp"))


def test_run_info_lines(tmp_path):
    path = tmp_path / "runs.jsonl"
    RunInfo("r1", "t", "python -m host.compare --seq 17", "abc", "h", {"cpus": 2}).append_to(path)
    with path.open("a") as out:
        out.write('{"run_id": "torn')
    runs = read_runs(path)
    assert len(runs) == 1 and runs[0].command.endswith("--seq 17") and runs[0].machine == {"cpus": 2}


def test_numpy_floats_are_written_as_plain_numbers(tmp_path):
    import numpy as np

    results = ResultsFile(tmp_path / "results.csv")
    results.append(row(peak_gflops=np.float64(50900.5), p50_ms=np.float64(1.25), min_ms=1.0, **WALL))
    assert "np.float64" not in results.path.read_text()
    assert results.read()[0].peak_gflops == 50900.5


def test_a_last_row_missing_only_its_newline_is_kept_not_measured_again(tmp_path):
    path = tmp_path / "results.csv"
    results = ResultsFile(path)
    results.append(row(seq=5))
    results.append(row(seq=6))
    path.write_bytes(path.read_bytes()[:-1])  # the writer died after the row, before its newline
    assert [r.seq for r in results.read()] == [5, 6]
    results.append(row(seq=7))
    assert [r.seq for r in results.read()] == [5, 6, 7]


def test_a_header_alone_without_its_newline_takes_rows_after_it(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text(",".join(FIELD_NAMES))
    assert ResultsFile(path).read() == []
    ResultsFile(path).append(row(seq=9))
    assert [r.seq for r in ResultsFile(path).read()] == [9]


@pytest.mark.parametrize("content,needle", [
    (b"just some words without a newline", ":1: no complete line, and not a results header"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", ":1: byte 0x89 is not UTF-8 text"),
    (b"schema_version\nok\n\xff\n", ":3: byte 0xff is not UTF-8 text"),
    (b"a,b,c\n1,2,3\n", ":1: not a kbench results header"),
])
def test_a_file_that_is_not_results_is_refused_with_file_and_line(tmp_path, content, needle):
    path = tmp_path / "results.csv"
    path.write_bytes(content)
    with pytest.raises(ResultsError, match=re.escape(needle)) as raised:
        ResultsFile(path).read()
    assert path.read_bytes() == content, "nothing overwritten"
    message = str(raised.value)
    assert str(path) in message and "not a kbench results" in message
    assert "--out" not in message, "every tool reads results files; only one with --out may suggest another"


def test_a_garbage_line_and_a_bad_cell_are_named_by_line(tmp_path):
    path = tmp_path / "results.csv"
    for seq in (1, 2, 3):
        ResultsFile(path).append(row(seq=seq, p50_ms=1.0, min_ms=1.0, **WALL))
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2] + ["garbage,line\n"] + lines[2:]))
    with pytest.raises(ResultsError, match=r"results.csv:3: 2 cells where the header has \d+"):
        ResultsFile(path).read()
    path.write_text("".join(lines[:3]).replace(",1.0,", ",fast,", 1) + lines[3])
    with pytest.raises(ResultsError, match=r"results.csv:2: cell \w+='fast' is not a float"):
        ResultsFile(path).read()


def _two_rows_and_a_torn_one(path):
    results = ResultsFile(path)
    results.append(row(seq=1))
    results.append(row(seq=97))
    whole = path.read_bytes()
    with path.open("ab") as out:
        out.write(b"20261201T999999-dead,2026-12-01T19:2")
    return results, whole


def test_repair_cuts_a_torn_tail_in_place_so_a_kill_midway_loses_no_row(tmp_path, monkeypatch):
    # Issue 28, item 1: repair used to rewrite the whole file with write_bytes, whose first step empties it; a kill
    # there (simulated: write_bytes empties the file, then the process "dies") left a 0-byte results.csv.
    path = tmp_path / "results.csv"
    results, whole = _two_rows_and_a_torn_one(path)

    class Killed(Exception):
        pass

    def killed(self, data):
        self.open("wb").close()
        raise Killed

    monkeypatch.setattr(type(path), "write_bytes", killed)
    try:
        results.repair()
    except Killed:
        pass  # the process died here; what is on disk is what a kill leaves
    assert path.read_bytes() == whole, "cut to the end of the last whole row, nothing else touched"
    assert [r.seq for r in results.read()] == [1, 97]


def test_a_full_disk_during_an_append_cuts_the_file_back_and_names_the_file(tmp_path, monkeypatch):
    # Issue 28, item 7: a full disk left a torn row and an OSError traceback. Here the disk fills after 10 bytes of
    # the row: the row must go whole or not at all, and the error is a ResultsError naming the file and ENOSPC's text.
    import errno
    import os

    from host import safe_files

    path = tmp_path / "results.csv"
    results = ResultsFile(path)
    results.append(row(seq=1))
    before = path.read_bytes()
    real_write = os.write

    def full(fd, data):
        if len(data) > 10:
            return real_write(fd, bytes(data[:10]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(safe_files.os, "write", full)
    with pytest.raises(ResultsError, match=re.escape(f"{path}: cannot append to it: {os.strerror(errno.ENOSPC)}")):
        results.append(row(seq=97))
    monkeypatch.setattr(safe_files.os, "write", real_write)
    assert path.read_bytes() == before
    results.append(row(seq=97))
    assert [r.seq for r in results.read()] == [1, 97]


def test_a_torn_last_line_of_runs_jsonl_does_not_swallow_the_next_record(tmp_path):
    # Issue 28, item 6: the next record was appended to the torn line and both were skipped as one bad line.
    path = tmp_path / "runs.jsonl"
    first = RunInfo(run_id="r1", timestamp="t", command="c", git_rev="g", host="h")
    first.append_to(path)
    with path.open("a") as out:
        out.write('{"run_id": "r2", "timest')
    dataclasses.replace(first, run_id="r3").append_to(path)
    assert [run.run_id for run in read_runs(path)] == ["r1", "r3"]
    assert path.read_text().count("\n") == 2, "the torn line is cut, in place"


def test_a_whole_last_record_of_runs_jsonl_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"run_id": "r1", "timestamp": "t", "command": "c", "git_rev": "g", "host": "h"}')
    RunInfo(run_id="r2", timestamp="t", command="c", git_rev="g", host="h").append_to(path)
    assert [run.run_id for run in read_runs(path)] == ["r1", "r2"]


def test_keep_aside_never_overwrites_an_earlier_copy(tmp_path):
    # Issue 28, item 5: results.csv.prev was overwritten by every fresh run.
    from host.safe_files import keep_aside

    path = tmp_path / "results.csv"
    assert keep_aside(path) == []
    for text in ("first", "second", "third"):
        path.write_text(text)
        keep_aside(path)
    assert not path.exists()
    assert [(tmp_path / name).read_text() for name in ("results.csv.prev", "results.csv.prev.1",
                                                        "results.csv.prev.2")] == ["first", "second", "third"]


def test_files_kept_aside_together_share_one_number(tmp_path):
    """results.md came aside only from 2026-12-07: beside results.csv.prev and .prev.1 of older runs, a run's
    results.csv and results.md both go to .prev.2, the first number free for both, so they stay paired."""
    from host.safe_files import keep_aside

    csv_path, md_path = tmp_path / "results.csv", tmp_path / "results.md"
    for name in ("results.csv.prev", "results.csv.prev.1", "results.md.prev"):
        (tmp_path / name).write_text("older")
    csv_path.write_text("rows")
    md_path.write_text("report")
    assert keep_aside(csv_path, md_path, tmp_path / "absent.png") == [tmp_path / "results.csv.prev.2",
                                                                       tmp_path / "results.md.prev.2"]
    assert (tmp_path / "results.md.prev.2").read_text() == "report" and not (tmp_path / "absent.png.prev.2").exists()


def test_an_append_refuses_a_file_with_columns_the_schema_does_not_know(tmp_path):
    # Issue 28, item 4: an append after a user's own column was added used to rewrite the file without it.
    path = tmp_path / "results.csv"
    ResultsFile(path).append(row(seq=1))
    header, line = path.read_text().splitlines()
    path.write_text(f"{header},note\n{line},mine\n")
    with pytest.raises(ResultsError, match="note"):
        ResultsFile(path).append(row(seq=97))
    assert path.read_text() == f"{header},note\n{line},mine\n"


def test_a_header_naming_a_column_twice_is_refused_before_any_row_is_read(tmp_path):
    """Which copy of a repeated column is the row's value cannot be told: a resume that took the last one rewrote
    every measured row's seq with it."""
    path = tmp_path / "results.csv"
    ResultsFile(path).append(row())
    header, cells = path.read_text().splitlines()
    path.write_text(f"{header},seq\n{cells},999\n")
    before = path.read_bytes()
    with pytest.raises(ResultsError, match=r"names the column\(s\) seq more than once"):
        ResultsFile(path).read()
    assert path.read_bytes() == before
