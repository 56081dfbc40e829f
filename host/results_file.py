"""results.csv in an output folder: rows streamed in (never the whole file in memory), appended one row at a time in
O(row), repaired after a kill, and rewritten only through a temporary file renamed over it.

`ResultsFile.rows()` yields every row, validated, as it reads: a file that is not results (bytes that are not UTF-8,
a foreign header, a row of the wrong width or an unknown schema version, a second header in the middle) is a
ResultsError naming the file and the line, so a file is never read as emptier than it is. A UTF-8 byte-order mark (as
Excel writes one) is allowed. Only the last line may be torn (a writer killed mid-row): it is skipped, its line is in
`torn_line`, and the next append cuts it.

Appends are one write of whole rows, fsynced (host/safe_files.py), after a repair that reads only the file's tail; a
full disk cuts the file back to its last whole row. A rewrite (a schema upgrade, dropping superseded rows) streams
into a fresh temporary file beside it, fsyncs it, and renames it over the old one: a kill at any point leaves the old
file or the new one, whole.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import io
import os
import stat
import tempfile
from pathlib import Path
from typing import Container, Iterable, Iterator

from host.errors import ResultsError
from host.results import FIELD_NAMES, Result, RowReader, is_header
from host.safe_files import append_whole, cut_to, sync_folder

#: How much of the file's end a repair reads at a time while looking for the start of its last line.
_TAIL_CHUNK = 1 << 16
# The csv module refuses a cell over 128 KiB by default, which would make a long torn last line (or a long message)
# an error instead of a row; a cell is bounded by the file, so lift the limit (process-wide: only ever raised).
csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))


class ResultsFile:
    """results.csv in an output folder: stream its rows, append one row at a time, repair a torn tail, rewrite."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.torn_line: int | None = None  # the line of a torn last row the latest rows()/read() skipped

    def read(self) -> list[Result]:
        """Every row, in a list (`rows` streams them)."""
        return list(self.rows())

    def __iter__(self) -> Iterator[Result]:
        return self.rows()

    def rows(self) -> Iterator[Result]:
        """Every row, in file order, each validated as it is read (see the module docstring for what is refused).
        A last line without its newline is yielded when it is a whole row and skipped (`torn_line`) when not."""
        for _, cells, reader, line in self._records():
            yield self._result(reader, cells, line)

    def _records(self) -> Iterator[tuple[int, list[str], RowReader, int]]:
        """(ordinal, cells, reader, line) of each row whose parse is to be strict: every row but a torn last one."""
        self.torn_line = None
        try:
            handle = self.path.open("rb")
        except FileNotFoundError:
            return
        except OSError as exc:
            raise ResultsError(f"{self.path}: cannot read it: {exc.strerror or exc}") from None
        with handle:
            size = os.fstat(handle.fileno()).st_size
            if size == 0:
                return
            handle.seek(size - 1)
            ends_whole = handle.read(1) == b"\n"
            handle.seek(0)
            text = io.TextIOWrapper(handle, encoding="utf-8-sig", newline="")
            records = csv.reader(text)
            try:
                yield from self._checked(records, ends_whole)
            except UnicodeDecodeError:
                raise self._not_utf8() from None
            except csv.Error as exc:
                raise ResultsError(f"{self.path}:{records.line_num}: {exc}: not a kbench results file") from None

    def _checked(self, records, ends_whole: bool) -> Iterator[tuple[int, list[str], RowReader, int]]:
        """The rows of the csv reader `records`, one behind, so the last can be told apart and read leniently."""
        header = next(records, None)
        if header is None:
            return
        if not is_header(header):
            if records.line_num == 1 and not ends_whole and next(records, None) is None:
                raise ResultsError(f"{self.path}:1: no complete line, and not a results header "
                                   f"({','.join(header)[:60]!r}): not a kbench results file")
            raise ResultsError(f"{self.path}:1: not a kbench results header (it starts {','.join(header[:4])!r}), "
                               "so not a kbench results file")
        reader = RowReader(header)
        pending = None
        ordinal = 0
        for cells in records:
            if not cells:  # a blank line (an `echo >> results.csv`): no row, and no ordinal
                continue
            if pending is not None:
                yield pending
            if is_header(cells):
                raise ResultsError(f"{self.path}:{records.line_num}: a second header line in the middle of the file "
                                   "(two results files joined?): keep only the first line's header")
            pending = (ordinal, cells, reader, records.line_num)
            ordinal += 1
        if pending is None:
            return
        if ends_whole:
            yield pending
            return
        _, cells, reader, line = pending
        try:
            self._result(reader, cells, line)
        except ResultsError:
            self.torn_line = line  # a torn last row: skipped here, cut by the next append
            return
        yield pending

    def _result(self, reader: RowReader, cells: list[str], line: int) -> Result:
        try:
            return reader.result(cells)
        except ResultsError as exc:
            raise ResultsError(f"{self.path}:{line}: {exc}") from None

    def _not_utf8(self) -> ResultsError:
        """The error for a file that is not UTF-8, naming the line of its first bad byte (found by a second,
        streamed pass: the text reader that failed does not say where)."""
        decoder = codecs.getincrementaldecoder("utf-8")()
        line = 1
        with self.path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                held = len(decoder.getstate()[0])  # bytes of a character begun in the previous chunk
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError as exc:
                    start = max(exc.start - held, 0)
                    line += chunk[:start].count(b"\n")
                    return ResultsError(f"{self.path}:{line}: byte 0x{chunk[start]:02x} is not UTF-8 text: not a "
                                        "kbench results file")
                line += chunk.count(b"\n")
        return ResultsError(f"{self.path}: ends inside a UTF-8 character: not a kbench results file")

    def header(self) -> list[str] | None:
        """The file's column names (its first line); None when it is missing or empty."""
        try:
            with self.path.open("rb") as f:
                first = f.readline()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ResultsError(f"{self.path}: cannot read it: {exc.strerror or exc}") from None
        try:
            return next(csv.reader([first.decode("utf-8-sig")]), None)
        except UnicodeDecodeError:
            raise self._not_utf8() from None
        except csv.Error as exc:
            raise ResultsError(f"{self.path}:1: {exc}: not a kbench results file") from None

    def unknown_columns(self, header: list[str] | None = None) -> list[str]:
        """The columns of the file's header (or of `header`) that no schema version has: a user's own columns."""
        header = self.header() if header is None else header
        return [name for name in header or [] if name not in FIELD_NAMES]

    def repair(self) -> None:
        """End the file on a whole row, so the next append starts on a fresh line: a last row whose newline was not
        written gets it; a torn last row (a killed writer) is cut. Reads only the tail and the header; crash-safe:
        the file is only ever truncated to the end of its last whole line or appended to, never rewritten."""
        try:
            handle = self.path.open("rb")
        except FileNotFoundError:
            return
        with handle:
            size = os.fstat(handle.fileno()).st_size
            if size == 0:
                return
            handle.seek(size - 1)
            if handle.read(1) == b"\n":
                return
            start = _last_line_start(handle, size)
            handle.seek(start)
            tail = handle.read()
        header = self.header() if start else None
        if start == 0:  # one line, no newline: a header alone gets its newline (a file of anything else is left)
            with contextlib.suppress(UnicodeDecodeError, csv.Error):
                if is_header(next(csv.reader([tail.decode("utf-8-sig")]), [])):
                    append_whole(self.path, b"\n")
            return
        try:
            RowReader(header or []).result(next(csv.reader([tail.decode("utf-8")]), []))
            whole = True
        except (ResultsError, UnicodeDecodeError, csv.Error):
            whole = False
        if whole:
            append_whole(self.path, b"\n")
        else:
            cut_to(self.path, start)

    def append(self, result: Result) -> None:
        """Append one row (and the header if the file is new) in one write of whole bytes, flushed to disk, in
        O(row): only the header and the tail are read. A file written by an older schema version is upgraded first
        (`rewrite`, once), so its columns match; a file with columns this schema does not know is refused (an
        upgrade would drop them). A full disk cuts the file back to its last whole row and raises ResultsError."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repair()
        header = self.header()
        unknown = self.unknown_columns(header)
        if unknown:
            raise ResultsError(f"{self.path}: columns this kbench does not know ({', '.join(unknown)}) would be "
                               "dropped by an append: move them to another file")
        if header is not None and header != list(FIELD_NAMES):
            self.rewrite(self.rows())
            header = list(FIELD_NAMES)
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=FIELD_NAMES, lineterminator="\n")
        if header is None:
            writer.writeheader()
        writer.writerow(result.to_row())
        append_whole(self.path, buffer.getvalue().encode("utf-8"))

    def rewrite(self, results: Iterable[Result]) -> None:
        """Replace the file's rows with `results` (which may stream from this very file), in this schema's columns:
        written to a fresh temporary file beside it, fsynced, then renamed over it."""
        with self._replacing() as out:
            writer = csv.DictWriter(out, fieldnames=FIELD_NAMES, lineterminator="\n")
            writer.writeheader()
            for result in results:
                writer.writerow(result.to_row())

    def drop(self, ordinals: Container[int]) -> None:
        """Rewrite the file without the rows whose ordinals (0 for the first row under the header, in file order)
        are given, copying every other row's cells as they are (no row is parsed again), crash-safe as `rewrite`."""
        with self.path.open(encoding="utf-8-sig", newline="") as source, self._replacing() as out:
            records = csv.reader(source)
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(next(records))
            ordinal = 0
            for cells in records:
                if not cells:  # a blank line: not a row (rows() skips it too), and not copied
                    continue
                if ordinal not in ordinals:
                    writer.writerow(cells)
                ordinal += 1

    @contextlib.contextmanager
    def _replacing(self):
        """A text file to write the new contents into; renamed over results.csv when the block ends without an
        error, deleted when it raises (a full disk: ResultsError, the old file left as it was). A results.csv that is
        a symbolic link is rewritten where it points (the link stays a link), and the new file keeps the old one's
        permissions."""
        target = Path(os.path.realpath(self.path))
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        temporary = Path(name)
        try:
            with contextlib.suppress(OSError):
                os.fchmod(fd, stat.S_IMODE(os.stat(target).st_mode))
            with open(fd, "w", encoding="utf-8", newline="") as out:
                yield out
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, target)
        except OSError as exc:
            raise ResultsError(f"{self.path}: cannot rewrite it: {exc.strerror or exc}; its rows stay as they were "
                               "before this rewrite") from None
        finally:
            temporary.unlink(missing_ok=True)
        sync_folder(target.parent)


def _last_line_start(handle, size: int) -> int:
    """The offset just after the last newline of a file that does not end with one (0 when it has none), reading
    backwards from its end a chunk at a time."""
    end = size
    while end > 0:
        start = max(end - _TAIL_CHUNK, 0)
        handle.seek(start)
        newline = handle.read(end - start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0
