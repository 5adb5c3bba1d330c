"""The CSV lines of a long table that DuckDB does not number: the file line each row it read starts on, the lines
before a header that its sniffer skips, and the lines it leaves out (``store_rejects``), each refused, or skipped and
counted, by its own line in the file (:class:`_CsvLines`, :func:`_preamble_lines`, :func:`_rejected_lines`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aumann.data.traces.duck import HEADER_SEARCH, _opens, connect, header_fields, sniff_sql
from aumann.data.traces.encoding import NOT_UTF8, line_invalid_at, not_utf8
from aumann.data.traces.events import Validator
from aumann.errors import TraceRecordError

#: why DuckDB left a CSV line out (``reject_errors.error_type``), as the report names it
_REJECTED = {"UNQUOTED VALUE": "a CSV line with an unterminated quote (or text after a closing quote)",
             "CAST": "a CSV value that does not read as its column's detected type",
             "INVALID ENCODING": NOT_UTF8}
_SPLIT = "a CSV line that does not split into the header's columns"


_PREAMBLE = "a line before the CSV header (DuckDB's sniffer skips it)"


def _header_line(f: Path, tops: set[str]) -> int | None:
    """The index (0-based) of the first line among :data:`_CsvLines.HEADER_SEARCH` of CSV file ``f`` that holds
    every column in ``tops`` (with a comma, tab, semicolon or bar between fields), or ``None``."""
    return header_fields(f, tops)[0]


def _header_below(files: Sequence[Path], names: dict[str, str], tops: set[str]) -> tuple[int, str]:
    """Where the CSV header lies below the first line when DuckDB's sniffer found none of the spec's columns
    ``tops``: a one-field line before the header (``exported``, ``v1``, a date) is taken by the sniffer for the
    header itself. (lines to skip, '') when every file's header is on the same line below the first: the scan
    reads from there; else (0, the text to add to the schema error, '' when no header is found)."""
    at = [_header_line(f, tops) for f in files]
    if not at[0]:
        return 0, ""
    first = names.get(str(files[0]), str(files[0]))
    if all(a == at[0] for a in at):
        return at[0], ""
    other = next(i for i, a in enumerate(at) if a != at[0])
    where = "has no such line" if at[other] is None else f"holds them on line {at[other] + 1}"
    return 0, (f"; line {at[0] + 1} of {first} holds them (the line(s) before it look like lines before the CSV "
               f"header, and DuckDB's sniffer took the first for the header itself: a line of one field does that), "
               f"but {names.get(str(files[other]), str(files[other]))} {where}: the files of a table share their "
               "header line; remove the lines before the header")


def _preamble_lines(files: Sequence[Path], validator: Validator, names: dict[str, str], lines: _CsvLines) -> None:
    """Lines before a CSV file's header (``# exported by ...``), which DuckDB's sniffer skips without a word:
    refused under ``on_bad = "error"`` (naming the first), else counted as skipped with their lines."""
    found = [(str(f), n) for f in files for n in lines.preamble(str(f))]
    if not found:
        return
    if validator.spec.on_bad == "error":
        f, line = found[0]
        raise TraceRecordError(f"{names.get(f, f)} line {line}: a line before the CSV header ({len(found)} such "
                               "line(s) in all; DuckDB's sniffer skips them: remove them, or on_bad = 'skip' in the "
                               "spec skips and counts such lines)")
    validator.tally.records += len(found)
    for f, line in found:
        validator.tally.skip(_PREAMBLE, [f"{names.get(f, f)} line {line}"])


def _rejected_lines(con: Any, validator: Validator, names: dict[str, str], lines: _CsvLines) -> None:
    """CSV lines DuckDB left out (``store_rejects``: a row with more or fewer fields than the header, an
    unterminated quote): refused under ``on_bad = "error"`` (naming the first), else counted as skipped with
    their line numbers (the file's own lines: DuckDB counts a record over several lines as one)."""
    import duckdb

    try:
        rows = con.execute("SELECT s.file_path, e.line, min(e.error_type) FROM reject_errors e "
                           "JOIN reject_scans s USING (scan_id, file_id) GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
    except duckdb.Error:  # no line was rejected: the tables were never made
        return
    if not rows:
        return
    found = [(f, lines.physical(f, line), why) for f, line, why in rows]
    if validator.spec.on_bad == "error":
        f, line, why = found[0]
        said = _REJECTED.get(why, _SPLIT)
        if why == "INVALID ENCODING":  # the byte where the line stops being UTF-8
            said = not_utf8(line_invalid_at(Path(names.get(f, f)), line))
        raise TraceRecordError(f"{names.get(f, f)} line {line}: {said} ({why.lower()}; "
                               f"{len(rows)} such line(s) in all; on_bad = 'skip' in the spec skips and counts such "
                               "records)")
    validator.tally.records += len(rows)
    for f, line, why in found:
        validator.tally.skip(_REJECTED.get(why, _SPLIT), [f"{names.get(f, f)} line {line}"])


class _CsvLines:
    """The line of the file each CSV record DuckDB read starts on, worked out only when a record is named.

    DuckDB numbers neither the rows it reads nor, in ``reject_errors``, physical lines (a record over several
    lines counts as one, a blank line as one). Counting the rows read named a row after a left-out line one
    lower per such line before it (and a blank line or a multi-line record shifted it too). Here each file is
    split into records once by Python's CSV reader with DuckDB's delimiter and quote (the line each record
    starts on), the header, blank lines and the records DuckDB left out (its ``reject_errors``, from a scan of
    its own) are dropped, and the n-th row DuckDB read is the n-th record left. The header is the first record
    that holds the column names DuckDB read (``header``): the sniffer skips lines before it, which are neither
    the header nor rows (:meth:`preamble`)."""

    #: records searched for the header (DuckDB's sniffer looks no further than its sample either)
    HEADER_SEARCH = HEADER_SEARCH

    def __init__(self, src: str, dialect: dict[str, Any], skip: int = 0, declared: bool = False,
                 decimal: str = ".") -> None:
        self.decimal = decimal  # the spec's [csv] decimal_separator, which the sniffer is given too
        self.src, self.dialect, self.skip = src, dialect, skip  # skip: the lines before the header the scan skips
        self.declared = declared  # the spec's [csv] header_line: the lines before it are no records, nor bad ones
        self.header: list[str] | None = None  # the column names DuckDB read
        self._head: dict[str, tuple[int, list[int]]] = {}  # file → (header record index, preamble lines)
        self._params: dict[str, tuple[str, str | None, str | None]] = {}
        self._rejected: dict[str, set[int]] | None = None
        self._starts: dict[str, np.ndarray] = {}  # file → start line of each record (DuckDB's line numbering)
        self._rows: dict[str, np.ndarray] = {}  # file → start line of each row DuckDB read

    def rejected(self) -> dict[str, set[int]]:
        if self._rejected is None:
            import duckdb

            out: dict[str, set[int]] = {}
            con = connect()
            try:
                con.execute(f"SELECT count(*) FROM {self.src}").fetchall()
                try:
                    for f, line in con.execute("SELECT s.file_path, e.line FROM reject_errors e JOIN reject_scans "
                                               "s USING (scan_id, file_id)").fetchall():
                        out.setdefault(f, set()).add(int(line))
                except duckdb.Error:  # nothing was left out
                    pass
            except duckdb.Error:
                pass
            finally:
                con.close()
            self._rejected = out
        return self._rejected

    def _dialect(self, f: str) -> tuple[str, str | None, str | None]:
        if f not in self._params:
            delim, quote, escape = self.dialect.get("delim"), '"', '"'
            if not delim:
                con = connect()
                try:
                    delim, quote, escape = con.execute(f"SELECT Delimiter, Quote, Escape FROM "
                                                       f"{sniff_sql(f, self.skip, self.decimal)}").fetchone()
                finally:
                    con.close()
            quote = None if quote in ("", "(empty)") else quote
            escape = None if escape in ("", "(empty)", quote) else escape
            self._params[f] = (delim, quote, escape)
        return self._params[f]

    def _records(self, f: str, params: tuple[str, str | None, str | None] | None = None
                 ) -> Iterator[tuple[int, list[str], Any]]:
        """(start line, fields, reader) of each record of ``f`` as Python's CSV reader splits it (``params``:
        delimiter, quote, escape; default: ``f``'s own)."""
        import csv
        import io

        delim, quote, escape = params or self._dialect(f)
        with _opens(Path(f)) as fh:
            text = io.TextIOWrapper(fh, encoding="utf-8", errors="replace", newline="")
            rdr = csv.reader(text, delimiter=delim, quotechar=quote, escapechar=escape, doublequote=escape is None,
                             quoting=csv.QUOTE_MINIMAL if quote else csv.QUOTE_NONE)
            prev = 0
            for rec in rdr:
                yield prev + 1, rec, rdr
                prev = rdr.line_num

    def _header(self, f: str) -> tuple[int, list[int]]:
        """(index of the header among ``f``'s records, the non-blank lines before it): the first record holding
        the column names DuckDB read (none found among the first :data:`HEADER_SEARCH`: the first record)."""
        import csv

        if f not in self._head:
            head: tuple[int, list[int]] = (0, [])
            if self.declared:  # the header is the record on the spec's header_line; the lines before it are not read
                try:
                    head = (next(i for i, (line, _, _) in enumerate(self._records(f)) if line > self.skip), [])
                except (csv.Error, StopIteration):
                    pass
            elif self.header:
                want = [str(c).strip() for c in self.header]
                before: list[int] = []
                # one sniff for all the files of the table (not one per shard): the files share a header
                params = next(iter(self._params.values())) if self._params else self._dialect(f)
                try:
                    for i, (line, rec, _) in enumerate(self._records(f, params)):
                        if i >= self.HEADER_SEARCH:
                            break
                        if [c.strip().lstrip("\ufeff") for c in rec] == want:
                            head = (i, before)
                            break
                        if rec:
                            before.append(line)
                except csv.Error:
                    pass
            self._head[f] = head
        return self._head[f]

    def preamble(self, f: str) -> list[int]:
        """The non-blank lines of ``f`` before its header, which DuckDB's sniffer skipped."""
        return list(self._header(f)[1])

    def _split(self, f: str) -> np.ndarray:
        if f not in self._starts:
            import csv

            starts, prev = [], 0
            try:
                for line, rec, rdr in self._records(f):
                    starts.append(-line if not rec else line)  # a blank line: negative
                    prev = rdr.line_num
            except csv.Error:
                starts.append(prev + 1)
            self._starts[f] = np.asarray(starts, dtype=np.int64)
        return self._starts[f]

    def physical(self, f: str, line: int) -> int:
        """The file line that DuckDB's ``line`` (a record number, the header 1) starts on."""
        starts = self._split(f)
        return int(abs(starts[line - 1])) if 0 < line <= len(starts) else line

    def line(self, f: str, row: int) -> int:
        """The line the ``row``-th row DuckDB read from ``f`` starts on (``row + 1``, the line it would be on
        after one header line, should the split here and DuckDB's ever disagree)."""
        if f not in self._rows:
            starts = self._split(f)
            skip = set(self.rejected().get(f, ()))
            h = self._header(f)[0]  # the records before the header are lines the sniffer skipped, not rows
            keep = [s for i, s in enumerate(starts[h + 1:], start=h + 2) if s > 0 and i not in skip]
            self._rows[f] = np.asarray(keep, dtype=np.int64)
        rows = self._rows[f]
        return int(rows[row - 1]) if 0 < row <= len(rows) else row + 1


class _LineNames(Sequence):
    """``RawRecords.loc`` of CSV rows: each row's line (``named``: ``file line N``), looked up only when the
    validator names it."""

    def __init__(self, lines: _CsvLines, files: list[str], rows: list[int], named: bool) -> None:
        self.lines, self.files, self.rows, self.named = lines, files, rows, named

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        line = self.lines.line(self.files[i], self.rows[i])
        return f"{Path(self.files[i]).name} line {line}" if self.named else line
