"""runs.jsonl: one JSON line of metadata per run of a sweep (the command, the machine, the targets it could not use),
beside the rows of results.csv (host/results.py). Appended once per run; read leniently, since it describes the rows
and holds no measurement.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from host.errors import ResultsError
from host.safe_files import append_whole, cut_to


@dataclass(frozen=True)
class RunInfo:
    """One run's metadata, one JSON line in runs.jsonl: which command, on which machine, when."""

    run_id: str
    timestamp: str
    command: str
    git_rev: str
    host: str
    machine: dict = field(default_factory=dict)
    unavailable: dict = field(default_factory=dict)  # target name → why this run could not use it

    def append_to(self, path: Path | str) -> None:
        """Append this run as one line in one write, after ending the file on a whole line (`repair_log`)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        repair_log(path)
        append_whole(path, (json.dumps(dataclasses.asdict(self), sort_keys=True) + "\n").encode("utf-8"))


def repair_log(path: Path) -> None:
    """End runs.jsonl on a whole line, so the next record starts on its own: a last line that is a whole JSON record
    gets its newline; a torn one (a killed writer) is cut, in place (truncated, never rewritten)."""
    if not path.exists():
        return
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return
    body, newline, tail = data.rpartition(b"\n")
    try:
        json.loads(tail.decode("utf-8"))
        whole = True
    except (UnicodeDecodeError, ValueError, RecursionError):
        whole = False
    if whole:
        append_whole(path, b"\n")
    else:
        cut_to(path, len(body) + len(newline))


def read_runs(path: Path | str) -> list[RunInfo]:
    """Every run recorded in runs.jsonl (missing file: none). A line that is not a run (a half-written last line,
    garbage, bytes that are not UTF-8) is skipped: this log describes the rows, it holds no measurement."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    runs = []
    for line in data.splitlines():
        try:
            runs.append(RunInfo(**json.loads(line.decode("utf-8"))))
        except (UnicodeDecodeError, json.JSONDecodeError, TypeError):
            continue
    return runs
