"""DuckDB helpers shared by the long-table reader and edge files: which files a table is, how to scan them."""

from __future__ import annotations

import glob as globlib
import json
import re
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aumann import bounded
from aumann import io as aio
from aumann.data.traces.events import split_path
from aumann.errors import OutputError, TraceFormatError

_TABLE_EXT = (".csv", ".tsv", ".parquet", ".pq", ".jsonl", ".ndjson", ".json", ".csv.gz", ".tsv.gz", ".jsonl.gz",
              ".ndjson.gz")


#: the longest line of a JSON lines table, in bytes (its line end not counted): DuckDB's ``maximum_object_size``. A
#: longer line failed the whole file (from about this length to twice it, as it falls in DuckDB's buffers), even
#: with ``ignore_errors``: the table reader finds such lines first and reads each as a bad record
#: (:mod:`aumann.data.traces.jsonlines`)
MAX_OBJECT = 64 * 2**20

#: the column DuckDB adds with each row's file: a name no table of events uses (``filename = true`` named it
#: ``filename``, and a table with a column of that name could not be read at all: "Option filename adds column")
FILE_COLUMN = "__aumann_source_file__"


def lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def file_lit(f: Path | str) -> str:
    """A file's name as DuckDB's readers take it literally (:func:`aumann.io.duckdb_file_name`): 'events[1].csv'
    read 'events1.csv' instead, and a directory's 'a*.csv' read its neighbours too (rows twice, silently); the
    file-name column reports the real name."""
    return lit(aio.duckdb_file_name(f))


