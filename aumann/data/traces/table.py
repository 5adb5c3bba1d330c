"""Long tables — one row per event (or per agent and step) — in CSV/TSV, Parquet or JSON lines, read through
DuckDB (a file, a directory of shards, or a glob such as ``replay/social_media_agent_state.*.jsonl``).

DuckDB scans the files (in parallel, streaming, spilling beyond its memory limit) and hands the columns
the spec names to the shared validator in Arrow batches of ``batch_size`` rows, in file order
(``preserve_insertion_order``), so a refused row is named by its file and its row number (1-based,
header not counted). A nested JSON field ``a/b`` is the struct access ``a.b``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aumann.data.traces.base import TraceReader, register_format
from aumann.data.traces.duck import _kind, arrow_reader, connect, expr, ident, scan_sql, table_files
from aumann.data.traces.events import EventBatch, RawRecords, Validator, split_path
from aumann.errors import TraceFormatError, TraceSchemaError, TraceSpecError


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
        import duckdb

        spec = self.spec
        files = table_files(self.path)
        if not files:
            raise TraceFormatError(f"no table files at {str(self.path)!r} (CSV/TSV, Parquet or JSON lines)")
        self.sources = [str(f) for f in files]
        self.bytes = sum(f.stat().st_size for f in files)
        src = scan_sql(files)
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
            missing = sorted({p for p in want.values() if split_path(p)[0] not in cols})
            if missing:
                shown = [c for c in cols if c != "filename"]
                raise TraceSchemaError(f"{str(self.path)!r} has no column(s) {missing}; its columns are {shown}")
            sel = ", ".join(f"{expr(p)} AS {ident(k)}" for k, p in want.items())
            try:
                rdr = arrow_reader(con.sql(f"SELECT filename, {sel} FROM {src}"), spec.batch_size)
            except duckdb.Error as exc:
                raise TraceSchemaError(f"DuckDB cannot select the spec's fields from {str(self.path)!r}: "
                                       f"{str(exc)[:400]}") from exc
            row_in_file: dict[str, int] = {}
            while True:
                try:
                    rb = rdr.read_next_batch()
                except StopIteration:
                    return
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
                fn = rb.column(0).to_pylist()
                loc = _locations(fn, row_in_file)
                if len(row_in_file) > 1:
                    raw = RawRecords("", self.unit)
                    raw.loc = [f"{Path(f).name} row {r}" for f, r in zip(fn, loc)]
                    raw.source, raw.unit = str(self.path), "at"
                else:
                    raw = RawRecords(fn[0], self.unit)
                    raw.loc = loc
                names = rb.schema.names
                col = {names[i]: rb.column(i) for i in range(1, len(names))}
                raw.agent = _arrow_values(col["agent"])
                raw.step = _arrow_values(col["step"])
                raw.action = col["action"].to_pylist() if "action" in col else [None] * n
                raw.values = {f: _arrow_values(col[f"v{i}"]) for i, f in enumerate(validator.fields)}
                raw.where = {w: col[f"w{i}"].to_pylist() for i, w in enumerate(validator.where)}
                b = validator.to_batch(raw)
                if b is not None:
                    yield b
        finally:
            con.close()


def _locations(filenames: list[str], counters: dict[str, int]) -> list[int]:
    out = []
    for f in filenames:
        c = counters.get(f, 0) + 1
        counters[f] = c
        out.append(c)
    return out


def _arrow_values(arr: Any) -> Any:
    """An Arrow column as an int64/float64 numpy array where it is numeric without nulls, else a list."""
    import pyarrow as pa

    t = arr.type
    if (pa.types.is_integer(t) or pa.types.is_floating(t)) and arr.null_count == 0:
        return arr.to_numpy(zero_copy_only=False)
    return arr.to_pylist()


__all__ = ["TableReader"]
