"""Long tables — one row per event (or per agent and step) — in CSV/TSV, Parquet or JSON lines, read through
DuckDB (a file, a directory of shards, or a glob such as ``replay/social_media_agent_state.*.jsonl``).

DuckDB scans the files (in parallel, streaming, spilling beyond its memory limit) and hands the columns
the spec names to the shared validator in Arrow batches of ``batch_size`` rows, in file order
(``preserve_insertion_order``), so a refused row is named by its file and its row number (1-based,
header not counted). A nested JSON field ``a/b`` is the struct access ``a.b``. A CSV row is named by its line in the
file (:mod:`aumann.data.traces.csvlines`); a JSON lines row giving a key twice is found by a byte scan
(:mod:`aumann.data.traces.jsonlines`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from aumann.data.traces.base import TraceReader, register_format
from aumann.data.traces.csvlines import _CsvLines, _header_below, _LineNames, _preamble_lines, _rejected_lines
from aumann.data.traces.duck import (
    FILE_COLUMN,
    _kind,
    arrow_reader,
    check_gzip,
    connect,
    csv_dialect,
    declared_header,
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
    table_files,
    without_bom,
)
from aumann.data.traces.durations import duration_scales, scaled
from aumann.data.traces.encoding import (
    LONE_SURROGATE,
    NOT_UTF8,
    lone_surrogate,
    lone_surrogate_rows,
    not_utf8,
    undecodable_rows,
)
from aumann.data.traces.events import (
    _DECIMAL_COMMA,
    EventBatch,
    RawRecords,
    Validator,
    split_path,
)
from aumann.data.traces.idtext import _NUMBER, _number_ids, bytes_as_text
from aumann.data.traces.jsonlines import LongLine, _repeated_keys, without_long_lines
from aumann.errors import TraceFormatError, TraceRecordError, TraceSchemaError, TraceSpecError


@register_format
class TableReader(TraceReader):
    """A long table read through DuckDB (see the module docstring)."""

    name = "table"
    unit = "row"
    spec_keys = frozenset({"csv"})

    @classmethod
    def sniff(cls, path: Path) -> bool:
        files = table_files(path)
        # a .txt file is a table only where the spec says so (format = "table"): by its name, any note would be one
        return bool(files) and len({_kind(f) for f in files}) == 1 and _kind(files[0]) != "unknown" and not any(
            f.name.lower().removesuffix(".gz").endswith(".txt") for f in files)

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
            yield from self._batches(validator, read, names, Path(tmp))

    def _batches(self, validator: Validator, files: list[Path], names: dict[str, str],
                 tmp: Path) -> Iterator[EventBatch]:
        import duckdb

        spec = self.spec
        kind = _kind(files[0])
        con = connect()
        try:
            declared = spec.csv.header_line
            if declared is not None and kind != "csv":
                raise TraceSpecError(f"[csv] header_line applies to CSV tables; {str(self.path)!r} is {kind}")
            # the spec's [csv] header_line: the lines before it are not read (a NetLogo BehaviorSpace table's six)
            first = declared - 1 if declared is not None else 0
            dec = spec.csv.decimal_separator  # ',' : a CSV file's 1,5 is 1.5 (DuckDB's decimal_separator)
            if dec != "." and kind != "csv":
                raise TraceSpecError(f"[csv] decimal_separator applies to CSV tables; {str(self.path)!r} is {kind}")
            dialect = csv_dialect(con, files, skip=first, decimal=dec) if kind == "csv" else {}
            src = scan_sql(files, lenient=True, dialect=dialect, skip=first, decimal=dec)
            lines = (_CsvLines(src, dialect, first, declared=declared is not None, decimal=dec) if kind == "csv"
                     else None)
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
            bad_rows: dict[str, dict[int, str]] = {}
            if kind == "json":
                # rows giving a key the spec reads twice, and lines over DuckDB's maximum_object_size: one such line
                # failed the whole file, --skip-bad or not; each is now a bad record, blanked out before DuckDB reads
                long: list[LongLine] = []
                bad_rows = _repeated_keys(files, names, [split_path(p) for p in want.values()], long)
                if long:
                    if spec.on_bad == "error":
                        first = long[0]
                        shown = names.get(str(first.file), str(first.file))
                        raise TraceRecordError(f"{shown} row {first.row} (line {first.line}): "
                                               f"{bad_rows[shown][first.row]}, the most a JSON lines table's line may "
                                               f"hold ({len(long)} such line(s); on_bad = 'skip' in the spec skips and "
                                               "counts such records)")
                    files, names = without_long_lines(files, names, long, tmp)
                    src = scan_sql(files, lenient=True, dialect=dialect)
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
                # JSON strings DuckDB took for times or dates in an action or [where] field are text as written: the
                # string "12:00" was the time 12:00:00, which [where] slot = ["12:00"] never matched (the span reader,
                # which reads JSON as it is, matched it), and "2026-04-20T12:00:00" was "2026-04-20 12:00:00"
                texts = _written_text_tops(want, cols)
                # a nested field (a/b) they read that DuckDB typed so: its top column is read as JSON, each value of
                # it as written (DuckDB's struct held the time 12:00:00 and the UUID in lowercase)
                nested = _written_text_nested(con, src, want, cols)
                if texts or nested:
                    typed = {c: ("JSON" if c in nested else "VARCHAR" if c in texts else t) for c, t in cols.items()
                             if c != FILE_COLUMN}
                    src = scan_sql(files, lenient=True, json_types=typed)
                    cols = {**typed, FILE_COLUMN: "VARCHAR"}
            json_tops: set[str] = {c for c, t in cols.items() if t == "JSON"}
            if kind == "json" and set(cols) - {FILE_COLUMN} == {"json"} and "json" not in tops:
                # some line is not an object (an array, a number): DuckDB then reads every line as one `json`
                # value; read the spec's fields by name instead, each line that is not an object a NULL row
                src = scan_sql(files, lenient=True, json_columns=tops)
                cols = {**{t: "JSON" for t in tops}, FILE_COLUMN: "VARCHAR"}
                json_tops = set(tops)
            missing = sorted({p for p in want.values() if split_path(p)[0] not in cols})
            hint = ""
            if kind == "csv" and declared is not None:
                # every file's header on the declared line (shards of one table share it); else say where it is
                wrong = declared_header(files, names, {split_path(p)[0] for p in want.values()}, declared)
                if wrong:
                    raise TraceSchemaError(wrong)
            elif missing and kind == "csv":
                # a line of one field before the header is taken by DuckDB's sniffer for the header itself (lines
                # of several fields it skips): read from the header on, and the lines before it are refused or
                # skipped and counted like any other line before a header (_preamble_lines)
                skip, hint = _header_below(files, names, {split_path(p)[0] for p in want.values()})
                if not skip and not hint and any("/" in p for p in want.values()):
                    # a header naming a column with '/' (a BehaviorSpace reporter) below the lines before it
                    whole = {p if "/" in p else split_path(p)[0] for p in want.values()}
                    at, fields = header_fields(files[0], whole)
                    if at is not None:
                        hint = _slash_hint(sorted(p for p in whole if "/" in p), fields)
                if skip:
                    dialect = csv_dialect(con, files, skip=skip, decimal=dec)
                    src = scan_sql(files, lenient=True, dialect=dialect, skip=skip, decimal=dec)
                    lines = _CsvLines(src, dialect, skip, decimal=dec)
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
                                       + (hint or _case_hint(missing, shown) or _slash_hint(missing, shown)))
            twice = duplicated_columns(files, kind, names, set(tops), [c for c in cols if c != FILE_COLUMN])
            if twice:
                raise TraceSchemaError(twice)
            if lines is not None:
                lines.header = [c for c in cols if c != FILE_COLUMN]
                _preamble_lines(files, validator, names, lines)
            # Parquet durations (pandas timedelta64): DuckDB reads them as plain BIGINT counts of the file's unit
            scale = (duration_scales(files, want, binned=spec.step.binned, unit=spec.step.unit)
                     if kind == "parquet" else {})
            if spec.step.bin is not None and not isinstance(spec.step.bin, str) and spec.step.unit != "s" \
                    and "step" not in scale:  # a numeric bin counts the numbers' own units: unit read nothing
                raise TraceSpecError(f"[step] unit = {spec.step.unit!r} with a numeric bin ({spec.step.bin!r}): a "
                                     "numeric bin counts the step field's own units, and unit scales only a Parquet "
                                     f"duration column, which step field {spec.step.field!r} of {str(self.path)!r} is "
                                     "not (it would change nothing): give bin as a duration (bin = '1h' with unit = "
                                     "'ms' bins epoch milliseconds into hours), or remove unit")
            sel = ", ".join(f"{scaled(_select(p, json_tops), scale.get(k))} AS {ident(k)}" for k, p in want.items())
            try:
                types = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT {sel} FROM {src}").fetchall()}
                if kind == "json" and json_tops != set(tops) and (_lossy_id(types.get("agent"))
                                                                  or _temporal(types.get("agent"))
                                                                  or types.get("agent") == "UUID"):
                    # agent ids DuckDB reads as floating point (JSON numbers beyond 2⁶⁴): 2⁷⁰ and 2⁷⁰ + 1 were one
                    # agent, labelled 1.18e+21; or as dates (the text "epoch" was the agent 1900-01-01): read the
                    # spec's fields as JSON text, each id decoded as it is written (a UUID is text too: DuckDB's UUID
                    # type wrote 550E8400-... in lowercase, one agent with 550e8400-..., which the span reader keeps
                    # apart)
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
                                                        lines.skip if lines is not None else 0, dec)
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
            utf8: dict[str, dict[int, int]] = {}  # JSON lines file → {row: its first byte that is no UTF-8}
            lone: dict[str, dict[int, str]] = {}  # JSON lines file → {row: its lone surrogate escape}
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
                    if _binary(col[key].type):  # strings stored as bytes: b'a' was the agent "b'a'", b'buy' no "buy"
                        return bytes_as_text(col[key].to_pylist())
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
                if dec != "." and kind == "csv":  # a column read as text: its 1,5 is 1.5 too, as in one of numbers
                    raw.values = {f: _decimal_commas(v) for f, v in raw.values.items()}
                raw.where = {w: values(f"w{i}", plain=True) for i, w in enumerate(validator.where)}
                if kind == "csv" and spec.agent.field in raw.where:  # [where] on the agent field: its ids as the agent
                    # column reads them (1.0 in a column of numbers is the id 1, which [where] agent = [1] names)
                    raw.where[spec.agent.field] = list(raw.agent)
                if kind == "json":  # a line DuckDB could not read as an object is a row of NULLs
                    empty = np.logical_and.reduce([np.asarray(c.is_null()) for c in col.values()])
                    bad = [(empty, _NOT_AN_OBJECT)]
                    if bad_rows:  # a key the spec reads given twice in one object (DuckDB read the first value), or
                        # a line over the limit (read as {}, a row of NULLs)
                        marks = [bad_rows.get(f, {}).get(r) for f, r in zip(fn, loc)]
                        bad = [(empty & np.fromiter((m is None for m in marks), dtype=bool, count=n), _NOT_AN_OBJECT)]
                        bad += [(np.fromiter((m == why for m in marks), dtype=bool, count=n), why)
                                for why in sorted({m for m in marks if m is not None})]
                    if bad[0][0].any():  # a line that is no UTF-8 text (a Latin-1 file): said so, naming its byte
                        undecodable, surrogate = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
                        at: list[int] = []
                        escapes: list[str] = []
                        for i in np.flatnonzero(bad[0][0]).tolist():
                            if fn[i] not in utf8:
                                utf8[fn[i]] = undecodable_rows(Path(fn[i]))
                            byte = utf8[fn[i]].get(loc[i])
                            if byte is not None:
                                undecodable[i] = True
                                at.append(byte)
                                continue
                            if fn[i] not in lone:  # JSON holding a "\udcff" escape: DuckDB refuses it as malformed
                                lone[fn[i]] = lone_surrogate_rows(Path(fn[i]))
                            escape = lone[fn[i]].get(loc[i])
                            if escape is not None:
                                surrogate[i] = True
                                escapes.append(escape)
                        if at or escapes:
                            bad[0] = (bad[0][0] & ~undecodable & ~surrogate, _NOT_AN_OBJECT)
                            error = spec.on_bad == "error"
                            bad.append((undecodable, not_utf8(at[0]) if error and at else NOT_UTF8))
                            bad.append((surrogate, lone_surrogate(escapes[0]) if error and escapes else LONE_SURROGATE))
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


def _slash_hint(missing: list[str], columns: list[str]) -> str:
    """Why a column whose name holds '/' is not found though the header names it (a NetLogo BehaviorSpace reporter
    such as ``count sheep / count wolves``): a field path splits at '/' into nested keys. The error listed the very
    name among the columns it said were missing."""
    whole = [m for m in missing if "/" in m and m in columns]
    if not whole:
        return ""
    escaped = whole[0].replace("/", "\\/")
    return (f" (a field path splits at '/' into nested keys, so {whole} name(s) a key inside a column, not the "
            f"column of that name: write a '/' inside a name as '\\/', in the spec field = '{escaped}', a TOML "
            "literal string in single quotes)")


def _decimal_commas(values: Any) -> Any:
    """Numeric field ``values`` of a CSV table whose spec's ``[csv] decimal_separator`` is a comma: text that is a
    number with a decimal comma (``1,5``, in a column DuckDB read as text) is that number's text with a point."""
    if isinstance(values, np.ndarray):
        return values
    return [v.replace(",", ".") if isinstance(v, str) and _DECIMAL_COMMA.fullmatch(v) else v for v in values]


