"""One pass over result rows gathering what results.md and the plots need, so that a results.csv of any length is
rendered from a stream (host/results_file.py `ResultsFile.rows`) without holding it: the rows themselves are kept only
while there are at most SUMMARY_ROWS of them (results.md then lists every one); past that, results.md summarises and
the plots draw one point per configuration and sequence length, from what the digest gathered on the way.

Per row it costs a few counter updates and, for rows with figures to plot, three appends to typed arrays (8 bytes a
figure): a million rows are digested in about a second on top of reading them, in tens of megabytes.
Layer L3: it imports only host.results and host.report.common.
"""

from __future__ import annotations

import statistics
import sys
from array import array
from collections import Counter
from typing import Callable, Iterable

from host.report.common import SUMMARY_ROWS
from host.results import REMEASURED_STATUSES, Result, untiled_key

#: Rows that have figures worth plotting: ok rows, and wrong rows (shown only on error.png, ringed in red).
PLOTTED_STATUSES = ("ok", "wrong")
#: Above SUMMARY_ROWS rows, how many wrong, skipped and failed rows results.md lists (the rest are counted).
NOT_OK_LISTED = 50
#: A plotted point's identity apart from its sequence length: the series fields, device, tile, roof source, status.
POINT_FIELDS = ("target", "kernel", "dtype", "dim", "heads", "batch", "causal", "host", "device", "br", "bc",
                "numerics", "q_len", "kv_heads", "workload", "peak_source", "status")


#: Rows of one table are sorted by these problem fields, then by tile.
SORT_FIELDS = ("dtype", "batch", "heads", "kv_heads", "dim", "causal", "seq", "q_len", "br", "bc")


def row_sort_key(r: Result) -> tuple:
    """SORT_FIELDS in order, an absent tile after any present one; then run and host, for a stable order."""
    values = (getattr(r, name) for name in SORT_FIELDS)
    return tuple((v is None, 0 if v is None else v) for v in values) + (r.run_id, r.host)


def not_ok_key(r: Result) -> tuple:
    """The order the rows that are not ok are listed in: by target and kernel, then as a table sorts its rows."""
    return (r.target, r.kernel) + row_sort_key(r)


class Group:
    """What the summary says of one target/kernel/dtype (of one workload, where rows name one): rows by status,
    hosts, the ranges of N, d and H, the GFLOP/s of its ok rows, its worst errors."""

    __slots__ = ("statuses", "seq", "dim", "heads", "gflops", "rel_l2", "max_abs", "hosts")

    def __init__(self) -> None:
        self.statuses: Counter = Counter()
        self.seq: list[int] = []  # [lowest, highest], as for dim and heads
        self.dim: list[int] = []
        self.heads: list[int] = []
        self.gflops = array("d")  # of ok rows
        self.rel_l2: float | None = None  # the worst, of ok and wrong rows
        self.max_abs: float | None = None
        self.hosts: set[str] = set()

    def add(self, r: Result) -> None:
        self.statuses[r.status] += 1
        self.hosts.add(r.host)
        seq, dim, heads = self.seq, self.dim, self.heads
        if not seq:
            seq += [r.seq, r.seq]
            dim += [r.dim, r.dim]
            heads += [r.heads, r.heads]
        else:
            for span, value in ((seq, r.seq), (dim, r.dim), (heads, r.heads)):
                if value < span[0]:
                    span[0] = value
                elif value > span[1]:
                    span[1] = value
        if r.status == "ok" and r.gflops is not None:
            self.gflops.append(r.gflops)
        if r.rel_l2 is not None and (self.rel_l2 is None or r.rel_l2 > self.rel_l2):
            self.rel_l2 = r.rel_l2
        if r.max_abs is not None and (self.max_abs is None or r.max_abs > self.max_abs):
            self.max_abs = r.max_abs


class Point:
    """The rows of one configuration, status and sequence length, as one plotted point: the median of their latency,
    GFLOP/s and GB/s, the worst of their errors, their highest peaks, bit-exact only when all are."""

    __slots__ = ("p50_ms", "gflops", "gbps", "max_abs", "rel_l2", "peak_gflops", "peak_gbps", "bit_exact")

    def __init__(self) -> None:
        self.p50_ms, self.gflops, self.gbps = array("d"), array("d"), array("d")
        self.max_abs = self.rel_l2 = self.peak_gflops = self.peak_gbps = None
        self.bit_exact = True

    def add(self, r: Result) -> None:
        if r.p50_ms is not None:
            self.p50_ms.append(r.p50_ms)
        if r.gflops is not None:
            self.gflops.append(r.gflops)
        if r.gbps is not None:
            self.gbps.append(r.gbps)
        if r.max_abs is not None and (self.max_abs is None or r.max_abs > self.max_abs):
            self.max_abs = r.max_abs
        if r.rel_l2 is not None and (self.rel_l2 is None or r.rel_l2 > self.rel_l2):
            self.rel_l2 = r.rel_l2
        if r.peak_gflops is not None and (self.peak_gflops is None or r.peak_gflops > self.peak_gflops):
            self.peak_gflops = r.peak_gflops
        if r.peak_gbps is not None and (self.peak_gbps is None or r.peak_gbps > self.peak_gbps):
            self.peak_gbps = r.peak_gbps
        if r.bit_exact is not True:
            self.bit_exact = False

    def merge(self, other: "Point") -> None:
        """Fold another point's rows into this one (two lengths in one bin)."""
        self.p50_ms.extend(other.p50_ms)
        self.gflops.extend(other.gflops)
        self.gbps.extend(other.gbps)
        for name in ("max_abs", "rel_l2", "peak_gflops", "peak_gbps"):
            setattr(self, name, _worst(getattr(self, name), getattr(other, name)))
        self.bit_exact = self.bit_exact and other.bit_exact

    def cells(self) -> dict[str, object]:
        median = lambda values: statistics.median(values) if values else None  # noqa: E731
        return dict(p50_ms=median(self.p50_ms), p50_ci_low_ms=None, p50_ci_high_ms=None, gflops=median(self.gflops),
                    gbps=median(self.gbps), max_abs=self.max_abs, rel_l2=self.rel_l2, peak_gflops=self.peak_gflops,
                    peak_gbps=self.peak_gbps, bit_exact=self.bit_exact)


