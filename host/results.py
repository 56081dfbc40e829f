"""The one result record of every target, and its CSV file, appended one row at a time.

A `Result` is one measured configuration: identity (run, machine), problem, timing (and whether it was measured or
modelled), throughput, accuracy, target extras and status. It is validated on construction and immutable. An empty
cell means "does not apply"; a figure that applies but could not be measured is left empty *and* its reason is
written in the matching ``*_reason`` / ``message`` field, never a zero.

`ResultsFile` appends each row to results.csv as soon as it exists (flushed and fsynced), so an interrupted sweep
loses nothing, and answers which configurations are already present for ``--resume``. Run metadata (the command
line, machine details) goes once per run into runs.jsonl beside it (host/run_log.py).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Iterable, Iterator

from host.errors import ResultsError
from host.safe_files import append_whole, cut_to, sync_folder

# Schema history (bump SCHEMA_VERSION on any change of field names, meaning or units; add a line here):
#   1  2026-11-29  first schema: identity, problem, timing (+ median CI), throughput, accuracy, CPU counters,
#                  MCU extras, energy, device ceilings, status.
#   2  2026-11-30  status `wrong` (outside the derived tolerance, or not bit-exact: host/verdict.py); peak_source
#                  (where the ceilings come from: measured in the run, or a datasheet roof); sensors_source (whether
#                  temp_c and vdda_v were measured by the board's ADC or modelled by the twin). Version 1 files are
#                  read with those two columns empty.
#   3  2026-11-30  timing_source: where a row's timing (mean/p50/p99/min ms, cycles) comes from, "measured: <clock>"
#                  (wall clock, CUDA events, a board's DWT counter) or "modelled: <model>" (the twin's or the asic
#                  target's cycle model); required of every row with a timing figure. Version 1 and 2 rows are read
#                  with it empty and keep their own schema_version, which says the row never recorded it.
#   4  2026-12-01  worker: the Dask worker that measured the row in a cluster sweep (host.compare --cluster), by the
#                  name it registered with (python -m host.cluster worker); empty for a local sweep. Older rows are
#                  read with it empty, which is what they were: local.
SCHEMA_VERSION = 4
#: Columns each later version added, with the value older rows get for them when read.
ADDED_COLUMNS = {2: {"peak_source": "", "sensors_source": ""}, 3: {"timing_source": ""}, 4: {"worker": ""}}
#: The first word of a timing_source: how its figures were obtained.
TIMING_KINDS = ("measured", "modelled")
#: The figures timing_source describes: a row with any of them must say where they come from.
TIMING_FIELDS = ("p50_ms", "mean_ms", "p99_ms", "min_ms", "cycles")
_TIMING_FORMS = " or ".join(repr(f"{kind}: <how>") for kind in TIMING_KINDS)
_TIMING_SOURCE_SINCE = next(version for version, added in ADDED_COLUMNS.items() if "timing_source" in added)

STATUSES = ("ok", "wrong", "skipped", "oom", "error")
#: Statuses that make a sweep fail (exit 1) and that --resume measures again.
FAILED_STATUSES = ("wrong", "error")

#: Problem fields plus tile: two rows with equal keys measure the same thing (used by --resume).
CONFIG_FIELDS = ("target", "kernel", "dtype", "batch", "heads", "seq", "dim", "causal", "seed", "br", "bc")


@dataclass(frozen=True)
class Result:
    """One row of results.csv. Units are in the field names (ms, bytes, gbps, hz, c, v, j)."""

    # identity
    run_id: str
    timestamp: str
    git_rev: str
    host: str
    device: str
    # problem
    target: str
    kernel: str
    dtype: str
    batch: int
    heads: int
    seq: int
    dim: int
    causal: bool
    seed: int
    br: int | None = None
    bc: int | None = None
    # where in a cluster sweep: the Dask worker's name (its host and device are in host and device); "" when local
    worker: str = ""
    # status
    status: str = "ok"
    message: str = ""
    # timing (milliseconds); p50_ci_* is a 95 % bootstrap confidence interval of the median
    mean_ms: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    min_ms: float | None = None
    p50_ci_low_ms: float | None = None
    p50_ci_high_ms: float | None = None
    iters: int | None = None
    warmup: int | None = None
    timing_source: str = ""  # "measured: <clock>" or "modelled: <model>": TIMING_KINDS, then how
    # throughput
    gflops: float | None = None
    model_bytes: int | None = None
    gbps: float | None = None
    measured_bytes: int | None = None
    # the machine's own ceilings measured in the same run, for the roofline
    peak_gflops: float | None = None
    peak_gbps: float | None = None
    peak_source: str = ""  # "measured" in this run, or the datasheet figures of a roof (the MCU's)
    # accuracy against the float64 golden; bit_exact against host/q15.py for Q15 targets
    max_abs: float | None = None
    rel_l2: float | None = None
    bit_exact: bool | None = None
    # CPU counters (hardware, or simulated by cachegrind: see counters_source), or the reason they are missing
    llc_loads: int | None = None
    llc_misses: int | None = None
    instructions: int | None = None
    cpu_cycles: int | None = None
    ipc: float | None = None
    counters_source: str = ""
    counters_reason: str = ""
    # MCU extras
    cycles: int | None = None
    clock_hz: int | None = None
    temp_c: float | None = None
    vdda_v: float | None = None
    sensors_source: str = ""  # temp_c and vdda_v: "measured" (the board's ADC) or "modelled" (the twin)
    # energy
    energy_j: float | None = None
    energy_source: str = ""
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.schema_version not in range(1, SCHEMA_VERSION + 1):
            raise ResultsError(f"schema_version={self.schema_version!r} is unknown; allowed: 1..{SCHEMA_VERSION} "
                               f"(this kbench writes {SCHEMA_VERSION})")
        if self.status not in STATUSES:
            raise ResultsError(f"status={self.status!r} is unknown; allowed: {', '.join(STATUSES)}")
        if self.status != "ok" and not self.message:
            raise ResultsError(f"a row with status={self.status!r} needs a message saying why")
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            kind = _KINDS[f.name]
            if kind is bool and not isinstance(value, bool):
                raise ResultsError(f"{f.name}={value!r} is not a boolean")
            if kind in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ResultsError(f"{f.name}={value!r} is not a number")
            if kind in (int, float) and value < 0 and f.name not in _SIGNED:
                raise ResultsError(f"{f.name}={value!r} is negative; allowed: >= 0")
            if kind is str and not isinstance(value, str):
                raise ResultsError(f"{f.name}={value!r} is not a string")
        if self.p50_ms is not None and self.min_ms is not None and self.min_ms > self.p50_ms:
            raise ResultsError(f"min_ms={self.min_ms} exceeds p50_ms={self.p50_ms}")
        self._check_timing_source()

    def _check_timing_source(self) -> None:
        """timing_source is empty or 'measured: <how>' / 'modelled: <how>', and present on a row of this schema
        version that has a timing figure (older rows never recorded it)."""
        if self.timing_source and timing_kind(self.timing_source) is None:
            raise ResultsError(f"timing_source={self.timing_source!r} is not allowed; allowed: empty, or "
                               f"{_TIMING_FORMS}")
        timed = next((name for name in TIMING_FIELDS if getattr(self, name) is not None), None)
        if timed is not None and not self.timing_source and self.schema_version >= _TIMING_SOURCE_SINCE:
            raise ResultsError(f"a row with {timed}={getattr(self, timed)!r} needs a timing_source saying where its "
                               f"timing comes from: {_TIMING_FORMS}")

    def config_key(self) -> tuple:
        """What identifies the measured configuration (not the run): equal keys are the same experiment."""
        return tuple(getattr(self, name) for name in CONFIG_FIELDS)

    def to_row(self) -> dict[str, str]:
        """The CSV cells: empty for None, 0/1 for booleans, repr-exact floats."""
        return {f.name: _format(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_row(cls, row: dict[str, str]) -> "Result":
        """Parse one CSV row written by `to_row`; ResultsError names the bad cell."""
        missing = [name for name in FIELD_NAMES if name not in row]
        if missing:
            raise ResultsError(f"results row lacks the columns {', '.join(missing)}")
        values = {}
        for name in FIELD_NAMES:
            try:
                values[name] = _parse(_KINDS[name], row[name])
            except ValueError:
                raise ResultsError(f"cell {name}={row[name]!r} is not a {_KINDS[name].__name__}") from None
        return cls(**values)

    def replace(self, **changes: object) -> "Result":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


def timing_kind(source: str) -> str | None:
    """'measured' or 'modelled' for a timing_source of the form '<kind>: <how>'; None for anything else."""
    kind, colon, how = source.partition(": ")
    return kind if colon and kind in TIMING_KINDS and how.strip() else None


FIELD_NAMES = tuple(f.name for f in fields(Result))
_SIGNED = {"temp_c"}
_KINDS: dict[str, type] = {}
for _f in fields(Result):
    _type = str(_f.type)
    _KINDS[_f.name] = next(t for t in (bool, int, float, str) if _type.startswith(t.__name__))


def _upgrade(row: dict[str, str], where: str) -> dict[str, str]:
    """A row of an older schema version in this version's columns (ADDED_COLUMNS, with the values older rows get);
    it keeps its own schema_version, so the row says which columns it never recorded. A newer or unknown version is
    refused, naming `where` (file:line)."""
    text = row.get("schema_version")
    known = {str(version) for version in range(1, SCHEMA_VERSION + 1)}
    if text not in known:
        raise ResultsError(f"{where}: a row of schema version {text!r}; this kbench reads versions 1.."
                           f"{SCHEMA_VERSION}: not a results file this kbench can read")
    row = dict(row)
    for version in range(int(text) + 1, SCHEMA_VERSION + 1):
        for name, value in ADDED_COLUMNS.get(version, {}).items():
            row.setdefault(name, value)
    return row


def _is_header(line: str) -> bool:
    """Whether a line is the header of some schema version (it names schema_version and every field of version 1)."""
    names = line.strip().split(",")
    version1 = set(FIELD_NAMES) - {name for added in ADDED_COLUMNS.values() for name in added}
    return "schema_version" in names and version1 <= set(names)


def _decode(data: bytes, path: Path) -> str:
    """The file's text; ResultsError naming the line of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ResultsError(f"{path}:{line}: byte 0x{data[exc.start]:02x} is not UTF-8 text: not a kbench results "
                           "file") from None


