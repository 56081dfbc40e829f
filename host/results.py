"""The one result record of every target, and how one row of results.csv turns into it and back.

A `Result` is one measured configuration: identity (run, machine), problem, timing (and whether it was measured or
modelled), throughput, accuracy, target extras and status. It is validated on construction and immutable. An empty
cell means "does not apply"; a figure that applies but could not be measured is left empty *and* its reason is
written in the matching ``*_reason`` / ``message`` field, never a zero.

`Result.to_row` gives a row's cells (one line: a line break inside a text is written as " | "); `RowReader` reads
the rows under one header of any schema version. The file itself, streamed, appended to one row at a time and
repaired after a kill, is host/results_file.py; run metadata goes once per run into runs.jsonl (host/run_log.py).
"""

from __future__ import annotations

import dataclasses
import math
import operator
from dataclasses import dataclass, fields

from host.errors import ResultsError
from host.problem import DTYPE_BYTES, LIMITS
from host.tolerance import UNIT_ROUNDOFF, rel_l2_limit

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
#   5  2026-12-03  numerics: the numeric contract a Q15 row was computed under, "q15 v2" (docs/q15.md; its Bc is the
#                  row's bc); empty for float rows. Older rows are read with it empty: their Q15 rows were contract
#                  v1's, and --resume measures them again (host/sweep/resume.py).
#   6  2026-12-03  q_len and kv_heads: the problem's queries per head and K/V heads where they are not seq and heads
#                  (decode, grouped-query attention); empty for self-attention with a K/V head per query head, which
#                  is what every older row measured. A row is refused (written or read) whose q_len is not below its
#                  seq or whose kv_heads is not a divisor of heads below it: the problem stores q_len = seq and
#                  kv_heads = heads as empty, so one square problem has one spelling and one configuration key.
#   7  2026-12-03  workload: the named workload (host/workloads.toml) a row was measured for, by host.compare
#                  --workload NAME; empty for a row of the shape options. Part of a row's configuration (two
#                  workloads of one shape are two experiments, each grouped under its name in results.md). Older
#                  rows are read with it empty: version 6 did not record it.
SCHEMA_VERSION = 7
#: Columns each later version added, with the value older rows get for them when read.
ADDED_COLUMNS = {2: {"peak_source": "", "sensors_source": ""}, 3: {"timing_source": ""}, 4: {"worker": ""},
                 5: {"numerics": ""}, 6: {"q_len": "", "kv_heads": ""}, 7: {"workload": ""}}
#: The first word of a timing_source: how its figures were obtained.
TIMING_KINDS = ("measured", "modelled")
#: The figures timing_source describes: a row with any of them must say where they come from.
TIMING_FIELDS = ("p50_ms", "mean_ms", "p99_ms", "min_ms", "cycles")
_TIMING_FORMS = " or ".join(repr(f"{kind}: <how>") for kind in TIMING_KINDS)
_TIMING_SOURCE_SINCE = next(version for version, added in ADDED_COLUMNS.items() if "timing_source" in added)

STATUSES = ("ok", "wrong", "skipped", "oom", "error")
#: Statuses that make a sweep fail (exit 1).
FAILED_STATUSES = ("wrong", "error")
#: Statuses whose rows --resume measures again, dropping the old row once the new one is on disk: the failed ones,
#: and skipped rows, whose reason may no longer hold (a target that gained the shape, a device that gained the dtype).
#: oom rows count as done: the same machine runs out of memory again (another device's rows are measured again).
REMEASURED_STATUSES = FAILED_STATUSES + ("skipped",)

#: Problem fields plus tile: two rows with equal keys measure the same thing (used by --resume).
CONFIG_FIELDS = ("target", "kernel", "dtype", "batch", "heads", "seq", "dim", "causal", "seed", "q_len", "kv_heads",
                 "workload", "br", "bc")


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
    q_len: int | None = None  # queries per head where not seq (decode, a prefill chunk); None: seq
    kv_heads: int | None = None  # K/V heads where not heads (grouped-query attention); None: heads
    workload: str = ""  # the named workload (host/workloads.toml) the row was measured for; "" for the shape options
    br: int | None = None
    bc: int | None = None
    numerics: str = ""  # the numeric contract of a Q15 row ("q15 v2", host/q15.py NUMERICS); "" for float rows
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
        self._check_each_field()
        self._check_record()

    def _check_record(self) -> None:
        """What ties fields together: the problem's shape, a minimum above the median, the timing_source (after the
        fields' own checks)."""
        self._check_problem()
        if self.q_len is not None or self.kv_heads is not None:
            self._check_shape()
        if self.status == "ok" and self.p50_ms is not None and self.p50_ms <= 0:
            raise ResultsError(f"p50_ms={self.p50_ms!r} in a row of status 'ok'; allowed: > 0 (a timing of nothing "
                               "is no measurement)")
        if self.p50_ms is not None and self.min_ms is not None and self.min_ms > self.p50_ms:
            raise ResultsError(f"min_ms={self.min_ms} exceeds p50_ms={self.p50_ms}")
        if self.status == "ok":
            self._check_ok_verdict()
        self._check_timing_source()

    def _check_ok_verdict(self) -> None:
        """An `ok` row's own error figures inside its verdict (host/verdict.py): a float row's rel-L2 within the
        tolerance of its dtype, d and N (host/tolerance.py), a Q15 row bit-exact where it was compared. Such a row
        outside them was not judged `ok` by kbench (a hand-edited file): refused, never reported or kept as done."""
        if self.dtype in UNIT_ROUNDOFF and self.rel_l2 is not None and None not in (self.dim, self.seq):
            limit = rel_l2_limit(self.dtype, self.dim, self.seq)
            if not self.rel_l2 <= limit:  # NaN compares false
                raise ResultsError(f"rel_l2={self.rel_l2!r} in a row of status 'ok'; allowed: at most {limit:.3g} "
                                   f"({self.dtype}, d {self.dim}, N {self.seq}: host/verdict.py's tolerance; such a "
                                   "row is wrong)")
        if self.dtype == "q15" and self.bit_exact is False:
            raise ResultsError("bit_exact=False in a q15 row of status 'ok'; allowed: True (the Q15 contract is "
                               "bit-exact: such a row is wrong)")

    def _check_problem(self) -> None:
        """The problem's batch, heads, seq, dim and seed within host/problem.py's LIMITS, its dtype one of
        DTYPE_BYTES: no target measures another problem, so a row that names one was not written by kbench."""
        for name, (low, high) in LIMITS.items():
            value = getattr(self, name)
            if value is not None and not low <= value <= high:  # an empty cell is the field checks' to judge
                raise ResultsError(f"{name}={value!r} is out of range; allowed: {low}..{high} (host/problem.py "
                                   "LIMITS)")
        if self.dtype not in DTYPE_BYTES:
            raise ResultsError(f"dtype={self.dtype!r} is unknown; allowed: {', '.join(DTYPE_BYTES)}")

    def _check_shape(self) -> None:
        """q_len and kv_heads as AttentionProblem stores them: q_len in 1..seq − 1 (q_len = seq is written empty),
        kv_heads a divisor of heads below it (kv_heads = heads is written empty)."""
        seq, q_len, heads, kv_heads = self.seq, self.q_len, self.heads, self.kv_heads
        if q_len is not None and seq is not None and not 1 <= q_len < seq:
            allowed = f"1..{seq - 1}, or empty" if seq > 1 else "empty"
            raise ResultsError(f"q_len={q_len} with seq={seq}; allowed: {allowed} (q_len = seq, self-attention, is "
                               "written empty)")
        if kv_heads is not None and heads is not None and not (1 <= kv_heads < heads and heads % kv_heads == 0):
            divisors = [d for d in range(1, heads) if heads % d == 0]
            allowed = f"{', '.join(map(str, divisors))} (a divisor of heads), or empty" if divisors else "empty"
            raise ResultsError(f"kv_heads={kv_heads} with heads={heads}; allowed: {allowed} (kv_heads = heads is "
                               "written empty)")

    def _check_each_field(self) -> None:
        """Each field's kind and range: ResultsError naming the first bad value. A value of a related type is
        allowed (an int for a float, a numpy float); the common case, a row read from a file, is the quick path."""
        values = self.__dict__
        for name, kind, signed in _CHECKS:
            value = values[name]
            if value is None:
                continue
            if type(value) is not kind:
                _check_kind(name, kind, value)
            if kind is str:
                if "\x00" in value:  # a NUL carried into results.md and every plot's legend
                    raise ResultsError(f"{name}={value!r} holds a NUL byte; allowed: text without one")
                continue
            if kind is bool:
                continue
            if kind is float and self.status == "ok" and not math.isfinite(value):
                raise ResultsError(f"{name}={value!r} in a row of status 'ok'; allowed: a finite number (a wrong "
                                   "row keeps what it measured, an ok row cannot have measured that)")
            if value < 0 and not signed:
                raise ResultsError(f"{name}={value!r} is negative; allowed: >= 0")
            if kind is int and value > INT_MAX:
                raise ResultsError(f"{name}={value!r} is out of range; allowed: 0..{INT_MAX} (int64)")

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
        """Parse one CSV row written by `to_row` (a mapping of column names to cells, any schema version this
        kbench reads); ResultsError names the bad cell."""
        return RowReader(list(row)).result(list(row.values()))

    def replace(self, **changes: object) -> "Result":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


def untiled_key(row: Result) -> tuple:
    """A row's configuration without its tile (host.compare runs each kernel with the tile its target chooses): a
    later row of the same key measures that configuration again (--resume, and the report's count)."""
    return tuple(None if name in ("br", "bc") else value for name, value in zip(CONFIG_FIELDS, row.config_key()))


def timing_kind(source: str) -> str | None:
    """'measured' or 'modelled' for a timing_source of the form '<kind>: <how>'; None for anything else."""
    kind, colon, how = source.partition(": ")
    return kind if colon and kind in TIMING_KINDS and how.strip() else None


FIELD_NAMES = tuple(f.name for f in fields(Result))
#: The largest integer a cell may hold: int64, what numpy, pandas and every consumer of the CSV can represent.
INT_MAX = 2**63 - 1
_SIGNED = {"temp_c"}
_KINDS: dict[str, type] = {}
for _f in fields(Result):
    _type = str(_f.type)
    _KINDS[_f.name] = next(t for t in (bool, int, float, str) if _type.startswith(t.__name__))
#: (name, kind, may be negative) for every field, in order: what __post_init__ checks.
_CHECKS = tuple((name, _KINDS[name], name in _SIGNED) for name in FIELD_NAMES)


def _check_kind(name: str, kind: type, value: object) -> None:
    """A value whose type is not exactly its field's kind: allowed where it is one in substance (an int for a float,
    a numpy number); else ResultsError naming the field."""
    if kind is bool and not isinstance(value, bool):
        raise ResultsError(f"{name}={value!r} is not a boolean")
    if kind in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ResultsError(f"{name}={value!r} is not a number")
    if kind is str and not isinstance(value, str):
        raise ResultsError(f"{name}={value!r} is not a string")


class RowReader:
    """Reads the rows under one CSV header into Results: each field's column is found once per header, and a row of
    an older schema version gets the values older rows get for the columns added since (ADDED_COLUMNS); it keeps its
    own schema_version, so the row says which columns it never recorded. A newer or unknown version, a cell of the
    wrong kind and a missing column are ResultsErrors naming the cell."""

    def __init__(self, header: list[str]):
        self.header = header
        repeated = sorted({name for name in header if header.count(name) > 1})
        if repeated:  # which copy is the row's value cannot be told: refused, never the last one silently
            raise ResultsError(f"the header names the column(s) {', '.join(repeated)} more than once: not a results "
                               "file kbench wrote (one column a field)")
        column = {name: index for index, name in enumerate(header)}
        self._version_column = column.get("schema_version")
        absent = [name for name in FIELD_NAMES if name not in column]
        # A field the header lacks reads from a cell appended after the row's own: its version's value for it.
        where = {**column, **{name: len(header) + offset for offset, name in enumerate(absent)}}
        self._absent = {version: [added.get(name) for name in absent] for version, added in _ADDED_SINCE.items()}
        self._groups = []  # (kind, may be negative, field names, a getter of their cells): one comprehension each
        for kind, signed in ((str, False), (bool, False), (int, False), (float, False), (float, True)):
            names = [name for name in FIELD_NAMES if _KINDS[name] is kind and (name in _SIGNED) == signed]
            getter = operator.itemgetter(*[where[name] for name in names])
            self._groups.append((kind, signed, names, getter if len(names) > 1 else
                                 lambda cells, g=getter: (g(cells),)))

    def result(self, cells: list[str]) -> Result:
        """The Result of one row's cells (as many as the header has)."""
        if len(cells) != len(self.header):
            raise ResultsError(f"{len(cells)} cells where the header has {len(self.header)}: not a whole results "
                               "row")
        version = cells[self._version_column] if self._version_column is not None else None
        extra = self._absent.get(version)
        if extra is None:
            raise ResultsError(f"a row of schema version {version!r}; this kbench reads versions 1..{SCHEMA_VERSION}"
                               ": not a results file this kbench can read")
        if extra:
            if None in extra:
                missing = [name for name in FIELD_NAMES if name not in self.header and name not in
                           _ADDED_SINCE[version]]
                raise ResultsError(f"results row lacks the columns {', '.join(missing)}")
            cells = cells + extra
        values = {}
        plain = True  # every number within its field's range (and an ok row's floats finite): checked by kind here
        for kind, signed, names, getter in self._groups:
            texts = getter(cells)
            try:
                if kind is str:
                    values.update(zip(names, texts))
                    continue
                if kind is bool:
                    values.update(zip(names, [_BOOLS[text] for text in texts]))
                    continue
                numbers = [kind(text) if text else None for text in texts]
            except (ValueError, KeyError):
                name, text = next((name, text) for name, text in zip(names, texts) if not _parses(kind, text))
                raise ResultsError(f"cell {name}={text!r} is not a {kind.__name__}") from None
            values.update(zip(names, numbers))
            present = [number for number in numbers if number is not None]
            if present and plain:
                if kind is int:
                    plain = min(present) >= 0 and max(present) <= INT_MAX
                else:
                    plain = ((signed or min(present) >= 0)
                             and (values.get("status") != "ok" or all(map(math.isfinite, present))))
        # Result(**values) by another road, 3x faster for a million rows: every field is set (a frozen dataclass
        # without slots keeps its fields in __dict__), then validated as __post_init__ does, its per-field loop
        # replaced by the checks by kind above; a row they do not pass goes through __post_init__, which names the cell.
        result = object.__new__(Result)
        result.__dict__.update(values)
        status = values["status"]
        if plain and values["schema_version"] in _VERSIONS and (status == "ok" or status in STATUSES
                                                                 and values["message"]):
            result._check_record()
        else:
            result.__post_init__()
        return result


_BOOLS = {"": None, "0": False, "1": True}
_VERSIONS = frozenset(range(1, SCHEMA_VERSION + 1))


def _parses(kind: type, text: str) -> bool:
    try:
        _parse(kind, text)
    except ValueError:
        return False
    return True


#: For each schema version's text, the columns added after it with the values its rows get for them.
_ADDED_SINCE = {str(version): {name: value for later in range(version + 1, SCHEMA_VERSION + 1)
                               for name, value in ADDED_COLUMNS.get(later, {}).items()}
                for version in range(1, SCHEMA_VERSION + 1)}
_VERSION1_FIELDS = frozenset(FIELD_NAMES) - {name for added in ADDED_COLUMNS.values() for name in added}


def is_header(cells: list[str]) -> bool:
    """Whether a CSV line's cells are the header of some schema version (schema_version and every field of
    version 1)."""
    return "schema_version" in cells and set(cells) >= _VERSION1_FIELDS


def _format(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(float(value))  # a numpy float64 is a float too; its own repr is "np.float64(...)"
    if isinstance(value, str):
        return value.replace("\r\n", " | ").replace("\n", " | ").replace("\r", " | ")  # a row is one line
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
