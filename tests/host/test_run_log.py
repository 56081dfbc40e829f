"""host/run_log.py against hostile runs.jsonl lines (issue 28): JSON nested too deep for the parser, fields of the
wrong type, text that cannot be written as UTF-8; each is skipped with a line saying why, never a traceback, and
the report renders beside them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from host.report.render import render
from host.results import Result
from host.results_file import ResultsFile
from host.run_log import MAX_MACHINE_DEPTH, RunInfo, read_run_log, read_runs

RUN = RunInfo(run_id="r1", timestamp="2026-12-01T10:00:00Z", command="python -m host.compare", git_rev="abc",
              host="box", machine={"cpus": 2, "gpu": {"name": "H200"}}, unavailable={"gpu": "no CuPy"})
GOOD = json.dumps(dataclasses.asdict(RUN))
HOSTILE = {
    "brackets": ("[" * 100_000 + "]" * 100_000, "nested too deep to parse"),
    "host is an object": (json.dumps(dataclasses.asdict(RUN) | {"host": {}}), "'host' is a dict, not a str"),
    "run_id is a number": (json.dumps(dataclasses.asdict(RUN) | {"run_id": 7}), "'run_id' is a int, not a str"),
    "command is null": (json.dumps(dataclasses.asdict(RUN) | {"command": None}), "'command' is a NoneType"),
    "machine is a list": (json.dumps(dataclasses.asdict(RUN) | {"machine": [1]}), "'machine' is a list, not a dict"),
    "a reason is a number": (json.dumps(dataclasses.asdict(RUN) | {"unavailable": {"gpu": 3}}),
                             "'unavailable' holds a reason that is not a string"),
    "machine nested deep": (json.dumps(dataclasses.asdict(RUN) | {"machine": {"x": json.loads("[" * 200 + "]" * 200)}}),
                            f"nested deeper than {MAX_MACHINE_DEPTH}"),
    "no timestamp": (json.dumps({k: v for k, v in dataclasses.asdict(RUN).items() if k != "timestamp"}),
                     "no 'timestamp'"),
    "a lone surrogate": ('{"run_id": "r\\ud800", "timestamp": "t", "command": "c", "git_rev": "g", "host": "h"}',
                         "cannot be written as UTF-8"),
    "a list": ("[1, 2]", "a list, not a JSON object"),
    "a huge integer": ('{"run_id": ' + "9" * 5000 + "}", "not JSON"),
    "not UTF-8": (b"\xff\xfe".decode("latin-1"), "not UTF-8"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_line_is_skipped_with_its_reason(tmp_path: Path, name: str):
    line, why = HOSTILE[name]
    path = tmp_path / "runs.jsonl"
    path.write_bytes(GOOD.encode() + b"\n" + line.encode("latin-1" if name == "not UTF-8" else "utf-8") + b"\n"
                     + GOOD.replace('"r1"', '"r2"').encode() + b"\n")
    log = read_run_log(path)
    assert [run.run_id for run in log.runs] == ["r1", "r2"]
    assert len(log.skipped) == 1 and log.skipped[0].startswith("line 2: ") and why in log.skipped[0], log.skipped


def test_a_field_this_kbench_does_not_know_does_not_hide_the_run(tmp_path: Path):
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(dataclasses.asdict(RUN) | {"later_field": [1]}) + "\n")
    assert read_runs(path) == [RUN]


def test_a_folder_with_hostile_run_lines_renders_and_says_what_it_skipped(tmp_path: Path):
    ResultsFile(tmp_path / "results.csv").append(
        Result(run_id="r1", timestamp="t", git_rev="abc", host="box", device="cpu", target="cpu", kernel="reference",
               dtype="float32", batch=1, heads=1, seq=17, dim=59, causal=False, seed=0))
    lines = [GOOD] + [line for name, (line, _) in HOSTILE.items() if name != "not UTF-8"]
    (tmp_path / "runs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    render(tmp_path)
    md = (tmp_path / "results.md").read_text()
    assert "**r1**" in md and "host `box`" in md
    assert f"{len(lines) - 1} line(s) of runs.jsonl are not runs and were skipped" in md
    assert "line 2: nested too deep to parse" in md
