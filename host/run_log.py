"""runs.jsonl: one JSON line of metadata per run of a sweep (the command, the machine, the targets it could not use),
beside the rows of results.csv (host/results.py). Appended once per run; read leniently, since it describes the rows
and holds no measurement: a line that is not a run of the right field types (torn, garbage, nested too deep for the
JSON parser, `"host": {}`) is skipped, and `read_run_log` says which lines and why.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from host.errors import ResultsError
from host.safe_files import append_whole, cut_to


#: The fields of a run that are JSON objects; every other field is a string.
_DICT_FIELDS = ("machine", "unavailable")
#: How deeply `machine`'s values may nest (a machine's details are a few levels at most; the report writes them out).
MAX_MACHINE_DEPTH = 32


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

    @classmethod
    def from_record(cls, record: object) -> "RunInfo":
        """The run a decoded runs.jsonl line holds; ResultsError naming the field whose value has the wrong type (the
        report does string operations on the text fields and walks `machine`). Keys this kbench does not know are
        ignored: a later version's field does not hide the run."""
        if not isinstance(record, dict):
            raise ResultsError(f"a {type(record).__name__}, not a JSON object")
        values = {}
        for f in dataclasses.fields(cls):
            if f.name not in record:
                if f.default_factory is dataclasses.MISSING:
                    raise ResultsError(f"no {f.name!r}")
                continue
            value = record[f.name]
            wanted = dict if f.name in _DICT_FIELDS else str
            if not isinstance(value, wanted):
                raise ResultsError(f"{f.name!r} is a {type(value).__name__}, not a {wanted.__name__}")
            values[f.name] = value
        if not all(isinstance(reason, str) for reason in values.get("unavailable", {}).values()):
            raise ResultsError("'unavailable' holds a reason that is not a string")
        if _depth(values.get("machine", {})) > MAX_MACHINE_DEPTH:
            raise ResultsError(f"'machine' is nested deeper than {MAX_MACHINE_DEPTH}")
        try:
            json.dumps(values, ensure_ascii=False).encode("utf-8")  # what results.md will write must be UTF-8
        except UnicodeEncodeError as exc:
            raise ResultsError(f"its text cannot be written as UTF-8 ({exc.reason})") from None
        return cls(**values)

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


class RunLog(NamedTuple):
    """What runs.jsonl holds: its runs in file order, and a line of text for each line that is not a run."""

    runs: list[RunInfo]
    skipped: list[str]


def read_run_log(path: Path | str) -> RunLog:
    """Every run recorded in runs.jsonl (missing file: none), and 'line 3: 'host' is a dict, not a str' for each line
    that is not a run (a half-written last line, garbage, bytes that are not UTF-8, JSON nested too deep to parse,
    fields of the wrong type): those are skipped, since this log describes the rows and holds no measurement. Blank
    lines are neither."""
    path = Path(path)
    if not path.exists():
        return RunLog([], [])
    if not path.is_file():  # a FIFO would block the read for ever, a folder cannot be read
        raise ResultsError(f"{path} is not a file; move it aside (a sweep writes its own)")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    runs, skipped = [], []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            runs.append(RunInfo.from_record(json.loads(line.decode("utf-8"))))
        except UnicodeDecodeError as exc:
            skipped.append(f"line {number}: byte 0x{line[exc.start]:02x} is not UTF-8")
        except RecursionError:
            skipped.append(f"line {number}: nested too deep to parse")
        except ValueError as exc:  # json.JSONDecodeError, or an integer of more digits than int() takes
            skipped.append(f"line {number}: not JSON ({str(exc)[:80]})")
        except ResultsError as exc:
            skipped.append(f"line {number}: not a run: {exc}")
    return RunLog(runs, skipped)


def read_runs(path: Path | str) -> list[RunInfo]:
    """Every run recorded in runs.jsonl (missing file: none); lines that are not runs are skipped (`read_run_log`
    says which)."""
    return read_run_log(path).runs


def _depth(value: object) -> int:
    """How deeply JSON lists and objects nest in `value` (0 for a scalar), counted without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest
