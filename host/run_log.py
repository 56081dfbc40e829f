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
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(dataclasses.asdict(self), sort_keys=True) + "\n")


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