def _why_csv(kind: str, files: list[Path], names: dict[str, str]) -> str:
    """A cause DuckDB's CSV errors do not name, put before them: a file that mixes line endings
    (:func:`~aumann.data.traces.duck.mixed_line_ends`); '' for other kinds, or when none does."""
    return mixed_line_ends(files, names) if kind == "csv" else ""


def _binary(t: Any) -> bool:
    """Whether Arrow type ``t`` is bytes (DuckDB's BLOB: a Parquet BYTE_ARRAY without the UTF-8 annotation)."""
    import pyarrow as pa

    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


def _label_key(k: str) -> bool:
    """Whether selected key ``k`` is a field compared as written: the action, or a ``[where]`` field."""
    return k == "action" or (k.startswith("w") and k[1:].isdigit())


def _written_text_tops(want: dict[str, str], cols: dict[str, str]) -> set[str]:
    """The top-level JSON fields that only the action or ``[where]`` fields read and DuckDB typed as dates, times or
    UUIDs (which it writes in lowercase: ``550E8400-...`` matched no ``[where]`` list naming it as written):
    read as text, each value as written (a field the agent, step or a numeric feature also reads keeps its type)."""
    label = {split_path(p)[0] for k, p in want.items() if _label_key(k) and len(split_path(p)) == 1}
    other = {split_path(p)[0] for k, p in want.items() if not _label_key(k)}
    return {p for p in label - other if _temporal(cols.get(p)) or cols.get(p) == "UUID"}