def _format(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(float(value))  # a numpy float64 is a float too; its own repr is "np.float64(...)"
    return str(value)


def _parse(kind: type, text: str) -> object:
    if kind is str:
        return text
    if text == "":
        return None
    if kind is bool:
        if text not in ("0", "1"):
            raise ValueError(text)
        return text == "1"
    if kind is int:
        return int(text)
    return float(text)


class ResultsFile:
    """results.csv in an output folder: read every row, append one row at a time, list present configurations."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.torn_line: int | None = None  # the line of a torn last row the latest read() ignored

    def read(self) -> list[Result]:
        """Every row. A last line without its newline (a writer killed mid-row) is kept when it is a whole row and
        ignored when it is torn. Anything else that is not a results row is a ResultsError naming the file, the line
        and what is wrong: a file is never read as emptier than it is."""
        self.torn_line = None
        if not self.path.exists():
            return []
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise ResultsError(f"{self.path}: cannot read it: {exc.strerror or exc}") from None
        text = _decode(data, self.path)
        if not text:
            return []
        body, _, tail = text.rpartition("\n")
        if not body and not _is_header(tail):
            raise ResultsError(f"{self.path}:1: no complete line, and not a results header "
                               f"({tail[:60]!r}): not a kbench results file")
        if not body:
            return []  # a header alone, its newline never written
        rows = self._parse(body + "\n")
        if tail:
            try:
                rows += self._parse(body.split("\n", 1)[0] + "\n" + tail + "\n", first_line=body.count("\n") + 1)
            except ResultsError:
                self.torn_line = body.count("\n") + 2  # a torn last row: the next append cuts it
        return rows

    def _parse(self, text: str, first_line: int = 1) -> list[Result]:
        """The rows of `text` (a header line, then rows); line numbers in errors count from first_line's row."""
        reader = csv.reader(io.StringIO(text))
        header = next(reader, None)
        if header is None:
            return []
        if not _is_header(",".join(header)):
            raise ResultsError(f"{self.path}:1: not a kbench results header (it starts {','.join(header[:4])!r}), so "
                               "not a kbench results file")
        rows = []
        for cells in reader:
            line = reader.line_num + first_line - 1
            where = f"{self.path}:{line}"
            if len(cells) != len(header):
                raise ResultsError(f"{where}: {len(cells)} cells where the header has {len(header)}: not a whole "
                                   "results row")
            try:
                rows.append(Result.from_row(_upgrade(dict(zip(header, cells)), where)))
            except ResultsError as exc:
                message = str(exc)
                raise ResultsError(message if message.startswith(where) else f"{where}: {message}") from None
        return rows

    def repair(self) -> None:
        """End the file on a whole row, so the next append starts on a fresh line: a last row whose newline was not
        written gets it; a torn last row (a killed writer) is cut. Crash-safe: the file is only ever truncated to the
        end of its last whole line or appended to, never rewritten, so a kill during a repair loses no whole row."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if not data or data.endswith(b"\n"):
            return
        body, _, tail = data.rpartition(b"\n")
        header = data.split(b"\n", 1)[0]
        try:
            whole = bool(body) and bool(self._parse_bytes(header + b"\n" + tail + b"\n"))
        except ResultsError:
            whole = False
        if whole or (not body and _is_header(_decode(data, self.path))):  # a whole row, or a header alone
            append_whole(self.path, b"\n")
        elif body:
            cut_to(self.path, len(body) + 1)

    def _parse_bytes(self, data: bytes) -> list[Result]:
        return self._parse(_decode(data, self.path))

    def rewrite(self, results: Iterable[Result]) -> None:
        """Replace the file's rows atomically (write beside it, then rename)."""
        tmp = self.path.with_suffix(".csv.tmp")
        with tmp.open("w", encoding="utf-8", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=FIELD_NAMES, lineterminator="\n")
            writer.writeheader()
            for result in results:
                writer.writerow(result.to_row())
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)
        sync_folder(self.path.parent)

    def append(self, result: Result) -> None:
        """Append one row (and the header if the file is new) in one write of whole bytes, flushed to disk. A file
        written by an older schema version is upgraded first (atomically, `rewrite`), so its columns match; a file
        with columns this schema does not know is refused (an upgrade would drop them). A full disk cuts the file back
        to its last whole row and raises ResultsError (`append_whole`)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repair()
        header = self._header()
        unknown = self.unknown_columns(header)
        if unknown:
            raise ResultsError(f"{self.path}: columns this kbench does not know ({', '.join(unknown)}) would be "
                               "dropped by an append: move them to another file")
        if header not in (None, list(FIELD_NAMES)):
            self.rewrite(self.read())
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=FIELD_NAMES, lineterminator="\n")
        if not self.path.exists() or self.path.stat().st_size == 0:
            writer.writeheader()
        writer.writerow(result.to_row())
        append_whole(self.path, buffer.getvalue().encode("utf-8"))

    def unknown_columns(self, header: list[str] | None = None) -> list[str]:
        """The columns of the file's header (or of `header`) that no schema version has: a user's own columns."""
        header = self._header() if header is None else header
        return [name for name in header or [] if name not in FIELD_NAMES]

    def _header(self) -> list[str] | None:
        """The file's column names; None when it is missing or empty."""
        if not self.path.exists():
            return None
        with self.path.open(encoding="utf-8", newline="") as f:
            return next(csv.reader(f), None)

    def __iter__(self) -> Iterator[Result]:
        return iter(self.read())
