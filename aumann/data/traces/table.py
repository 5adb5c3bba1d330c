"""Long tables — one row per event (or per agent and step) — in CSV/TSV, Parquet or JSON lines, read through
DuckDB (a file, a directory of shards, or a glob such as ``replay/social_media_agent_state.*.jsonl``).

DuckDB scans the files (in parallel, streaming, spilling beyond its memory limit) and hands the columns
the spec names to the shared validator in Arrow batches of ``batch_size`` rows, in file order
(``preserve_insertion_order``), so a refused row is named by its file and its row number (1-based,
header not counted). A nested JSON field ``a/b`` is the struct access ``a.b``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aumann import io as aio
from aumann.data.traces.base import TraceReader, register_format
from aumann.data.traces.duck import (
    FILE_COLUMN,
    HEADER_SEARCH,
    _kind,
    _opens,
    arrow_reader,
    check_gzip,
    connect,
    csv_dialect,
    duplicated_columns,
    expr,
    header_fields,
    ident,
    json_full_types,
    json_values,
    lit,
    mixed_line_ends,
    refuse_utf16,
    scan_sql,
    sniff_sql,
    table_files,
    without_bom,
)
from aumann.data.traces.events import (
    EventBatch,
    RawRecords,
    Validator,
    repeated_key,
    repeated_key_reason,
    split_path,
)
from aumann.errors import TraceFormatError, TraceRecordError, TraceSchemaError, TraceSpecError


@register_format
class TableReader(TraceReader):
    """A long table read through DuckDB (see the module docstring)."""

    name = "table"
    unit = "row"

    @classmethod
    def sniff(cls, path: Path) -> bool:
        files = table_files(path)
        return bool(files) and len({_kind(f) for f in files}) == 1 and _kind(files[0]) != "unknown"

    def batches(self, validator: Validator) -> Iterator[EventBatch]:
        import tempfile

        files = table_files(self.path)
        if not files:
            raise TraceFormatError(f"no table files at {str(self.path)!r} (CSV/TSV, Parquet or JSON lines)")
        self.sources = [str(f) for f in files]
        for f in files:
            if _kind(f) != "parquet":
                refuse_utf16(f)
        self.bytes = sum(f.stat().st_size for f in files)
        if self.bytes == 0:  # DuckDB would read one column named column0 and the spec's fields would be "missing"
            raise TraceFormatError(f"{str(self.path)!r} is empty: no header, no rows" if len(files) == 1 else
                                   f"the {len(files)} files of {str(self.path)!r} are all empty")
        check_gzip(files)
        with tempfile.TemporaryDirectory(prefix="aumann-trace-") as tmp:
            read, names = without_bom(files, Path(tmp))
            yield from self._batches(validator, read, names)

    def _batches(self, validator: Validator, files: list[Path], names: dict[str, str]) -> Iterator[EventBatch]:
        import duckdb

        spec = self.spec
        kind = _kind(files[0])
        con = connect()
        try:
            dialect = csv_dialect(con, files) if kind == "csv" else {}
            src = scan_sql(files, lenient=True, dialect=dialect)
            lines = _CsvLines(src, dialect) if kind == "csv" else None
            want = {"agent": spec.agent.field, "step": spec.step.field}
            if spec.action is not None:
                want["action"] = spec.action.field
            for i, f in enumerate(validator.fields):
                if f.startswith("len:"):
                    raise TraceSpecError(f"field {f!r}: len: applies to Concordia logs only")
                want[f"v{i}"] = f
            for i, w in enumerate(validator.where):
                want[f"w{i}"] = w
            tops = sorted({split_path(p)[0] for p in want.values()})
            try:
                cols = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}
            except duckdb.Error as exc:
                if kind != "json" or "recursion depth" not in str(exc):
                    raise TraceFormatError(f"{_why_csv(kind, files, names)}DuckDB cannot read {str(self.path)!r}: "
                                           f"{str(exc)[:400]}") from exc
                # DuckDB's detection of the columns parses every value: one line nested deeper than its 128 levels
                # failed the whole file ('JSON exceeds maximum recursion depth'), --skip-bad or not; the spec's fields
                # are read by name below, each as JSON text (decoded within aumann's bounds, a bad one a bad record)
                cols = {"json": "JSON", FILE_COLUMN: "VARCHAR"}
            if kind == "json" and set(cols) - {FILE_COLUMN} != {"json"}:
                # the types of the spec's fields from every record, not from the first ones only
                full = json_full_types(con, files, cols, tops)
                if full is not None:
                    src = scan_sql(files, lenient=True, json_types=full)
                    cols = {**full, FILE_COLUMN: "VARCHAR"}
            json_tops: set[str] = {c for c, t in cols.items() if t == "JSON"}
            if kind == "json" and set(cols) - {FILE_COLUMN} == {"json"} and "json" not in tops:
                # some line is not an object (an array, a number): DuckDB then reads every line as one `json`
                # value; read the spec's fields by name instead, each line that is not an object a NULL row
                src = scan_sql(files, lenient=True, json_columns=tops)
                cols = {**{t: "JSON" for t in tops}, FILE_COLUMN: "VARCHAR"}
                json_tops = set(tops)
            missing = sorted({p for p in want.values() if split_path(p)[0] not in cols})
            hint = ""
            if missing and kind == "csv":
                # a line of one field before the header is taken by DuckDB's sniffer for the header itself (lines
                # of several fields it skips): read from the header on, and the lines before it are refused or
                # skipped and counted like any other line before a header (_preamble_lines)
                skip, hint = _header_below(files, names, {split_path(p)[0] for p in want.values()})
                if skip:
                    dialect = csv_dialect(con, files, skip=skip)
                    src = scan_sql(files, lenient=True, dialect=dialect, skip=skip)
                    lines = _CsvLines(src, dialect, skip)
                    try:
                        cols = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}
                    except duckdb.Error as exc:
                        raise TraceFormatError(f"{_why_csv(kind, files, names)}DuckDB cannot read "
                                               f"{str(self.path)!r} from its header on (line {skip + 1}): "
                                               f"{str(exc)[:400]}") from exc
                    missing = sorted({p for p in want.values() if split_path(p)[0] not in cols})
            if missing:
                shown = [c for c in cols if c != FILE_COLUMN]
                raise TraceSchemaError(f"{str(self.path)!r} has no column(s) {missing}; its columns are {shown}"
                                       + (hint or _case_hint(missing, shown)))
            twice = duplicated_columns(files, kind, names, set(tops), [c for c in cols if c != FILE_COLUMN])
            if twice:
                raise TraceSchemaError(twice)
            twice_rows = _repeated_keys(files, names, [split_path(p) for p in want.values()]) if kind == "json" else {}
            if lines is not None:
                lines.header = [c for c in cols if c != FILE_COLUMN]
                _preamble_lines(files, validator, names, lines)
            sel = ", ".join(f"{_select(p, json_tops)} AS {ident(k)}" for k, p in want.items())
            try:
                types = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT {sel} FROM {src}").fetchall()}
                if kind == "json" and json_tops != set(tops) and (_lossy_id(types.get("agent"))
                                                                  or _temporal(types.get("agent"))):
                    # agent ids DuckDB reads as floating point (JSON numbers beyond 2⁶⁴): 2⁷⁰ and 2⁷⁰ + 1 were one
                    # agent, labelled 1.18e+21; or as dates (the text "epoch" was the agent 1900-01-01): read the
                    # spec's fields as JSON text, each id decoded as it is written
                    src = scan_sql(files, lenient=True, json_columns=tops)
                    json_tops = set(tops)
                    sel = ", ".join(f"{_select(p, json_tops)} AS {ident(k)}" for k, p in want.items())
                    types = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT {sel} FROM {src}").fetchall()}
                # a CSV column of agent ids: is every value a number (None: not known yet)
                number_ids: bool | None = False
                if kind == "csv":
                    # agent ids DuckDB's sniffer took for floating point are read as text (ids one apart beyond 2⁵³
                    # merged); where every value of the column is a number, each is read as the number it spells.
                    # In a column it took for integers, a value that is no decimal integer (0x10, which DuckDB's cast
                    # read as 16, or text below the rows the sniffer read) decides it when it comes
                    # A column it took for dates or times (inf, infinity and epoch are dates to DuckDB), or for true and
                    # false, is read as text too: an id as written (epoch was the id 1970-01-01, true no id at all), a
                    # number where every value is one
                    floating = _textual_id(types.get("agent"))
                    # A column it took for text may hold numbers only too (inf and 0: the sniffer reads no inf as a
                    # number), read as numbers like any other (inf no usable id, as 1e400 is), not as text ('inf')
                    floating = floating or types.get("agent") == "VARCHAR"
                    number_ids = None if types.get("agent") in _INTEGER else False
                    src, sel, types = _decimal_integers(con, files, dialect, want, types, src, sel,
                                                        lines.skip if lines is not None else 0)
                    if floating:
                        number_ids = _all_numbers(con, src, want["agent"])
                rdr = arrow_reader(con.sql(f"SELECT {ident(FILE_COLUMN)}, {sel} FROM {src}"), spec.batch_size)
            except duckdb.Error as exc:
                raise TraceSchemaError(f"DuckDB cannot select the spec's fields from {str(self.path)!r}: "
                                       f"{str(exc)[:400]}") from exc
            # a field whose values are of more than one JSON type (a number among strings) is DuckDB's JSON type:
            # its values are JSON text ('"a"'), decoded here into what the record holds
            decode = {k for k, t in types.items() if t == "JSON"}
            row_in_file: dict[str, int] = {}
            while True:
                try:
                    rb = rdr.read_next_batch()
                except StopIteration:
                    break
                except duckdb.Error as exc:
                    done = sum(row_in_file.values())
                    raise TraceFormatError(f"{_why_csv(kind, files, names)}DuckDB stopped reading "
                                           f"{str(self.path)!r} after {done} row(s): {str(exc)[:400]}") from exc
                except Exception as exc:  # pyarrow wraps DuckDB's errors in the batch reader
                    done = sum(row_in_file.values())
                    raise TraceFormatError(f"{_why_csv(kind, files, names)}reading {str(self.path)!r} stopped "
                                           f"after {done} row(s): {str(exc)[:400]}") from exc
                n = rb.num_rows
                if n == 0:
                    continue
                validator.tally.records += n
                fn = [names.get(f, f) for f in rb.column(0).to_pylist()]
                loc = _locations(fn, row_in_file)
                if lines is not None:  # a CSV record is named by its line in the file, looked up when named
                    raw = RawRecords(fn[0], "line")
                    raw.loc = _LineNames(lines, fn, loc, named=len(row_in_file) > 1)
                    if len(row_in_file) > 1:
                        raw.source, raw.unit = str(self.path), "at"
                elif len(row_in_file) > 1:
                    raw = RawRecords("", self.unit)
                    raw.loc = [f"{Path(f).name} row {r}" for f, r in zip(fn, loc)]
                    raw.source, raw.unit = str(self.path), "at"
                else:
                    raw = RawRecords(fn[0], self.unit)
                    raw.loc = loc
                col = {rb.schema.names[i]: rb.column(i) for i in range(1, rb.num_columns)}

                def values(key: str, plain: bool = False, col=col, times: bool = False) -> Any:
                    if key in decode:
                        return json_values(col[key].to_pylist())
                    if f"{key}{_TEXT}" in col and col[key].null_count:  # an integer column's non-decimal text
                        return [t if v is None else v for v, t in zip(col[key].to_pylist(),
                                                                      col[f"{key}{_TEXT}"].to_pylist())]
                    return col[key].to_pylist() if plain else _arrow_values(col[key], times=times)

                raw.agent = values("agent")
                if number_ids is None and f"agent{_TEXT}" in col and col["agent"].null_count and col[
                        f"agent{_TEXT}"].null_count < n:
                    with con.cursor() as cur:  # the first value of an integer column that is no decimal integer
                        number_ids = _all_numbers(cur, src, want["agent"])
                if number_ids:
                    raw.agent = _number_ids(raw.agent)
                elif number_ids is False and f"agent{_TEXT}" in col:
                    # a column of text (an id in it is no number): every id as written, also where the record whose id
                    # made it text is skipped (else the ids left were the integers 0, ... where all others read '0')
                    raw.agent = [str(v) if isinstance(v, int) else v for v in raw.agent]
                raw.step = values("step", times=True)
                raw.action = values("action", plain=True) if "action" in col else [None] * n
                raw.values = {f: values(f"v{i}") for i, f in enumerate(validator.fields)}
                raw.where = {w: values(f"w{i}", plain=True) for i, w in enumerate(validator.where)}
                if kind == "json":  # a line DuckDB could not read as an object is a row of NULLs
                    empty = np.logical_and.reduce([np.asarray(c.is_null()) for c in col.values()])
                    bad = [(empty, _NOT_AN_OBJECT)]
                    if twice_rows:  # a key the spec reads given twice in one object (DuckDB read the first value)
                        marks = [twice_rows.get(f, {}).get(r) for f, r in zip(fn, loc)]
                        bad += [(np.fromiter((m == path for m in marks), dtype=bool, count=n),
                                 repeated_key_reason(path)) for path in sorted({m for m in marks if m is not None})]
                    bad = [(mask, why) for mask, why in bad if mask.any()]
                    bad.sort(key=lambda mw: int(np.argmax(mw[0])))  # under on_bad = 'error', the first row is named
                    keep = np.ones(n, dtype=bool)
                    for mask, why in bad:
                        keep &= validator.refuse(raw, mask & keep, why)
                    if not keep.all():
                        raw = _subset(raw, np.flatnonzero(keep))
                b = validator.to_batch(raw)
                if b is not None:
                    yield b
            if lines is not None:
                _rejected_lines(con, validator, names, lines)
        finally:
            con.close()


_WIDE = ("BIGNUM", "VARINT")  # DuckDB's integers of any length (VARINT before 2.0): Arrow gets their raw bytes
_FLOATING = ("DOUBLE", "FLOAT", "REAL")


def _case_hint(missing: list[str], columns: list[str]) -> str:
    """Why a column the file has is not found: DuckDB's names are case-insensitive, so of two columns differing only
    in case (``Agent`` and ``agent``) the second is read as ``agent_1``."""
    renamed = [c for m in missing for c in columns
               if c.lower() != m.lower() and c.lower().rsplit("_", 1)[0] == m.lower() and c.rsplit("_", 1)[-1].isdigit()
               and any(o.lower() == m.lower() for o in columns)]
    if not renamed:
        return ""
    return (f" (columns differing only in case are one name to DuckDB: the second is renamed {renamed}; rename the "
            "column in the file so that no two differ only in case)")


def _why_csv(kind: str, files: list[Path], names: dict[str, str]) -> str:
    """A cause DuckDB's CSV errors do not name, put before them: a file that mixes line endings
    (:func:`~aumann.data.traces.duck.mixed_line_ends`); '' for other kinds, or when none does."""
    return mixed_line_ends(files, names) if kind == "csv" else ""


def _temporal(t: str | None) -> bool:
    """Whether DuckDB type ``t`` is a date, time, timestamp or interval."""
    return t is not None and t.startswith(("DATE", "TIME", "INTERVAL"))


def _textual_id(t: str | None) -> bool:
    """Whether a CSV agent column DuckDB's sniffer typed ``t`` is read as text, each id as written (or as the number
    it spells, where every value of the column spells one): any type but integers and text (floating point, decimals,
    dates and times, booleans: ``true`` in a CSV file is the text a JSON ``"true"`` is)."""
    return t is not None and t not in _INTEGER and t != "VARCHAR"


def _lossy_id(t: str | None) -> bool:
    """Whether agent ids of DuckDB type ``t`` may not be what the file holds: floating point (two integer ids beyond
    2⁵³ or 2⁶⁴ that differ become one number), a decimal, or raw bytes of a BIGNUM."""
    return t is not None and (t in _FLOATING or t in _WIDE or t.startswith("DECIMAL"))


_TEXT = ":text"  # the suffix of the column holding an integer CSV column's values that are not decimal integers
_INTEGER = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT",
            "UHUGEINT")


def _decimal_integers(con: Any, files: list[Path], dialect: dict[str, Any], want: dict[str, str],
                      types: dict[str, str], src: str, sel: str, skip: int = 0) -> tuple[str, str, dict[str, str]]:
    """(scan, selection, types) where the step and numeric columns DuckDB detected as integers read only
    decimal integers: DuckDB's integer cast also takes ``0x10`` (16), ``0b11`` (3) and ``1_000``, so such a
    value in a column of integers became a number. The column is read as text; a value that is a decimal
    integer (fitting BIGINT) is selected as one, any other is handed over as its text (``key`` + ``_TEXT``),
    which the validator refuses (or skips and counts) as not a number.

    Columns of integers too long for HUGEINT, which DuckDB reads as BIGNUM and hands to Arrow as raw bytes (an id
    of 40 digits, and with it every id of the column, became ``b'\\x80...'``; a step or value of 40 digits was
    "not a number"), and agent ids read as floating point (ids one apart merged), are read as text too: an id as
    written, a step or value as the number it spells.

    So are agent ids DuckDB's sniffer took for anything but integers or text, and numeric columns it took for dates
    or times: ``inf``, ``infinity`` and ``epoch`` are dates to it, and converting the infinite ones to Python dates
    raised a bare OverflowError out of the reader, while ``epoch`` became the agent ``1970-01-01`` and ``true`` was
    refused as a flag; as text, an id is as written and a value not a number (``inf``: not finite)."""
    keys = [k for k in want if (k in ("step", "agent") or k.startswith("v")) and types.get(k) in _INTEGER]
    wide = [k for k in want if types.get(k) in _WIDE or (k == "agent" and _textual_id(types.get(k)))
            or (k.startswith("v") and _temporal(types.get(k)))]
    if not keys and not wide:
        return src, sel, types
    src = scan_sql(files, lenient=True, dialect=dialect, text=sorted({want[k] for k in keys + wide}), skip=skip)
    parts = []
    for k, p in want.items():
        if k in keys:
            # an agent id only as an integer prints (' 1', 01 and +1 make a column of text, ids as written, which
            # may hold its first text further down)
            pattern = "0|-?[1-9][0-9]*" if k == "agent" else "\\s*[-+]?[0-9]+\\s*"
            num = f"TRY_CAST(CASE WHEN regexp_full_match({expr(p)}, '{pattern}') THEN {expr(p)} END AS BIGINT)"
            parts += [f"{num} AS {ident(k)}", f"CASE WHEN {num} IS NULL THEN {expr(p)} END AS {ident(k + _TEXT)}"]
        else:
            parts.append(f"{expr(p)} AS {ident(k)}")
    sel = ", ".join(parts)
    types = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT {sel} FROM {src}").fetchall()}
    return src, sel, types


#: a number written in decimal (a minus, digits with a fraction and an exponent; nan, inf), as Python's float reads
#: it, but not as DuckDB's sniffer reads a column of text: with a leading zero (01, zero-padded ids) or a plus (+1),
#: nor with a space before or after it (' 1'): an agent id is as written in every format, and a JSON " 1" is text
_NUMBER = r"-?((0|[1-9][0-9]*)(\.[0-9]*)?([eE][-+]?[0-9]+)?|\.[0-9]+([eE][-+]?[0-9]+)?|nan|inf|infinity)"


def _all_numbers(con: Any, src: str, path: str) -> bool:
    """Whether every value of CSV column ``path`` (read as text by ``src``) spells a number in decimal (DuckDB's
    sniffer looks at the first rows only: a text id further down makes the column one of text; ``0x10`` and
    ``1_000``, which DuckDB's casts read as 16 and 1000, are text)."""
    e = expr(path)
    return con.execute(f"SELECT 1 FROM {src} WHERE {e} IS NOT NULL AND NOT regexp_full_match({e}, {lit(_NUMBER)}, "
                       "'i') LIMIT 1").fetchall() == []  # (a column of text: over at its first id that is text)


_INT_TEXT = re.compile(r"\s*[-+]?[0-9]+\s*")
_FLOAT_TEXT = re.compile(_NUMBER, re.IGNORECASE)


def _number_ids(values: list[Any]) -> list[Any]:
    """The agent ids of a CSV column of numbers, read as text, as the numbers they spell, as every other reader reads
    a column of numbers: an integer is an int (beyond 64 bits, the text it is), ``1.0`` or ``1e0`` a float, which
    the validator makes the integer id ``1`` (counted in ``float_ids``), ``1.5`` a float. A float beyond ±2⁵³ stays
    the text it is: two such ids one apart would be one float."""
    out: list[Any] = []
    for v in values:
        if not isinstance(v, str):
            out.append(v)
        elif _INT_TEXT.fullmatch(v):
            n = int(v)
            out.append(n if -(2**63) <= n < 2**63 else v.strip())
        elif _FLOAT_TEXT.fullmatch(v):
            f = float(v)
            out.append(f if not abs(f) > 2**53 or f != f or abs(f) == float("inf") else v.strip())
        else:
            out.append(v)
    return out


#: the reason a JSON line is refused (or skipped and counted) when DuckDB read no field of it
_NOT_AN_OBJECT = ("not a JSON object holding any of the spec's fields (malformed or truncated JSON, another JSON "
                  "value such as an array, or an object with none of those fields)")


def _select(path: str, json_tops: set[str]) -> str:
    """The SQL that reads field ``path``: the column (a struct access for ``a/b``), or inside a column of DuckDB's
    JSON type a JSON path (its value stays JSON text, decoded by the reader)."""
    parts = split_path(path)
    if parts[0] in json_tops and len(parts) > 1:
        jp = "$" + "".join('."' + k.replace("\\", "\\\\").replace('"', '\\"') + '"' for k in parts[1:])
        return f"json_extract({ident(parts[0])}, {lit(jp)})"
    return expr(path)


def _subset(raw: RawRecords, idx: np.ndarray) -> RawRecords:
    """The records ``idx`` of ``raw``."""
    out = RawRecords(raw.source, raw.unit)
    out.loc = [raw.loc[i] for i in idx]

    def take(v: Any) -> Any:
        return v[idx] if isinstance(v, np.ndarray) else [v[i] for i in idx]

    out.agent, out.step, out.action = take(raw.agent), take(raw.step), take(raw.action)
    out.values = {k: take(v) for k, v in raw.values.items()}
    out.where = {k: take(v) for k, v in raw.where.items()}
    return out


#: why DuckDB left a CSV line out (``reject_errors.error_type``), as the report names it
_REJECTED = {"UNQUOTED VALUE": "a CSV line with an unterminated quote (or text after a closing quote)",
             "CAST": "a CSV value that does not read as its column's detected type"}
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
        raise TraceRecordError(f"{names.get(f, f)} line {line}: {_REJECTED.get(why, _SPLIT)} ({why.lower()}; "
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

    def __init__(self, src: str, dialect: dict[str, Any], skip: int = 0) -> None:
        self.src, self.dialect, self.skip = src, dialect, skip  # skip: the lines before the header the scan skips
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
                                                       f"{sniff_sql(f, self.skip)}").fetchone()
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
            if self.header:
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


_BLANK = re.compile(rb"^[ \t\r\f\v]*\n", re.MULTILINE)


def _nonblank(chunk: bytes, a: int, b: int) -> int:
    """Lines of ``chunk[a:b]`` (both at line starts) that hold more than whitespace: DuckDB's rows."""
    return chunk.count(b"\n", a, b) - len(_BLANK.findall(chunk, a, b))


def _key_lines(arr: np.ndarray, nl: np.ndarray, key: bytes, freq: np.ndarray) -> np.ndarray:
    """Indices (into the lines that ``nl``, the positions of the newlines, end) of the lines of ``arr`` where
    ``key`` occurs more than once (vectorised: the positions of the key's byte that is rarest in ``arr``, whose
    byte counts ``freq`` are, narrowed byte by byte)."""
    n = arr.shape[0] - len(key) + 1
    if n <= 0:
        return np.empty(0, dtype=np.int64)
    a = min(range(len(key)), key=lambda j: freq[key[j]])
    pos = np.flatnonzero(arr[a:a + n] == key[a])
    for j, byte in enumerate(key):
        if j != a:
            pos = pos[arr[pos + j] == byte]
    line = np.searchsorted(nl, pos)
    return np.unique(line[1:][line[1:] == line[:-1]])


_HEX = np.full(256, -1, dtype=np.int64)
_HEX[np.frombuffer(b"0123456789", dtype=np.uint8)] = np.arange(10)
_HEX[np.frombuffer(b"abcdef", dtype=np.uint8)] = np.arange(10, 16)
_HEX[np.frombuffer(b"ABCDEF", dtype=np.uint8)] = np.arange(10, 16)


def _escape_lines(arr: np.ndarray, nl: np.ndarray, chars: np.ndarray) -> np.ndarray:
    """Indices of the lines of ``arr`` holding a ``\\uXXXX`` escape of one of the characters ``chars`` (code points)
    of the keys the spec reads: ``"\\u0061gent"`` is the key ``"agent"``, which the key's text does not find
    (vectorised: one pass for the backslashes, which are few)."""
    bs = np.flatnonzero(arr[:-5] == 92)  # a backslash with room for u and four hex digits after it
    bs = bs[arr[bs + 1] == 117]  # \u
    if bs.size == 0:
        return np.empty(0, dtype=np.int64)
    digits = _HEX[arr[bs[:, None] + np.arange(2, 6)]]
    cp = digits @ np.array([4096, 256, 16, 1])
    hit = bs[(digits >= 0).all(axis=1) & np.isin(cp, chars)]
    return np.unique(np.searchsorted(nl, hit))


def _repeated_keys(files: list[Path], names: dict[str, str], paths: list[tuple[str, ...]]) -> dict[str, dict[int, str]]:
    """{file: {row: field path}} of the JSON lines where an object on a path the spec reads gives its key twice
    (:func:`~aumann.data.traces.events.repeated_key`): DuckDB reads the first value of such a key, Python's json
    (the span reader) the last, so the line is refused (or skipped and counted) by its row in both readers. The
    lines where a key's text occurs twice are found in blocks (numpy), and json looks at those few. Rows are counted
    as DuckDB counts them: lines holding more than whitespace."""
    import json

    keys = sorted({json.dumps(k, ensure_ascii=a).encode() for p in paths for k in p for a in (True, False)})
    chars = np.array(sorted({ord(c) for p in paths for k in p for c in k}), dtype=np.int64)
    found: dict[str, dict[int, str]] = {}
    for f in files:
        rows: dict[int, str] = {}
        base, carry = 0, b""
        with _opens(f) as fh:
            if fh.read(len(aio.BOM)) != aio.BOM:
                fh.seek(0)
            while True:
                block = fh.read(1 << 22)
                data = carry + block
                if not data:
                    break
                cut = len(data) if not block else data.rfind(b"\n") + 1
                if cut == 0:  # no whole line yet
                    carry = data
                    continue
                chunk, carry = data[:cut], data[cut:]
                arr = np.frombuffer(chunk, dtype=np.uint8)
                nl = np.flatnonzero(arr == 10)
                freq = np.bincount(arr, minlength=256)
                # a key's text twice, or a key written with escapes (its text not found: decoded to be sure)
                cand = np.unique(np.concatenate([_key_lines(arr, nl, k, freq) for k in keys]
                                                + [_escape_lines(arr, nl, chars)])) if keys else []
                last, count = 0, base
                for i in cand.tolist() if len(cand) else []:
                    start = int(nl[i - 1]) + 1 if i > 0 else 0
                    end = int(nl[i]) if i < nl.shape[0] else len(chunk)
                    count += _nonblank(chunk, last, start)
                    last = start
                    path = repeated_key(chunk[start:end], paths)
                    if path is not None:
                        rows[count + 1] = path
                base = count + _nonblank(chunk, last, cut if chunk.endswith(b"\n") else last)
                if not block:
                    break
        if rows:
            found[names.get(str(f), str(f))] = rows
    return found


def _locations(filenames: list[str], counters: dict[str, int]) -> list[int]:
    out = []
    for f in filenames:
        c = counters.get(f, 0) + 1
        counters[f] = c
        out.append(c)
    return out


def _arrow_values(arr: Any, times: bool = False) -> Any:
    """An Arrow column as an int64/float64 numpy array where it is numeric without nulls, else a list; with
    ``times``, a timestamp or date column as datetime64 in its own unit (NaT where null): Python datetimes
    stop at year 9999 (pyarrow's ``to_pylist`` raises OverflowError past it) and drop nanoseconds."""
    import pyarrow as pa

    t = arr.type
    if (pa.types.is_integer(t) or pa.types.is_floating(t)) and arr.null_count == 0:
        return arr.to_numpy(zero_copy_only=False)
    if times and (pa.types.is_timestamp(t) or pa.types.is_date(t)):
        return arr.to_numpy(zero_copy_only=False)
    if pa.types.is_decimal(t) and t.scale == 0:  # DuckDB's HUGEINT (JSON integers of both signs): Decimal('-1') was
        return [None if v is None else int(v) for v in arr.to_pylist()]  # no int, and the ids text ('-1', '3')
    return arr.to_pylist()


__all__ = ["TableReader"]
