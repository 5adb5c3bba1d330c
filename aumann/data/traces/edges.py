"""Edges of exposure features: endpoints mapped to panel positions, from a table of the trace or a file."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aumann.data.traces.duck import (
    FILE_COLUMN,
    _kind,
    check_gzip,
    connect,
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
from aumann.data.traces.events import _DECIMAL_COMMA
from aumann.data.traces.idtext import _FLOAT_TEXT as _NUMBER_TEXT
from aumann.data.traces.idtext import _number_ids, bytes_as_text
from aumann.data.traces.spec import CsvSpec, EdgesSpec
from aumann.errors import TraceFormatError, TraceRecordError, TraceSchemaError, TraceSpecError


def edge_positions(source: Sequence[Any], target: Sequence[Any], since: Sequence[Any] | None, ids: dict[Any, int],
                   coder: Any, what: str, *, csv: bool = False
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, dict[str, int]]:
    """Map edge endpoints to panel positions; edges with an endpoint that never acted are dropped (counted), and an
    edge (source, target) listed more than once is kept once, from its earliest ``since`` (the others counted as
    ``duplicate``).

    An endpoint reaches the agent whose id it is by the rule of agent ids: the id's label in the panel (``1`` and
    ``"1"`` are one agent; ``"01"``, ``" 1"`` and ``"+1"`` are ids of their own, as text is as written; a whole-valued
    float is the integer; ``true``, NaN and infinities are no id). ``csv``: the endpoints come from a CSV file, which
    has no types, so they were read as text: one that spells a number as a CSV agent column of numbers reads it
    (``1.0``, ``1e0``: no space, leading zero or plus) reaches the agent of that number where no agent has the text
    itself as its id (the event table's column of numbers read ``1.0`` as the id ``1``)."""
    keyed = {_label(k): v for k, v in ids.items()}
    keyed.pop(None, None)

    def find(v: Any) -> int:
        at = keyed.get(_label(v), -1)
        if at < 0 and csv and isinstance(v, str) and _NUMBER_TEXT.fullmatch(v):
            n = _number_ids([v])[0]
            if not isinstance(n, str):
                at = keyed.get(_label(n), -1)
        return at

    s = np.fromiter((find(v) for v in source), dtype=np.int64, count=len(source))
    t = np.fromiter((find(v) for v in target), dtype=np.int64, count=len(target))
    ok = (s >= 0) & (t >= 0)
    info = {"edges": len(s), "used": int(ok.sum()), "unknown_endpoint": int((~ok).sum())}
    st = None
    if since is not None:
        steps, miss, bad, far, time_far = coder.code(since if isinstance(since, np.ndarray) else list(since))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            why = ("is out of range (beyond ±2⁵³ steps)" if far[i] else
                   "is out of range (a year after 9999)" if time_far[i] else "is not a step/timestamp")
            v = since[i]
            shown = str(v) if isinstance(v, np.datetime64) else repr(v)
            if csv and isinstance(v, str) and _DECIMAL_COMMA.fullmatch(v):  # a European CSV edge file's 0,5
                why += (": it looks like a number with a decimal comma (1,5); a CSV edge file reads such numbers "
                        "with [features.edges.csv] decimal_separator = ','")
            raise TraceRecordError(f"{what} edge {i + 1}: since = {shown} {why}")
        info["no_since"] = int((miss & ok).sum())
        steps = np.where(miss, np.iinfo(np.int64).min // 2, steps)  # an edge without a time: always there
        st = steps[ok]
    s, t = s[ok], t[ok]
    # an edge listed twice (a follow logged again, an edge list with repeats) is one edge, from its earliest since:
    # exposure sums over the agent's targets, and a repeated row counted the target's activity twice
    order = np.lexsort((st, t, s)) if st is not None else np.lexsort((t, s))
    first = np.ones(s.size, dtype=bool)
    first[1:] = (s[order][1:] != s[order][:-1]) | (t[order][1:] != t[order][:-1])
    keep = np.sort(order[first])
    info["duplicate"] = int(s.size - keep.size)
    return s[keep], t[keep], None if st is None else st[keep], info


def _label(v: Any) -> str | None:
    """An agent id's label in the panel (the builder's: its text, a whole-valued float the integer's); ``None`` for
    what is no id (``None``, a boolean, NaN, an infinity). Two ids with one label are one agent (``1`` and ``"1"``);
    text is as written (``"01"`` and ``" 1"`` are not ``1``)."""
    if v is None or isinstance(v, bool | np.bool_):
        return None
    if isinstance(v, np.integer):
        return str(int(v))
    if isinstance(v, float | np.floating):
        if not math.isfinite(v):
            return None
        return str(int(v)) if float(v).is_integer() else str(float(v))
    return str(v)


def read_edge_file(path: Path, edges: EdgesSpec, ids: dict[Any, int], coder: Any, events_csv: CsvSpec | None = None):
    """Edges from a CSV/Parquet/JSONL file through DuckDB; a CSV file laid out as ``edges.csv`` says (its header
    line, its decimal separator). ``events_csv``: the spec's top-level ``[csv]`` (the event table's), named in the
    error where an edge file would have been read with it."""
    import tempfile

    files = table_files(path)
    if not files:
        raise TraceFormatError(f"edge file {str(path)!r} does not exist")
    check_gzip(files)
    for f in files:  # the event tables' checks, in the same words: a UTF-16 file failed deep in DuckDB's sniffer
        if _kind(f) != "parquet":
            refuse_utf16(f)
    with tempfile.TemporaryDirectory(prefix="aumann-edges-") as tmp:
        # a byte-order mark dropped as the event tables drop it: DuckDB refused a JSON lines edge file holding one
        read, names = without_bom(files, Path(tmp))
        return _read_edges(path, read, names, edges, ids, coder, events_csv or CsvSpec())


def _read_edges(path: Path, files: list[Path], names: dict[str, str], edges: EdgesSpec, ids: dict[Any, int],
                coder: Any, events_csv: CsvSpec):
    import duckdb

    kind = _kind(files[0])
    layout = edges.csv or CsvSpec()
    if kind != "csv" and layout != CsvSpec():
        raise TraceSpecError(f"[features.edges.csv] applies to CSV edge files; {str(path)!r} is {kind}")
    # the edge file's own [features.edges.csv]: a NetLogo BehaviorSpace file's six lines before the header are not
    # read (the sniffer took the first for the header, and the edge columns were "missing"), a European file's 0,5
    # is 0.5 (it was "not a step/timestamp")
    skip = layout.header_line - 1 if layout.header_line is not None else 0
    dec = layout.decimal_separator
    con = connect()
    try:
        need = [edges.source, edges.target] + ([edges.since] if edges.since else [])
        if layout.header_line is not None:
            wrong = declared_header(files, names, set(need), layout.header_line, what="[features.edges.csv]",
                                    shared="the files of an edge table share their header line")
            if wrong:
                raise TraceSchemaError(f"edge file: {wrong}")
        src = scan_sql(files, skip=skip, decimal=dec)
        try:
            cols = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()]
        except duckdb.Error as exc:
            raise TraceFormatError(f"DuckDB cannot read edge file {str(path)!r}: {str(exc)[:300]}") from exc
        missing = [c for c in need if c not in cols]
        if missing:
            raise TraceSchemaError(f"edge file {str(path)!r} has no column(s) {missing}; its columns are "
                                   f"{[c for c in cols if c != FILE_COLUMN]}"
                                   + (_header_hint(files[0], names, set(need), events_csv) if kind == "csv" else ""))
        # a header naming an endpoint twice (src,dst,dst): DuckDB read the first and renamed the other dst_1, so the
        # edges silently went to the first column's agents
        twice = duplicated_columns(files, _kind(files[0]), names, set(need), [c for c in cols if c != FILE_COLUMN])
        if twice:
            raise TraceSchemaError(twice)
        if _kind(files[0]) == "csv":  # endpoints are ids, whatever type the sniffer guessed from the first rows
            src = scan_sql(files, text=[edges.source, edges.target], skip=skip, decimal=dec)
        # a Parquet duration in since (pandas timedelta64) scaled as the event table's step is: DuckDB reads its raw
        # counts of the file's unit, and an edge from 1 s (10⁶ microseconds) existed from the 10⁶-th second on
        scale = (duration_scales(files, {"since": edges.since}, binned=coder.binned, unit=coder.unit_name,
                                 steps=frozenset({"since"}), what=f"edge file {path.name!r}: since field")
                 if edges.since and _kind(files[0]) == "parquet" else {})
        sel = ", ".join(scaled(ident(c), scale.get("since")) + f" AS {ident(c)}" if c == edges.since else ident(c)
                        for c in need)
        try:
            rel = con.sql(f"SELECT {sel} FROM {src}")
            lossy = [str(t) in ("DOUBLE", "FLOAT", "UUID") or str(t).startswith(("DATE", "TIME", "INTERVAL"))
                     for t in rel.types[:2]]
            if _kind(files[0]) == "json" and any(lossy):
                # endpoints DuckDB read as doubles (JSON numbers beyond 2⁶⁴): 2⁷⁰ + 1 became 2⁷⁰ and its edges
                # went to that agent; as UUIDs, in lowercase (550E8400-... reached no agent, whose id the event table
                # reads as written), or as dates ('epoch'); read the fields as JSON text, each id decoded as written
                rel = con.sql(f"SELECT {', '.join(ident(c) for c in need)} FROM {scan_sql(files, json_columns=need)}")
            # a JSON field whose values are of more than one type (7 and "b") is DuckDB's JSON type: JSON text
            json_cols = [str(t) == "JSON" for t in rel.types]
            tab = rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()
        except duckdb.Error as exc:  # e.g. a since column of integers with text further down
            raise TraceFormatError(f"DuckDB stopped reading edge file {str(path)!r}: {str(exc)[:300]}") from exc
    finally:
        con.close()
    cols_ = [_pylist(tab.column(i)) for i in range(tab.num_columns)]
    cols_ = [json_values(c) if j else c for c, j in zip(cols_, json_cols)]
    cols_ = [c if isinstance(c, np.ndarray) else bytes_as_text(c) for c in cols_]  # endpoints stored as bytes reach
    # the agents the event table's text reads
    if edges.since and dec == "," and not isinstance(cols_[2], np.ndarray):  # a since column DuckDB read as text (a
        # word among its numbers): its 0,5 is 0.5, as a numeric field of the event table
        cols_[2] = [v.replace(",", ".") if isinstance(v, str) and _DECIMAL_COMMA.fullmatch(v) else v for v in cols_[2]]
    return edge_positions(cols_[0], cols_[1], cols_[2] if edges.since else None, ids, coder, f"edge file {path}",
                          csv=_kind(files[0]) == "csv")


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


__all__ = ["edge_positions", "read_edge_file"]
