"""An exposure feature's edge file (``[features.edges] path``: CSV, Parquet or JSON lines) read through DuckDB, with
the event tables' checks and their treatment of bad rows.

A bad row is refused naming its place under ``on_bad = "error"``, or skipped and counted by reason with its first
places under ``on_bad = "skip"`` (:class:`~aumann.data.traces.edges.EdgeRows`), as an event table's is: a CSV line
that does not split into the header's columns, holds an unterminated quote, is not UTF-8 text, or comes before the
header (named by its line in the file, as :mod:`aumann.data.traces.csvlines` names an event table's); a JSON line
that is no object holding the edge's fields (by its row); an endpoint that is no usable id, a ``since`` that is no
step (:func:`~aumann.data.traces.edges.edge_positions`). A fault of the whole file (no such file, UTF-16, a missing
or twice-named column, durations in an unbinned ``since``) is refused whatever ``on_bad`` says: no row of it can be
read as meant.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aumann.data.traces.csvlines import _CsvLines, _LineNames, _preamble_lines, _rejected_lines
from aumann.data.traces.duck import (
    FILE_COLUMN,
    _kind,
    check_gzip,
    connect,
    csv_dialect,
    declared_header,
    duplicated_columns,
    header_fields,
    ident,
    json_values,
    refuse_utf16,
    scan_sql,
    table_files,
    without_bom,
)
from aumann.data.traces.durations import duration_scales, scaled
from aumann.data.traces.edges import EdgeRows, edge_positions
from aumann.data.traces.events import _DECIMAL_COMMA, Tally, Validator
from aumann.data.traces.idtext import bytes_as_text
from aumann.data.traces.jsonlines import LongLine, _repeated_keys, without_long_lines
from aumann.data.traces.spec import CsvSpec, EdgesSpec, TraceSpec
from aumann.errors import TraceFormatError, TraceSchemaError, TraceSpecError

#: why a JSON lines edge row is bad when DuckDB read none of its edge fields
NOT_AN_EDGE_OBJECT = ("not a JSON object holding the edge's fields (malformed or truncated JSON, another JSON value "
                      "such as an array, or an object with none of them)")


def read_edge_file(path: Path, edges: EdgesSpec, ids: dict[Any, int], coder: Any, *, spec: TraceSpec,
                   tally: Tally | None = None):
    """Edges from a CSV/Parquet/JSONL file through DuckDB; a CSV file laid out as ``edges.csv`` says (its header
    line, its decimal separator). ``spec``: the trace's spec, whose ``on_bad`` says what a bad row does, and whose
    top-level ``[csv]`` (the event table's) is named in the error where an edge file would have been read with it;
    ``tally``: where skipped rows are counted (the reader's ``edge_tally``)."""
    import tempfile

    files = table_files(path)
    if not files:
        raise TraceFormatError(f"edge file {str(path)!r} does not exist")
    check_gzip(files)
    for f in files:  # the event tables' checks, in the same words: a UTF-16 file failed deep in DuckDB's sniffer
        if _kind(f) != "parquet":
            refuse_utf16(f)
    tally = Tally() if tally is None else tally
    with tempfile.TemporaryDirectory(prefix="aumann-edges-") as tmp:
        # a byte-order mark dropped as the event tables drop it: DuckDB refused a JSON lines edge file holding one
        read, names = without_bom(files, Path(tmp))
        before = tally.n_skipped
        s, t, since, info = _read_edges(path, read, names, edges, ids, coder, spec, tally, Path(tmp))
        # lines no row was read from (left out by DuckDB, before the header, not JSON objects) count as rows too:
        # edges = used + unknown_endpoint + skipped, whatever made a row bad
        unread = tally.n_skipped - before - info["skipped"]
        info["edges"] += unread
        info["skipped"] += unread
        return s, t, since, info


def _read_edges(path: Path, files: list[Path], names: dict[str, str], edges: EdgesSpec, ids: dict[Any, int],
                coder: Any, spec: TraceSpec, tally: Tally, tmp: Path):
    import duckdb

    kind = _kind(files[0])
    if all(f.stat().st_size == 0 for f in files):  # DuckDB read one column named column0: the edge columns "missing"
        raise TraceFormatError(f"edge file {str(path)!r} is empty: no header, no rows")
    layout = edges.csv or CsvSpec()
    if kind != "csv" and layout != CsvSpec():
        raise TraceSpecError(f"[features.edges.csv] applies to CSV edge files; {str(path)!r} is {kind}")
    # the edge file's own [features.edges.csv]: a NetLogo BehaviorSpace file's six lines before the header are not
    # read (the sniffer took the first for the header, and the edge columns were "missing"), a European file's 0,5
    # is 0.5 (it was "not a step/timestamp")
    skip = layout.header_line - 1 if layout.header_line is not None else 0
    dec = layout.decimal_separator
    on_bad, events_csv = spec.on_bad, spec.csv
    # the event tables' line-level checks count into the edge tally (a Validator carries on_bad and the tally)
    lines_check = Validator(spec, tally)
    con = connect()
    try:
        need = [edges.source, edges.target] + ([edges.since] if edges.since else [])
        if layout.header_line is not None:
            wrong = declared_header(files, names, set(need), layout.header_line, what="[features.edges.csv]",
                                    shared="the files of an edge table share their header line")
            if wrong:
                raise TraceSchemaError(f"edge file: {wrong}")
        # lenient, as an event table is read: a CSV line that does not split is left out and named by its line
        # (DuckDB's strict sniffer took such a line's fields for the header, and the edge columns were "missing"),
        # a JSON line that does not parse is a row of NULLs in its place (the whole file failed)
        bad_rows: dict[str, dict[int, str]] = {}
        if kind == "json":
            # rows giving an edge field twice ({"src": 1, "src": 2}: DuckDB read the first, silently) and lines over
            # DuckDB's maximum_object_size (which failed the whole file): bad rows, as in an event table
            long: list[LongLine] = []
            bad_rows = _repeated_keys(files, names, [(c,) for c in need], long)
            if long:
                files, names = without_long_lines(files, names, long, tmp)
        dialect = csv_dialect(con, files, skip=skip, decimal=dec) if kind == "csv" else {}
        src = scan_sql(files, lenient=True, dialect=dialect, skip=skip, decimal=dec)
        try:
            cols = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()]
        except duckdb.Error as exc:
            raise TraceFormatError(f"DuckDB cannot read edge file {str(path)!r}: {str(exc)[:300]}") from exc
        if kind == "json" and set(cols) - {FILE_COLUMN} == {"json"} and "json" not in need:
            # a line that is no object (an array): DuckDB then reads every line as one `json` value, and the edge
            # columns were "missing"; read the fields by name, each such line a row of NULLs (a bad row)
            src = scan_sql(files, lenient=True, json_columns=need)
            cols = [*need, FILE_COLUMN]
        missing = [c for c in need if c not in cols]
        if missing:
            shown = [c for c in cols if c != FILE_COLUMN]
            raise TraceSchemaError(f"edge file {str(path)!r} has no column(s) {missing}; its columns are {shown}"
                                   + ((_header_hint(files[0], names, set(need), events_csv) or _no_header(shown))
                                      if kind == "csv" else ""))
        # a header naming an endpoint twice (src,dst,dst): DuckDB read the first and renamed the other dst_1, so the
        # edges silently went to the first column's agents
        twice = duplicated_columns(files, kind, names, set(need), [c for c in cols if c != FILE_COLUMN])
        if twice:
            raise TraceSchemaError(twice)
        lines = None
        if kind == "csv":  # endpoints are ids, whatever type the sniffer guessed from the first rows
            src = scan_sql(files, lenient=True, dialect=dialect, text=[edges.source, edges.target], skip=skip,
                           decimal=dec)
            lines = _CsvLines(src, dialect, skip, declared=layout.header_line is not None, decimal=dec)
            lines.header = [c for c in cols if c != FILE_COLUMN]
            _preamble_lines(files, lines_check, names, lines)
        # a Parquet duration in since (pandas timedelta64) scaled as the event table's step is: DuckDB reads its raw
        # counts of the file's unit, and an edge from 1 s (10⁶ microseconds) existed from the 10⁶-th second on
        scale = (duration_scales(files, {"since": edges.since}, binned=coder.binned, unit=coder.unit_name,
                                 steps=frozenset({"since"}), what=f"edge file {path.name!r}: since field")
                 if edges.since and kind == "parquet" else {})
        sel = ", ".join([ident(FILE_COLUMN)] + [scaled(ident(c), scale.get("since")) + f" AS {ident(c)}"
                                                if c == edges.since else ident(c) for c in need])
        try:
            rel = con.sql(f"SELECT {sel} FROM {src}")
            lossy = [str(t) in ("DOUBLE", "FLOAT", "UUID") or str(t).startswith(("DATE", "TIME", "INTERVAL"))
                     for t in rel.types[1:3]]
            if kind == "json" and any(lossy):
                # endpoints DuckDB read as doubles (JSON numbers beyond 2⁶⁴): 2⁷⁰ + 1 became 2⁷⁰ and its edges
                # went to that agent; as UUIDs, in lowercase (550E8400-... reached no agent, whose id the event table
                # reads as written), or as dates ('epoch'); read the fields as JSON text, each id decoded as written
                rel = con.sql(f"SELECT {', '.join(ident(c) for c in [FILE_COLUMN, *need])} FROM "
                              f"{scan_sql(files, lenient=True, json_columns=need)}")
            # a JSON field whose values are of more than one type (7 and "b") is DuckDB's JSON type: JSON text
            json_cols = [str(t) == "JSON" for t in rel.types[1:]]
            tab = rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()
        except duckdb.Error as exc:  # e.g. a since column of integers with text further down
            raise TraceFormatError(f"DuckDB stopped reading edge file {str(path)!r}: {str(exc)[:300]}") from exc
    except BaseException:
        con.close()
        raise
    try:
        out = _rows(tab, names, lines, json_cols, bad_rows, kind, edges, path, ids, coder, on_bad, tally, dec)
        if lines is not None:  # the lines left out, by their lines in the file; after the rows, as an event table's
            _rejected_lines(con, lines_check, names, lines)
    finally:
        con.close()
    return out


def _rows(tab: Any, names: dict[str, str], lines: _CsvLines | None, json_cols: list[bool],
          bad_rows: dict[str, dict[int, str]], kind: str, edges: EdgesSpec, path: Path, ids: dict[Any, int],
          coder: Any, on_bad: str, tally: Tally, dec: str) -> Any:
    """The edges of the rows DuckDB read (``tab``: the file-name column, then source, target and since), each bad
    one refused or skipped and counted."""
    places = _Places(tab.column(0), names)
    cols_ = [_pylist(tab.column(i)) for i in range(1, tab.num_columns)]
    cols_ = [json_values(c) if j else c for c, j in zip(cols_, json_cols)]
    cols_ = [c if isinstance(c, np.ndarray) else bytes_as_text(c) for c in cols_]  # endpoints stored as bytes reach
    # the agents the event table's text reads
    if edges.since and dec == "," and not isinstance(cols_[2], np.ndarray):  # a since column DuckDB read as text (a
        # word among its numbers): its 0,5 is 0.5, as a numeric field of the event table
        cols_[2] = [v.replace(",", ".") if isinstance(v, str) and _DECIMAL_COMMA.fullmatch(v) else v for v in cols_[2]]
    if edges.since:
        _timestamps_need_bins(tab.schema.field(3).type, edges.since, path, coder)
    locate = _locator(places, lines)
    rows = EdgeRows(on_bad, tally, locate)
    if kind == "json":
        n = len(places)
        # a line DuckDB could not parse (or no object holding the fields): a row of NULLs
        bad = [(np.fromiter((all(_none(c[i]) for c in cols_) for i in range(n)), dtype=bool, count=n),
                NOT_AN_EDGE_OBJECT)]
        marked = ([bad_rows.get(places.file(i), {}).get(places.row(i)) for i in range(n)] if bad_rows else
                  [None] * n)
        bad += [(np.fromiter((m == why for m in marked), dtype=bool, count=n), why)
                for why in sorted({m for m in marked if m is not None})]
        keep = np.ones(n, dtype=bool)
        for mask, why in sorted((b for b in bad if b[0].any()), key=lambda b: int(np.argmax(b[0]))):
            keep &= rows.refuse(mask & keep, why)
        if not keep.all():
            at = np.flatnonzero(keep)
            cols_ = [c[at] if isinstance(c, np.ndarray) else [c[i] for i in at] for c in cols_]
            rows = EdgeRows(on_bad, tally, lambda i: locate(int(at[i])))
    return edge_positions(cols_[0], cols_[1], cols_[2] if edges.since else None, ids, coder, f"edge file {path}",
                          csv=kind == "csv", rows=rows, fields=(edges.source, edges.target, edges.since))


def _none(v: Any) -> bool:
    return v is None or (isinstance(v, np.datetime64) and np.isnat(v))


class _Places(Sequence):
    """The file (its original name) and row number (1-based, as DuckDB counts rows) of each row read, from the scan's
    file-name column, worked out only when a row is named: the rows of a file are contiguous (insertion order kept),
    so the places are the file's first row and an offset. (A list of 10⁶ names and row numbers, built for every read,
    cost about 0.7 s of a 3 s read of 10⁶ edges.)"""

    def __init__(self, column: Any, names: dict[str, str]) -> None:
        col = column.combine_chunks() if hasattr(column, "combine_chunks") else column
        enc = col.dictionary_encode()
        self._idx = enc.indices.to_numpy(zero_copy_only=False)
        self._files = [names.get(f, f) for f in enc.dictionary.to_pylist()]
        changes = np.flatnonzero(np.diff(self._idx)) + 1 if self._idx.size else np.zeros(0, dtype=np.int64)
        self._starts = np.concatenate(([0], changes)).astype(np.int64)

    def __len__(self) -> int:
        return int(self._idx.size)

    def file(self, i: int) -> str:
        return self._files[int(self._idx[i])]

    def row(self, i: int) -> int:
        return int(i - self._starts[np.searchsorted(self._starts, i, side="right") - 1] + 1)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.file(i), self.row(i)


class _Column(Sequence):
    """One part of :class:`_Places` (``"file"`` or ``"row"``), as :class:`_LineNames` indexes it."""

    def __init__(self, places: _Places, part: str) -> None:
        self.places, self.part = places, part

    def __len__(self) -> int:
        return len(self.places)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.places.file(i) if self.part == "file" else self.places.row(i)


def _locator(places: _Places, lines: _CsvLines | None) -> Callable[[int], str]:
    """The place of the ``i``-th row read: ``FILE line N`` in a CSV file (its own line, header included, as the lines
    DuckDB left out are named), else ``FILE row N``."""
    if lines is not None:
        named = _LineNames(lines, _Column(places, "file"), _Column(places, "row"), named=False)  # type: ignore[arg-type]
        return lambda i: f"{places.file(i)} line {named[i]}"
    return lambda i: f"{places.file(i)} row {places.row(i)}"


def _timestamps_need_bins(t: Any, field: str, path: Path, coder: Any) -> None:
    """Refuse a ``since`` column of timestamps where the steps are not bins of a duration: every row of it is no
    step (each was a bad row, and under ``on_bad = "skip"`` every edge was skipped): a fault of the file and the
    spec together, not of a row."""
    import pyarrow as pa

    if (pa.types.is_timestamp(t) or pa.types.is_date(t)) and not (coder.binned and not coder.numeric_width):
        raise TraceSchemaError(f"edge file {str(path)!r}: since field {field!r} holds timestamps ({t}), and the "
                               "steps are " + ("bins of a numeric width" if coder.binned else "integer steps")
                               + ": bin the steps by a duration (--bin 1h, or [step] bin = '1h' in the spec), or "
                               "write since as steps")


def _no_header(columns: list[str]) -> str:
    """What to add where a CSV edge file's "columns" are values (``0 1``, ``0``, ``1``): it has no header line
    (NetworkX's ``write_edgelist`` writes none)."""
    if not columns or not all(c.strip() and all(_is_number(w) for w in c.split()) for c in columns):
        return ""
    return ("; its first line holds values, not column names: an edge file needs a header line naming its columns "
            "(NetworkX's write_edgelist writes none: write nx.to_pandas_edgelist(G).to_csv(path, index=False), whose "
            "columns are source and target)")


def _is_number(w: str) -> bool:
    try:
        float(w)
    except ValueError:
        return False
    return True


def _header_hint(f: Path, names: dict[str, str], need: set[str], events_csv: CsvSpec) -> str:
    """What to add to the schema error of a CSV edge file whose columns DuckDB did not find on its header line: the
    line below that holds them (lines before the header, a NetLogo BehaviorSpace file's six, whose first one-field
    line DuckDB's sniffer took for the header), and that the spec's top-level ``[csv]`` is the event table's."""
    at = header_fields(f, need)[0]
    if not at:
        return ""
    also = (" (the spec's top-level [csv] is the event table's and does not reach an edge file)"
            if events_csv != CsvSpec() else "")
    return (f"; line {at + 1} of {names.get(str(f), str(f))!r} holds them: say so with [features.edges.csv] "
            f"header_line = {at + 1}{also}")


def _pylist(col: Any) -> Any:
    """An Arrow column's values: a list, or, for timestamps and dates, datetime64 in the column's own unit (NaT where
    null): pyarrow's ``to_pylist`` makes Python datetimes, which stop at the year 9999 (a since after it was a bare
    OverflowError out of the reader; as datetime64 it is out of range, named by its edge)."""
    import pyarrow as pa

    if pa.types.is_timestamp(col.type) or pa.types.is_date(col.type):
        return col.to_numpy()
    return col.to_pylist()


__all__ = ["NOT_AN_EDGE_OBJECT", "read_edge_file"]