def _worst(held: float | None, value: float | None) -> float | None:
    return held if value is None or (held is not None and held >= value) else value


class Digest:
    """Everything results.md and the plots say about a set of rows, gathered by `add` one row at a time."""

    def __init__(self, keep: int = SUMMARY_ROWS):
        self.keep = keep
        self.count = 0
        self.torn_line = 0  # the line number of results.csv's torn last row (host.report sets it), 0 if none
        self.replaced = 0  # failed or skipped rows a later run measured again (`of`)
        self.rows: list[Result] | None = []  # every row, while there are at most `keep`; None past that
        self.statuses: Counter = Counter()
        self.run_rows: Counter = Counter()  # run_id → its rows
        self.run_first: dict[str, tuple[str, str, str]] = {}  # run_id → its first row's timestamp, host, git_rev
        self.hosts: set[str] = set()
        self.seeds: set[int] = set()
        self.groups: dict[tuple[str, str, str, str], Group] = {}  # (workload, target, kernel, dtype) → its summary
        self.not_ok = 0
        self._not_ok: list[tuple[tuple, int, Result]] = []  # the first NOT_OK_LISTED by not_ok_key, kept sorted
        self.points: dict[tuple, Point] = {}  # POINT_FIELDS + (seq,) → the point of those rows

    @classmethod
    def of(cls, rows: Iterable[Result] | Callable[[], Iterable[Result]],
           keep: int = SUMMARY_ROWS) -> "Digest":
        """The digest of the rows still current: a failed or skipped row that a later run (a --resume, even one
        killed before it could drop the old row) measured again on the same host and device is counted in
        `replaced`, not listed, as --resume itself drops it. Rows of one run are never replaced (a tile sweep writes
        one row a tile of a problem), nor by another machine's (merged results keep each machine's verdict).
        `rows` may be a callable giving them anew (a file's stream): the rows are read once, and a second time,
        without the replaced ones, only where some were; only the keys of failed rows are held meanwhile."""
        replaced = set()
        first = cls(keep)
        # hash((configuration, host, device)) → (ordinal, run_id) of its last failed row: a hash, not the key, to
        # hold about 200 B a failed row (two configurations of one 64-bit hash are not to be met in a file)
        last_failed: dict[int, tuple[int, str]] = {}
        for ordinal, r in enumerate(rows() if callable(rows) else rows):
            key = hash((untiled_key(r), r.host, r.device))
            earlier = last_failed.get(key)
            if earlier is not None and earlier[1] != r.run_id:
                replaced.add(earlier[0])
                del last_failed[key]
            if r.status in REMEASURED_STATUSES:
                last_failed[key] = (ordinal, sys.intern(r.run_id))
            first.add(r)
        if not replaced:
            return first
        if not callable(rows) and iter(rows) is rows:
            raise TypeError("Digest.of: rows with a replaced row must be a sequence or a callable, to be read again")
        digest = cls(keep)
        for ordinal, r in enumerate(rows() if callable(rows) else rows):
            if ordinal not in replaced:
                digest.add(r)
        digest.replaced = len(replaced)
        return digest

    @property
    def summarised(self) -> bool:
        """Whether there were too many rows to list (and to keep)."""
        return self.rows is None

    def add(self, r: Result) -> None:
        self.count += 1
        if self.rows is not None:
            self.rows.append(r)
            if len(self.rows) > self.keep:
                self.rows = None
        self.statuses[r.status] += 1
        self.run_rows[r.run_id] += 1
        if r.run_id not in self.run_first:
            self.run_first[r.run_id] = (r.timestamp, r.host, r.git_rev)
        self.hosts.add(r.host)
        self.seeds.add(r.seed)
        group = self.groups.get((r.workload, r.target, r.kernel, r.dtype))
        if group is None:
            group = self.groups[(r.workload, r.target, r.kernel, r.dtype)] = Group()
        group.add(r)
        status = r.status
        if status in PLOTTED_STATUSES:
            key = (r.target, r.kernel, r.dtype, r.dim, r.heads, r.batch, r.causal, r.host, r.device, r.br, r.bc,
                   r.numerics, r.q_len, r.kv_heads, r.workload, r.peak_source, status, r.seq)
            point = self.points.get(key)
            if point is None:
                point = self.points[key] = Point()
            point.add(r)
        if status != "ok":
            self._add_not_ok(r)

    def _add_not_ok(self, r: Result) -> None:
        self.not_ok += 1
        self._not_ok.append((not_ok_key(r), self.not_ok, r))
        if len(self._not_ok) >= 2 * NOT_OK_LISTED:  # amortised: sort and cut back now and then, never the whole set
            self._not_ok.sort(key=lambda entry: entry[:2])
            del self._not_ok[NOT_OK_LISTED:]

    def first_not_ok(self, limit: int = NOT_OK_LISTED) -> list[Result]:
        """The first `limit` rows that are not ok, in not_ok_key order (file order among equals)."""
        return [r for _, _, r in sorted(self._not_ok, key=lambda entry: entry[:2])[:limit]]