def ident(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def table_files(path: Path) -> list[Path]:
    """The files of a table: the file itself, a directory's table files (sorted; names starting with ``_`` or
    ``.`` are sidecars, not rows), or a glob's matches."""
    s = str(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.name.lower().endswith(_TABLE_EXT)
                       and not p.name.startswith(("_", ".")))  # sidecars such as AgentSociety 2's _schema.json
        if not files:
            _refuse_partitioned(path)
    elif path.is_file():  # a file that exists is itself, even named like a glob ('events[1].csv')
        return [path]
    elif any(ch in s for ch in "*?["):  # regular files only, as in a directory: a matching folder raised
        files = sorted(map(Path, globlib.glob(s)))  # IsADirectoryError, a FIFO hung
    else:
        return []
    gone = [p for p in files if p.is_symlink() and not p.exists()]
    if gone:  # a shard linked from a folder since removed: it was left out without a word, its rows lost
        raise TraceFormatError(f"{str(gone[0])!r} is a link to {str(gone[0].readlink())!r}, which does not exist "
                               f"({len(gone)} such file(s) in {s!r})")
    return [p for p in files if p.is_file()]


def _refuse_partitioned(path: Path) -> None:
    """Refuse a Hive-partitioned dataset (pandas ``to_parquet(partition_cols=[...])``, pyarrow's
    ``write_to_dataset``, Spark's ``partitionBy``): its folders ``action=post/`` hold the files, and the partition
    column lives only in the folder names. It was "no table files" (or "cannot tell the format"), without a word of
    why; read file by file, the column would be missing."""
    parts = sorted(d.name for d in path.iterdir() if d.is_dir() and "=" in d.name and not d.name.startswith(("_", ".")))
    if not parts:
        return
    col = parts[0].split("=", 1)[0]
    raise TraceFormatError(f"{str(path)!r} is a Hive-partitioned dataset (folders {', '.join(parts[:3])}"
                           f"{', ...' if len(parts) > 3 else ''}): column {col!r} is in the folder names only, and "
                           "a trace table is read from its files' columns; write it as one table first, e.g. "
                           f"pandas.read_parquet({str(path)!r}).to_parquet('table.parquet')")


def _kind(p: Path) -> str:
    """A table file's kind by its name. A ``.txt`` file (named itself, or by a glob: a folder's ``.txt`` files are
    not among its tables, as notes and READMEs are) is delimited text, read as CSV (DuckDB's sniffer finds its
    delimiter): Repast Simphony's file sink writes ``ModelOutput.<timestamp>.txt``, comma-separated, and it was
    refused as 'a table is CSV/TSV, Parquet or JSON lines files' until renamed."""
    n = p.name.lower().removesuffix(".gz")
    if n.endswith((".parquet", ".pq")):
        return "parquet"
    if n.endswith((".jsonl", ".ndjson", ".json")):
        return "json"
    if n.endswith((".csv", ".tsv", ".txt")):
        return "csv"
    return "unknown"


def _opens(f: Path) -> Any:
    import gzip

    return gzip.open(f, "rb") if f.name.lower().endswith(".gz") else open(f, "rb")


#: the most blank lines (empty, or spaces, tabs and carriage returns only) a gzipped trace file may hold. Deflate
#: expands up to 1032-fold, so a 4 MiB file can hold 4 GiB of line ends: such a "newline bomb" held every reader for
#: minutes (DuckDB about 4 MiB/s, the span reader a Python loop per line: 505 s for one) to read nothing. Counted as the
#: file is checked (under 1 ms per MiB), and refused as soon as passed (:data:`aumann.bounded.MAX_BLANK_LINES`, the
#: Jetstream ingest's cap too)
MAX_BLANK_LINES = bounded.MAX_BLANK_LINES


def _blank_lines(block: bytes, content_before: bool) -> tuple[int, bool]:
    """(the blank lines that end in ``block``, whether the line still open at its end holds anything but whitespace);
    ``content_before``: whether the line open before ``block`` did."""
    import numpy as np

    s = block.translate(None, b" \t\r")
    if not s:
        return 0, content_before
    ends = np.frombuffer(s, dtype=np.uint8) == 10
    blank = int(np.count_nonzero(ends[1:] & ends[:-1])) + int(bool(ends[0]) and not content_before)
    return blank, not bool(ends[-1])


def _too_many_blank_lines(f: Path, name: str | None = None) -> TraceFormatError:
    shown = name if name is not None else str(f)
    return TraceFormatError(
        f"{shown!r} holds more than {MAX_BLANK_LINES:,} blank lines once decompressed (a gzip 'newline bomb': "
        f"{f.stat().st_size:,} bytes on disk): a gzipped trace file may hold at most {MAX_BLANK_LINES:,}; remove "
        "them first, e.g. zcat FILE | grep -v '^[[:space:]]*$' | gzip > CLEAN.gz")


def check_gzip(files: Sequence[Path], chunk: int = 1 << 22, *, damaged: bool = True) -> None:
    """Read each gzipped file of ``files`` to its end, checking its CRC and counting its blank lines, before DuckDB
    (or the span reader) reads it.

    DuckDB does not check a gzip member's CRC: a file whose deflate data were damaged, which decodes into wrong bytes
    (a CSV value changed, lines run together), was read without a word, its changed numbers used, and the Python
    passes over the file (the line of a named row, the quote search) raised gzip's BadGzipFile or zlib.error out of
    the reader. ``damaged=False`` leaves damage to the caller's own read (the span reader names the line it reaches)
    and only counts blank lines.

    Raises:
        TraceFormatError: a gzipped file that is truncated or damaged, or holds more than :data:`MAX_BLANK_LINES`
            blank lines (read no further), named.
    """
    for f in files:
        if not f.name.lower().endswith(".gz"):
            continue
        blank, content = 0, False
        try:
            with _opens(f) as fh:
                while block := fh.read(chunk):
                    n, content = _blank_lines(block, content)
                    blank += n
                    if blank > MAX_BLANK_LINES:
                        raise _too_many_blank_lines(f)
        except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError; damaged deflate data zlib.error
            if damaged:
                raise TraceFormatError(f"{str(f)!r} is a damaged or truncated gzip file: {exc}") from exc


_LINE_END = re.compile(rb"\r\n|\r|\n")


def _line_end_kinds(f: Path, chunk: int) -> dict[str, int]:
    """{kind of line end: how many} of file ``f`` (``\\r\\n``, ``\\n``, a bare ``\\r``), counted block by block."""
    counts = {"\\r\\n": 0, "\\n": 0, "a bare \\r": 0}
    carry = b""
    with _opens(f) as fh:
        while block := fh.read(chunk):
            data = carry + block
            carry = b"\r" if data.endswith(b"\r") else b""  # (its \n may start the next block)
            data = data[:-1] if carry else data
            both = data.count(b"\r\n")
            counts["\\r\\n"] += both
            counts["\\n"] += data.count(b"\n") - both
            counts["a bare \\r"] += data.count(b"\r") - both
    counts["a bare \\r"] += len(carry)
    return {k: n for k, n in counts.items() if n}


def _first_lines(f: Path, kinds: set[str], chunk: int) -> dict[str, int]:
    """{kind: the first line (1-based) of file ``f`` that ends that way} for each of ``kinds``."""
    first: dict[str, int] = {}
    line, carry = 1, b""
    with _opens(f) as fh:
        while (block := fh.read(chunk)) or carry:
            data = carry + block
            carry = b"\r" if block and data.endswith(b"\r") else b""
            for m in _LINE_END.finditer(data[:-1] if carry else data):
                kind = {b"\r\n": "\\r\\n", b"\n": "\\n"}.get(m.group(0), "a bare \\r")
                if kind in kinds:
                    first.setdefault(kind, line)
                    if len(first) == len(kinds):
                        return first
                line += 1
            if not block:
                break
    return first


def mixed_line_ends(files: Sequence[Path], names: dict[str, str] | None = None, chunk: int = 1 << 22) -> str:
    """Why DuckDB may have refused CSV ``files`` where one of them ends its lines in more than one way (``\\r\\n`` on
    some, ``\\n`` or a bare ``\\r`` on others: files joined from two systems, or edited by hand): a sentence naming the
    file and the first line of each kind, else ''. DuckDB's CSV reader takes one line ending per file: such a file
    was refused with its sniffer's "It was not possible to automatically detect the CSV parsing dialect" or "The CSV
    Parser state machine reached an invalid state", which named no cause. (Read on that error path only.)"""
    for f in files:
        try:
            kinds = _line_end_kinds(f, chunk)
            if len(kinds) < 2:
                continue
            first = _first_lines(f, set(kinds), chunk)
        except (OSError, EOFError, zlib.error):
            continue
        shown = " and ".join(f"{kind} (first ending line {n})"
                             for kind, n in sorted(first.items(), key=lambda kv: kv[1]))
        return (f"{(names or {}).get(str(f), str(f))!r} mixes line endings, {shown}: a CSV file must end every line "
                "alike (save it with one kind, e.g. with dos2unix); ")
    return ""


_UTF16 = {b"\xff\xfe": "FF FE", b"\xfe\xff": "FE FF"}


def refuse_utf16(path: Path) -> None:
    """Refuse a text trace file that starts with a UTF-16 (or UTF-32) byte-order mark, naming the encoding: the
    readers read UTF-8, and such a file (what Windows tools and PowerShell's ``>`` write) failed on what it became,
    a CSV whose columns were ``'\x001\x00'``, a span file whose line 1 "is not a JSON object", or a directory
    detected as a long table. A gzipped file is looked at after decompression."""
    import gzip

    try:
        opener = gzip.open if path.name.lower().endswith(".gz") else open
        with opener(path, "rb") as fh:
            head = fh.read(2)
    except (OSError, EOFError, zlib.error):  # unreadable, not gzip or damaged: the reader's own read says what
        return
    mark = _UTF16.get(head)
    if mark is not None:
        raise TraceFormatError(f"{str(path)!r} is UTF-16 text (it starts with the byte-order mark {mark}); traces "
                               "are read as UTF-8: save it as UTF-8")


def _write_rest(src: Any, copy: Path, *, gzipped: bool = True) -> None:
    """Write what is left of the open stream ``src`` to ``copy``, gzipped at level 1 unless ``gzipped`` is false (an
    error reading ``src`` propagates as it is).

    Raises:
        OutputError: ``copy`` cannot be written (a full or missing temporary folder), naming it: caught with the
            read's own errors, such a failure left the file with its mark to DuckDB, which then read a CSV file's
            quoted first column as ``'"agent"'`` (the spec's column "missing") or refused a JSON lines file.
    """
    import gzip

    def refused(exc: OSError) -> OutputError:
        return OutputError(f"cannot write {str(copy)!r}, the copy of a trace file without its byte-order mark: "
                           f"{exc.strerror or exc} (TMPDIR chooses the temporary folder)")

    try:
        dst = gzip.open(copy, "wb", compresslevel=1) if gzipped else open(copy, "wb")
    except OSError as exc:
        raise refused(exc) from exc
    try:
        while block := src.read(1 << 22):
            try:
                dst.write(block)
            except OSError as exc:
                raise refused(exc) from exc
    finally:
        try:
            dst.close()
        except OSError as exc:
            raise refused(exc) from exc  # a failed flush is the error to report


def without_bom(files: list[Path], tmp: Path) -> tuple[list[Path], dict[str, str]]:
    """The files DuckDB reads: a JSON lines or CSV file that starts with a UTF-8 byte-order mark copied without it
    into ``tmp`` (a gzipped one gzipped again, at level 1); and the original name of each copy. DuckDB's JSON reader
    refuses the mark ("byte order mark (BOM) is not supported"); its CSV reader skips it, but a quoted first column
    name after it kept its quotes (``"agent",tick`` read the columns ``'"agent"'`` and ``tick``). Lines are not
    renumbered: the mark is no line. (A gzipped file's copy was its whole decompressed text: a 1 GiB file of 20 GiB
    text filled the temporary folder with 20 GiB; level 1 keeps it near the file's own size, at about 1 s per
    140 MiB of text, a few per cent of DuckDB's read of it.)"""
    out, names = [], {}
    for i, f in enumerate(files):
        kind = _kind(f)
        if kind in ("json", "csv") and f.name.lower().endswith(".gz"):  # a gzipped file: its text after decompression
            copy = tmp / f"{i}-{f.name}"
            try:
                with _opens(f) as fh:
                    if fh.read(len(aio.BOM)) == aio.BOM:
                        _write_rest(fh, copy)
                        names[str(copy)] = str(f)
                        f = copy
            except OutputError:  # (an OSError too) the copy could not be written: said, not left to DuckDB
                raise
            except (OSError, EOFError, zlib.error):  # not gzip, or cut short: DuckDB's read of the file itself says
                pass
        elif kind in ("json", "csv") and aio.starts_with_bom(f):
            copy = tmp / f"{i}-{f.name}"
            try:
                with open(f, "rb") as fh:
                    fh.read(len(aio.BOM))
                    _write_rest(fh, copy, gzipped=False)  # (a full temporary folder was an OSError traceback)
            except OutputError:
                raise
            except OSError as exc:
                raise TraceFormatError(f"cannot read {str(f)!r}: {exc.strerror or exc}") from exc
            names[str(copy)] = str(f)
            f = copy
        out.append(f)
    return out, names


#: lines of a CSV file searched for its header (below lines before it that DuckDB's sniffer skips)
HEADER_SEARCH = 2048


def header_fields(f: Path, tops: set[str], at: int | None = None) -> tuple[int | None, list[str]]:
    """(index (0-based), fields) of the first line among the first :data:`HEADER_SEARCH` of CSV file ``f`` that holds
    every column in ``tops`` (with a comma, tab, semicolon or bar between fields); ``(None, [])`` when there is
    none. ``at``: look at the line of that index only."""
    import csv
    import io

    try:
        with _opens(f) as fh:
            text = io.TextIOWrapper(fh, encoding="utf-8", errors="replace", newline="")
            for i, line in enumerate(text):
                if (i >= HEADER_SEARCH if at is None else i > at):
                    break
                if at is not None and i != at:
                    continue
                for delim in (",", "\t", ";", "|"):
                    try:
                        fields = [c.strip().strip('"').lstrip("\ufeff") for c in next(csv.reader([line],
                                                                                             delimiter=delim))]
                    except (csv.Error, StopIteration):
                        continue
                    if tops <= set(fields):
                        return i, fields
    except OSError:
        pass
    return None, []


def declared_header(files: Sequence[Path], names: dict[str, str], whole: set[str], line: int, what: str = "[csv]",
                    shared: str = "the files of a table share their header line") -> str:
    """The schema error's text when a CSV file's line ``line`` (a spec's ``header_line``, in its table ``what``) does
    not hold the columns ``whole``, saying where they are; '' when every file's does."""
    for f in files:
        if header_fields(f, whole, at=line - 1)[0] is not None:
            continue
        at = header_fields(f, whole)[0]
        where = (f"line {at + 1} holds them: header_line = {at + 1}" if at is not None else
                 f"none of its first {HEADER_SEARCH} lines holds them")
        also = f"; {shared}" if len(files) > 1 else ""
        return (f"{what} header_line = {line}, but line {line} of {names.get(str(f), str(f))!r} does not hold the "
                f"spec's columns {sorted(whole)} ({where}{also})")
    return ""


def duplicated_columns(files: Sequence[Path], kind: str, names: dict[str, str], tops: set[str], cols: list[str]) -> str:
    """The schema error's text when a column the spec reads is named twice in a file's header (``x,t,x``): DuckDB
    reads the first and renames the others ``x_1``, ..., so the spec's ``x`` silently meant the first of two
    columns; '' when none is. Looked for only where DuckDB's columns hold such a renamed one."""
    import re

    suspects = {t for t in tops if any(re.fullmatch(re.escape(t) + r"_[0-9]+", c) for c in cols)}
    if not suspects or kind not in ("csv", "parquet"):
        return ""
    for f in files:
        if kind == "parquet":
            import pyarrow.parquet as pq

            try:
                header = list(pq.read_schema(f).names)
            except Exception:  # DuckDB read it; its own errors say what is wrong
                continue
        else:
            header = header_fields(f, tops)[1]
        twice = sorted(t for t in suspects if header.count(t) > 1)
        if twice:
            return (f"{names.get(str(f), str(f))!r} names column(s) {twice} more than once (its columns are "
                    f"{header}): DuckDB reads the first and renames the others, so which one the spec means is "
                    "ambiguous; give each column its own name")
    return ""


def _holds(files: Sequence[Path], byte: bytes, chunk: int = 1 << 22) -> bool:
    """Whether any of ``files`` holds ``byte`` (read in chunks)."""
    for f in files:
        with _opens(f) as fh:
            while block := fh.read(chunk):
                if byte in block:
                    return True
    return False


def _decimal_sql(decimal: str) -> str:
    """DuckDB's CSV option for the spec's ``[csv] decimal_separator`` ('' for the default, a point)."""
    return "" if decimal == "." else f", decimal_separator = {lit(decimal)}"


def sniff_sql(f: Path | str, skip: int = 0, decimal: str = ".") -> str:
    """DuckDB's CSV sniffer on ``f`` as the lenient scan sniffs (``store_rejects`` tolerates bad lines), from
    line ``skip + 1`` on (``skip``: the lines before a header the sniffer cannot find itself); ``decimal``: the
    decimal separator of the file's numbers (the spec's ``[csv] decimal_separator``)."""
    return (f"sniff_csv({file_lit(f)}, header = true, store_rejects = true" + (f", skip = {int(skip)}" if skip else "")
            + _decimal_sql(decimal) + ")")


def csv_dialect(con: Any, files: Sequence[Path], skip: int = 0, decimal: str = ".") -> dict[str, Any]:
    """How to read CSV ``files``: ``{}`` (DuckDB's sniffer decides), or, where the sniffer chose no quote
    character although a ``"`` is in the files, the sniffed delimiter and columns with ``"`` as the quote: an
    unterminated quote (on the last line, say) makes the sniffer give up quoting for the whole file, and every
    quoted value was read with its quotes kept and the unterminated one read leniently as a record. Read with
    the quote, that line is left out as an ``UNQUOTED VALUE`` in ``reject_errors``, named by its line.
    ``skip``: sniff from line ``skip + 1`` on (see :func:`scan_sql`)."""
    import duckdb

    try:
        row = con.execute(f"SELECT Delimiter, Quote, SkipRows, Columns FROM {sniff_sql(files[0], skip, decimal)}"
                          ).fetchone()
    except duckdb.Error:  # the scan itself then says what is wrong
        return {}
    delim, quote, skip, columns = row
    if quote not in ("", "(empty)") or not columns or not _holds(files, b'"'):
        return {}
    # the names as the sniffer read them without a quote character: a quoted header ("[run number]", as NetLogo's
    # BehaviorSpace writes every field) kept its quotes, and every column the spec names was "missing"
    return {"delim": delim, "skip": int(skip), "columns": {_unquoted(c["name"]): c["type"] for c in columns}}


def _unquoted(name: str) -> str:
    """A CSV header field read without a quote character, as it reads with ``"`` as the quote."""
    if len(name) >= 2 and name.startswith('"') and name.endswith('"'):
        return name[1:-1].replace('""', '"')
    return name


def scan_sql(files: Sequence[Path], *, lenient: bool = False, json_columns: Sequence[str] | None = None,
             dialect: dict[str, Any] | None = None, text: Sequence[str] = (), skip: int = 0,
             json_types: dict[str, str] | None = None, sample_all: bool = False, decimal: str = ".") -> str:
    """DuckDB's table function over ``files`` (all of one kind), with the file name as column :data:`FILE_COLUMN`.

    ``lenient`` (the long-table reader): a JSON line DuckDB cannot parse becomes an all-NULL row in its place
    (``ignore_errors``) and a CSV line that does not split into the header's columns is left out and kept in
    DuckDB's ``reject_errors`` table (``store_rejects``), so that the reader counts or refuses each one by its
    line instead of the whole file failing. ``json_columns``: read these top-level JSON fields, each as
    ``JSON`` (the value's JSON text), instead of detecting the columns (a file whose lines are not all objects
    detects as one ``json`` column). ``dialect``: a CSV dialect from :func:`csv_dialect`; ``text``: CSV columns
    read as text, not as the type the sniffer detected; ``skip``: CSV lines before the header, left unread (the
    sniffer skips such lines itself, except where the first holds one field: it takes that for the header).
    ``json_types``: JSON fields read as these DuckDB types (no detection); ``sample_all``: JSON types detected from
    every record, not from the first 20,480 (:func:`json_full_types`); ``decimal``: the decimal separator of a CSV
    file's numbers (``,``: ``1,5`` is 1.5)."""
    kinds = {_kind(f) for f in files}
    if len(kinds) != 1 or "unknown" in kinds:
        raise TraceFormatError(f"a table is CSV/TSV, Parquet or JSON lines files of one kind; got "
                               f"{sorted({f.name for f in files})[:5]}")
    lst = "[" + ", ".join(file_lit(f) for f in files) + "]"
    kind = kinds.pop()
    if kind == "parquet":
        return f"read_parquet({lst}, filename = {lit(FILE_COLUMN)})"
    if kind == "json":
        extra = ", ignore_errors = true" if lenient else ""
        if json_columns:
            extra += ", columns = {" + ", ".join(f"{lit(c)}: 'JSON'" for c in json_columns) + "}"
        elif json_types:
            extra += ", columns = {" + ", ".join(f"{lit(c)}: {lit(t)}" for c, t in json_types.items()) + "}"
        elif sample_all:
            extra += ", sample_size = -1"
        return (f"read_json({lst}, format = 'newline_delimited', filename = {lit(FILE_COLUMN)}, "
                f"maximum_object_size = {int(MAX_OBJECT)}{extra})")
    extra = (", store_rejects = true" if lenient else "") + _decimal_sql(decimal)
    if dialect:
        types = {k: "VARCHAR" if k in text else v for k, v in dialect["columns"].items()}
        cols = "{" + ", ".join(f"{lit(k)}: {lit(v)}" for k, v in types.items()) + "}"
        extra += (f", auto_detect = false, delim = {lit(dialect['delim'])}, quote = '\"', escape = '\"', "
                  f"skip = {int(dialect['skip'])}, columns = {cols}")
    else:
        if text:
            extra += ", types = {" + ", ".join(f"{lit(c)}: 'VARCHAR'" for c in text) + "}"
        if skip:
            extra += f", skip = {int(skip)}"
    return f"read_csv({lst}, header = true, filename = {lit(FILE_COLUMN)}{extra})"


def json_full_types(con: Any, files: Sequence[Path], cols: dict[str, str],
                    tops: Sequence[str]) -> dict[str, str] | None:
    """The types of JSON lines ``files``' fields detected from every record, where those of a field in ``tops`` differ
    from ``cols`` (detected from the first 20,480 records); else ``None``.

    DuckDB's JSON reader takes a field's type from the first records and casts the rest to it: an ``amount`` of
    ``2.5`` below 20,480 integers was read as ``2`` (the span reader, Python's json, read 2.5), and an agent ``"x"``
    below integer ids became NULL, refused as "no usable agent id". Detected from every record, the field is
    ``DOUBLE`` or DuckDB's ``JSON`` (each value as written), as it is where such a value comes early. One more read
    of the files, by DuckDB."""
    import duckdb

    if all(cols.get(t) in ("JSON", "VARCHAR") for t in tops):  # any value reads as either
        return None
    try:
        src = scan_sql(files, lenient=True, sample_all=True)
        full = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}
    except duckdb.Error:  # the reads that follow say what is wrong
        return None
    if all(full.get(t) == cols.get(t) for t in tops):
        return None
    return {c: t for c, t in full.items() if c != FILE_COLUMN}


