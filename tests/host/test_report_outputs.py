"""The report on a disk that fills up (issue 28): each output (results.md, every PNG) is written to a temporary file
beside it and renamed over the old one, each tried on its own; one that cannot be written leaves its previous copy
(never a truncated file), is named in one line with the OS's reason, and the rows are untouched. The full disk is
simulated by an os.write that stops after a budget of bytes (the real thing, a 64 KB tmpfs, needs mount)."""

from __future__ import annotations

import argparse
import errno
import os
from pathlib import Path

import pytest

from host.report import outputs
from host.results_file import ResultsFile
from host.report.render import ReportIncomplete, main, render
from host.sweep.summary import summarize_run
from test_report import BENCH_RUN, GPU_RUN, cpu_rows, gpu_rows, mcu_rows, write

NO_SPACE = os.strerror(errno.ENOSPC)
OUTPUTS = ("results.md", "latency_vs_seq.png", "error.png", "roofline.png")


class FullDisk:
    """os.write as on a disk with `budget` bytes free: a short write where the space ends, then ENOSPC."""

    def __init__(self, budget: int):
        self.budget = budget
        self.real = os.write

    def __call__(self, fd: int, data: bytes) -> int:
        if self.budget <= 0:
            raise OSError(errno.ENOSPC, NO_SPACE)
        n = self.real(fd, bytes(data[:self.budget]))
        self.budget -= n
        return n


@pytest.fixture
def rendered(tmp_path: Path) -> Path:
    """A folder rendered once on a disk with room: every output has a previous copy."""
    render(write(tmp_path, cpu_rows() + gpu_rows() + mcu_rows(), [GPU_RUN, BENCH_RUN]))
    return tmp_path


def contents(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.mark.parametrize("budget", [0, 3000, 70_000])
def test_a_full_disk_keeps_every_previous_output_whole_and_names_what_failed(rendered, monkeypatch, budget):
    before = contents(rendered)
    monkeypatch.setattr(outputs.os, "write", FullDisk(budget))
    with pytest.raises(ReportIncomplete) as caught:
        render(rendered)
    monkeypatch.undo()
    after = contents(rendered)
    assert set(after) == set(before), "no temporary file is left, no output removed"
    assert after["results.csv"] == before["results.csv"] and after["runs.jsonl"] == before["runs.jsonl"]
    failed = [path.name for path, _ in caught.value.failed]
    assert failed and all(why == NO_SPACE for _, why in caught.value.failed)
    for name in failed:
        assert after[name] == before[name], f"{name}: the previous copy, whole"
    for path in caught.value.written:
        assert path.name not in failed
    assert caught.value.lines[0] == f"report: could not write {rendered / failed[0]}: {NO_SPACE}"
    if budget == 0:
        assert failed == ["latency_vs_seq.png", "error.png", "roofline.png", "results.md"]


def test_results_md_says_which_plot_could_not_be_written(tmp_path, monkeypatch):
    out = write(tmp_path, cpu_rows() + gpu_rows(), [GPU_RUN])
    real = outputs.replace_file

    def no_room_for_pngs(path: Path, data: bytes) -> None:
        if path.suffix == ".png":
            raise OSError(errno.ENOSPC, NO_SPACE)
        real(path, data)
    monkeypatch.setattr(outputs, "replace_file", no_room_for_pngs)
    monkeypatch.setattr("host.report.render.replace_file", no_room_for_pngs)
    with pytest.raises(ReportIncomplete) as caught:
        render(out)
    assert [p.name for p in caught.value.written] == ["results.md"]
    md = (out / "results.md").read_text()
    assert f"latency_vs_seq.png not drawn: could not be written ({NO_SPACE})." in md
    assert "](latency_vs_seq.png)" not in md and not list(out.glob("*.png"))


def test_the_cli_writes_what_fits_then_exits_1_with_one_line_per_output(rendered, monkeypatch, capsys):
    monkeypatch.setattr(outputs.os, "write", FullDisk(0))
    assert main([str(rendered)]) == 1
    printed = capsys.readouterr()
    assert printed.err.splitlines() == [f"kbench: report: could not write {rendered / name}: {NO_SPACE}"
                                        for name in OUTPUTS[1:] + OUTPUTS[:1]]
    assert printed.out == ""


def test_host_compare_keeps_its_rows_and_says_the_report_is_incomplete(tmp_path, monkeypatch, capsys):
    rows = cpu_rows()
    out = write(tmp_path, rows, [GPU_RUN])
    csv_before = (out / "results.csv").read_bytes()
    real = outputs.replace_file

    def no_room_for_the_error_plot(path: Path, data: bytes) -> None:
        if path.name == "error.png":
            raise OSError(errno.ENOSPC, NO_SPACE)
        real(path, data)
    monkeypatch.setattr("host.report.render.replace_file", no_room_for_the_error_plot)
    assert summarize_run(argparse.Namespace(out=out), rows, {}, 0) is False  # host.compare then exits 1
    printed = capsys.readouterr()
    assert printed.err == f"kbench: report: could not write {out / 'error.png'}: {NO_SPACE}\n"
    assert f"report incomplete; written: {out / 'results.md'}, {out / 'latency_vs_seq.png'}" in printed.out
    assert (out / "results.csv").read_bytes() == csv_before and not (out / "error.png").exists()


def test_a_folder_in_the_way_of_an_output_is_named_and_the_others_written(tmp_path):
    out = write(tmp_path, cpu_rows(), [GPU_RUN])
    (out / "error.png").mkdir()
    with pytest.raises(ReportIncomplete) as caught:
        render(out)
    assert [p.name for p, _ in caught.value.failed] == ["error.png"]
    assert (out / "results.md").is_file() and (out / "latency_vs_seq.png").is_file()
    assert not list(out.glob(".*.tmp"))


def test_an_output_keeps_the_permissions_of_the_file_it_replaces(rendered):
    os.chmod(rendered / "results.md", 0o640)
    render(rendered)
    assert (rendered / "results.md").stat().st_mode & 0o777 == 0o640


def test_host_compare_exits_1_when_its_report_is_incomplete_and_keeps_the_row(tmp_path, monkeypatch, capsys,
                                                                               keep_signals):
    from host.sweep import cli as compare

    def full_disk(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, NO_SPACE)
    monkeypatch.setattr("host.report.render.replace_file", full_disk)
    argv = ["--targets", "cpu", "--seq", "8", "--dim", "4", "--heads", "1", "--causal", "0", "--out", str(tmp_path)]
    assert compare.main(argv) == 1  # every row ok, but the report is not there: not a success
    assert f"kbench: report: could not write {tmp_path / 'results.md'}: {NO_SPACE}" in capsys.readouterr().err
    assert len(ResultsFile(tmp_path / "results.csv").read()) == 1
