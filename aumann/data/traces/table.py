"""Long tables — one row per event (or per agent and step) — in CSV/TSV, Parquet or JSON lines, read through
DuckDB (a file, a directory of shards, or a glob such as ``replay/social_media_agent_state.*.jsonl``).

DuckDB scans the files (in parallel, streaming, spilling beyond its memory limit) and hands the columns
the spec names to the shared validator in Arrow batches of ``batch_size`` rows, in file order
(``preserve_insertion_order``), so a refused row is named by its file and its row number (1-based,
header not counted). A nested JSON field ``a/b`` is the struct access ``a.b``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from aumann import io as aio
from aumann.data.traces.base import TraceReader, register_format
from aumann.data.traces.duck import _kind, arrow_reader, connect, expr, ident, lit, scan_sql, table_files
from aumann.data.traces.events import EventBatch, RawRecords, Validator, split_path
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
        self.bytes = sum(f.stat().st_size for f in files)
        if self.bytes == 0:  # DuckDB would read one column named column0 and the spec's fields would be "missing"
            raise TraceFormatError(f"{str(self.path)!r} is empty: no header, no rows" if len(files) == 1 else
                                   f"the {len(files)} files of {str(self.path)!r} are all empty")
        with tempfile.TemporaryDirectory(prefix="aumann-trace-") as tmp:
            read, names = _without_bom(files, Path(tmp))
            yield from self._batches(validator, read, names)

    def _batches(self, validator: Validator, files: list[Path], names: dict[str, str]) -> Iterator[EventBatch]:
        import duckdb

        spec = self.spec
        kind = _kind(files[0])
        src = scan_sql(files, lenient=True)
        con = connect()
        try:
            try:
                desc = con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()
            except duckdb.Error as exc:
                raise TraceFormatError(f"DuckDB cannot read {str(self.path)!r}: {str(exc)[:400]}") from exc
            cols = {r[0]: r[1] for r in desc}
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
            json_tops: set[str] = {c for c, t in cols.items() if t == "JSON"}
            if kind == "json" and set(cols) - {"filename"} == {"json"} and "json" not in tops:
                # some line is not an object (an array, a number): DuckDB then reads every line as one `json`
                # value; read the spec's fields by name instead, each line that is not an object a NULL row
                src = scan_sql(files, lenient=True, json_columns=tops)
                cols = {**{t: "JSON" for t in tops}, "filename": "VARCHAR"}
                json_tops = set(tops)
            missing = sorted({p for p in want.values() if split_path(p)[0] not in cols})
            if missing:
                shown = [c for c in cols if c != "filename"]
                raise TraceSchemaError(f"{str(self.path)!r} has no column(s) {missing}; its columns are {shown}")
            sel = ", ".join(f"{_select(p, json_tops)} AS {ident(k)}" for k, p in want.items())
            try:
                types = {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT {sel} FROM {src}").fetchall()}
                rdr = arrow_reader(con.sql(f"SELECT filename, {sel} FROM {src}"), spec.batch_size)
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
                    raise TraceFormatError(f"DuckDB stopped reading {str(self.path)!r} after {done} row(s): "
                                           f"{str(exc)[:400]}") from exc
                except Exception as exc:  # pyarrow wraps DuckDB's errors in the batch reader
                    done = sum(row_in_file.values())
                    raise TraceFormatError(f"reading {str(self.path)!r} stopped after {done} row(s): "
                                           f"{str(exc)[:400]}") from exc
                n = rb.num_rows
                if n == 0:
                    continue
                validator.tally.records += n
                fn = [names.get(f, f) for f in rb.column(0).to_pylist()]
                loc = _locations(fn, row_in_file)
                if len(row_in_file) > 1:
                    raw = RawRecords("", self.unit)
                    raw.loc = [f"{Path(f).name} row {r}" for f, r in zip(fn, loc)]
                    raw.source, raw.unit = str(self.path), "at"
                else:
                    raw = RawRecords(fn[0], self.unit)
                    raw.loc = loc
                col = {rb.schema.names[i]: rb.column(i) for i in range(1, rb.num_columns)}

                def values(key: str, plain: bool = False, col=col, times: bool = False) -> Any:
                    if key in decode:
                        return [None if v is None else json.loads(v) for v in col[key].to_pylist()]
                    return col[key].to_pylist() if plain else _arrow_values(col[key], times=times)

                raw.agent = values("agent")
                raw.step = values("step", times=True)
                raw.action = values("action", plain=True) if "action" in col else [None] * n
                raw.values = {f: values(f"v{i}") for i, f in enumerate(validator.fields)}
                raw.where = {w: values(f"w{i}", plain=True) for i, w in enumerate(validator.where)}
                if kind == "json":  # a line DuckDB could not read as an object is a row of NULLs
                    empty = np.logical_and.reduce([np.asarray(c.is_null()) for c in col.values()])
                    if empty.any():
                        keep = validator.refuse(raw, empty, _NOT_AN_OBJECT)
                        raw = _subset(raw, np.flatnonzero(keep))
                b = validator.to_batch(raw)
                if b is not None:
                    yield b
            if kind == "csv":
                _rejected_lines(con, validator, names)
        finally:
            con.close()


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


def _rejected_lines(con: Any, validator: Validator, names: dict[str, str]) -> None:
    """CSV lines DuckDB left out (``store_rejects``: a row with more or fewer fields than the header): refused
    under ``on_bad = "error"`` (naming the first), else counted as skipped with their line numbers."""
    import duckdb

    try:
        rows = con.execute("SELECT DISTINCT s.file_path, e.line, e.error_type FROM reject_errors e "
                           "JOIN reject_scans s USING (scan_id, file_id) ORDER BY 1, 2").fetchall()
    except duckdb.Error:  # no line was rejected: the tables were never made
        return
    if not rows:
        return
    reason = "a CSV line that does not split into the header's columns"
    if validator.spec.on_bad == "error":
        f, line, why = rows[0]
        raise TraceRecordError(f"{names.get(f, f)} line {line}: {reason} ({why.lower()}; {len(rows)} such line(s) "
                               "in all; on_bad = 'skip' in the spec skips and counts such records)")
    validator.tally.records += len(rows)
    validator.tally.skip(reason, [f"{names.get(f, f)} line {line}" for f, line, _ in rows])


def _without_bom(files: list[Path], tmp: Path) -> tuple[list[Path], dict[str, str]]:
    """The files DuckDB reads: a JSON lines file that starts with a UTF-8 byte-order mark (which DuckDB's JSON
    reader refuses) copied without it into ``tmp``; and the original name of each copy."""
    out, names = [], {}
    for i, f in enumerate(files):
        if _kind(f) == "json" and not f.name.lower().endswith(".gz") and aio.starts_with_bom(f):
            copy = tmp / f"{i}-{f.name}"
            aio.copy_without_bom(f, copy)
            names[str(copy)] = str(f)
            f = copy
        out.append(f)
    return out, names


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
    return arr.to_pylist()


__all__ = ["TableReader"]