def json_values(values: list[Any]) -> list[Any]:
    """The values of a column of DuckDB's JSON type (a field whose values are of more than one JSON type, 7 and
    "b") as what they hold: each is JSON text ('"b"'), ``None`` stays ``None``. A value nested beyond aumann's JSON
    bounds (read by name, DuckDB leaves its text unparsed) is an empty array or object, an unusable value, not a
    RecursionError out of ``json.loads``."""
    return [None if v is None else _json_value(v) for v in values]


def _json_value(text: str) -> Any:
    try:
        return json.loads(text) if len(text) < 4096 else bounded.loads_json(text, what="a value", error=ValueError)
    except (ValueError, RecursionError):
        return {} if text.lstrip().startswith("{") else []


def connect(threads: int | None = None):
    import duckdb

    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.execute("SET preserve_insertion_order = true")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    return con


def arrow_reader(rel: Any, batch_size: int) -> Any:
    """A relation's rows as a pyarrow RecordBatchReader (DuckDB 2: ``to_arrow_reader``; 1.x: ``record_batch``)."""
    if hasattr(rel, "to_arrow_reader"):
        return rel.to_arrow_reader(batch_size)
    return rel.record_batch(batch_size)


def expr(path: str) -> str:
    parts = split_path(path)
    return ".".join(ident(p) for p in parts)



__all__ = ["FILE_COLUMN", "HEADER_SEARCH", "MAX_BLANK_LINES", "MAX_OBJECT", "arrow_reader", "check_gzip", "connect",
           "csv_dialect", "duplicated_columns", "expr", "file_lit", "header_fields", "ident", "json_full_types",
           "json_values", "mixed_line_ends", "refuse_utf16", "scan_sql", "sniff_sql", "table_files", "without_bom"]