def _written_text_nested(con: Any, src: str, want: dict[str, str], cols: dict[str, str]) -> set[str]:
    """The top-level JSON fields holding a nested field (``a/b``) that the action or a ``[where]`` field reads, and no
    agent, step or numeric field reads too, which DuckDB typed as a date, time or UUID (``12:00`` was the time
    ``12:00:00``, ``550E8400-...`` written in lowercase): read as DuckDB's JSON type, each value as written, as the
    span reader reads them (:func:`_written_text_tops` reads such top-level fields as text)."""
    import duckdb

    other = {p for k, p in want.items() if not _label_key(k)}
    nested = {p for k, p in want.items() if _label_key(k) and len(split_path(p)) > 1 and p not in other
              and split_path(p)[0] in cols and cols[split_path(p)[0]].startswith("STRUCT")}
    if not nested:
        return set()
    out = set()
    for p in sorted(nested):
        try:
            t = con.execute(f"DESCRIBE SELECT {expr(p)} AS v FROM {src}").fetchall()[0][1]
        except duckdb.Error:  # the selection that follows says what is wrong
            continue
        if _temporal(t) or t == "UUID":
            out.add(split_path(p)[0])
    return out


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
                      types: dict[str, str], src: str, sel: str, skip: int = 0,
                      decimal: str = ".") -> tuple[str, str, dict[str, str]]:
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
    refused as a flag; as text, an id is as written and a value not a number (``inf``: not finite). So are action and
    ``[where]`` columns it took for anything but text (dates, times, booleans, numbers): compared as written (``12:00``,
    ``TRUE``, ``1.50``, which a DOUBLE column keyed as ``1.5``: ``[where] price = ["1.50"]`` matched nothing), as the
    JSON lines table and the span reader compare the same text."""
    keys = [k for k in want if (k in ("step", "agent") or k.startswith("v")) and types.get(k) in _INTEGER]
    wide = [k for k in want if types.get(k) in _WIDE or (k == "agent" and _textual_id(types.get(k)))
            or ((k.startswith("v") or _label_key(k)) and _temporal(types.get(k)))
            or (_label_key(k) and types.get(k) not in (None, "VARCHAR"))]
    if not keys and not wide:
        return src, sel, types
    text = sorted({split_path(want[k])[0] for k in keys + wide})
    src = scan_sql(files, lenient=True, dialect=dialect, text=text, skip=skip, decimal=decimal)
    parts = []
    for k, p in want.items():
        if k in keys:
            # an agent id only as an integer prints (' 1', 01 and +1 make a column of text, ids as written, which
            # may hold its first text further down)
            pattern = "0|-?[1-9][0-9]*" if k == "agent" else "\\s*[-+]?[0-9]+\\s*"
            num = f"TRY_CAST(CASE WHEN regexp_full_match({expr(p)}, '{pattern}') THEN {expr(p)} END AS BIGINT)"
            parts += [f"{num} AS {ident(k)}", f"CASE WHEN {num} IS NULL THEN {expr(p)} END AS {ident(k + _TEXT)}"]
        elif k.startswith("v") and types.get(k) == "BOOLEAN" and split_path(p)[0] in text:
            # a column of true and false read as text for the action or [where] on it still counts 1 and 0 in a
            # numeric feature (it was the text 'true', "not a finite number"); a word that is no flag stays text
            flag = f"TRY_CAST({expr(p)} AS BOOLEAN)"
            parts += [f"{flag} AS {ident(k)}", f"CASE WHEN {flag} IS NULL THEN {expr(p)} END AS {ident(k + _TEXT)}"]
        else:
            parts.append(f"{expr(p)} AS {ident(k)}")
    sel = ", ".join(parts)
    types = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT {sel} FROM {src}").fetchall()}
    return src, sel, types


def _all_numbers(con: Any, src: str, path: str) -> bool:
    """Whether every value of CSV column ``path`` (read as text by ``src``) spells a number in decimal (DuckDB's
    sniffer looks at the first rows only: a text id further down makes the column one of text; ``0x10`` and
    ``1_000``, which DuckDB's casts read as 16 and 1000, are text)."""
    e = expr(path)
    return con.execute(f"SELECT 1 FROM {src} WHERE {e} IS NOT NULL AND NOT regexp_full_match({e}, {lit(_NUMBER)}, "
                       "'i') LIMIT 1").fetchall() == []  # (a column of text: over at its first id that is text)


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
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        out = arr.to_numpy(zero_copy_only=False)
        if times:
            return out
        # a value field DuckDB took for dates (JSON "-infinity", "epoch"): no number, whatever the dates are; as their
        # text, which the validator refuses (or skips and counts). DuckDB 2.0.1 hands an infinite date to Arrow as its
        # sentinel (day -2147483647), which to_pylist() raised a bare OverflowError on (2.0.0 handed 1900-01-01)
        return [None if np.isnat(v) else str(v) for v in out]
    if pa.types.is_decimal(t) and t.scale == 0:  # DuckDB's HUGEINT (JSON integers of both signs): Decimal('-1') was
        return [None if v is None else int(v) for v in arr.to_pylist()]  # no int, and the ids text ('-1', '3')
    return arr.to_pylist()


__all__ = ["TableReader"]
