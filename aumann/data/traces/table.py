"""Long tables — one row per event (or per agent and step) — in CSV/TSV, Parquet or JSON lines, read through
DuckDB (a file, a directory of shards, or a glob such as ``replay/social_media_agent_state.*.jsonl``).

DuckDB scans the files (in parallel, streaming, spilling beyond its memory limit) and hands the columns
the spec names to the shared validator in Arrow batches of ``batch_size`` rows, in file order
(``preserve_insertion_order``), so a refused row is named by its file and its row number (1-based,
header not counted). A nested JSON field ``a/b`` is the struct access ``a.b``.
"""

from __future__ import annotations

import glob as globlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aumann.data.traces.base import TraceReader, register_format, split_path
from aumann.data.traces.events import EventBatch, RawRecords, Validator
from aumann.data.traces.spec import EdgesSpec
from aumann.errors import TraceFormatError, TraceRecordError, TraceSchemaError, TraceSpecError

_TABLE_EXT = (".csv", ".tsv", ".parquet", ".pq", ".jsonl", ".ndjson", ".json", ".csv.gz", ".tsv.gz", ".jsonl.gz",
              ".ndjson.gz")


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _ident(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def table_files(path: Path) -> list[Path]:
    """The files of a table: the file itself, a directory's table files (sorted), or a glob's matches."""
    s = str(path)
    if any(ch in s for ch in "*?["):
        files = sorted(Path(p) for p in globlib.glob(s))
    elif path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.name.lower().endswith(_TABLE_EXT))
    else:
        files = [path] if path.exists() else []
    return files


def _kind(p: Path) -> str:
    n = p.name.lower().removesuffix(".gz")
    if n.endswith((".parquet", ".pq")):
        return "parquet"
    if n.endswith((".jsonl", ".ndjson", ".json")):
        return "json"
    if n.endswith((".csv", ".tsv")):
        return "csv"
    return "unknown"


def scan_sql(files: Sequence[Path]) -> str:
    """DuckDB's table function over ``files`` (all of one kind), with the file name as a column."""
    kinds = {_kind(f) for f in files}
    if len(kinds) != 1 or "unknown" in kinds:
        raise TraceFormatError(f"a table is CSV/TSV, Parquet or JSON lines files of one kind; got "
                               f"{sorted({f.name for f in files})[:5]}")
    lst = "[" + ", ".join(_lit(str(f)) for f in files) + "]"
    kind = kinds.pop()
    if kind == "parquet":
        return f"read_parquet({lst}, filename = true)"
    if kind == "json":
        return f"read_json({lst}, format = 'newline_delimited', filename = true, maximum_object_size = 67108864)"
    return f"read_csv({lst}, header = true, filename = true)"


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


def _expr(path: str) -> str:
    parts = split_path(path)
    return ".".join(_ident(p) for p in parts)


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
            sel = ", ".join(f"{_expr(p)} AS {_ident(k)}" for k, p in want.items())
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


def edge_positions(source: Sequence[Any], target: Sequence[Any], since: Sequence[Any] | None, ids: dict[Any, int],
                   coder: Any, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, dict[str, int]]:
    """Map edge endpoints to panel positions; edges with an endpoint that never acted are dropped (counted)."""
    keyed = {_id_key(k): v for k, v in ids.items()}
    s = np.fromiter((keyed.get(_id_key(v), -1) for v in source), dtype=np.int64, count=len(source))
    t = np.fromiter((keyed.get(_id_key(v), -1) for v in target), dtype=np.int64, count=len(target))
    ok = (s >= 0) & (t >= 0)
    info = {"edges": len(s), "used": int(ok.sum()), "unknown_endpoint": int((~ok).sum())}
    st = None
    if since is not None:
        steps, miss, bad = coder.code(list(since))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise TraceRecordError(f"{what} edge {i + 1}: since = {list(since)[i]!r} is not a step/timestamp")
        info["no_since"] = int((miss & ok).sum())
        steps = np.where(miss, np.iinfo(np.int64).min // 2, steps)  # an edge without a time: always there
        st = steps[ok]
    return s[ok], t[ok], st, info


def _id_key(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, str) and v.lstrip("-").isdigit():
        return int(v)
    return v


def read_edge_file(path: Path, edges: EdgesSpec, ids: dict[Any, int], coder: Any):
    """Edges from a CSV/Parquet/JSONL file through DuckDB."""
    import duckdb

    files = table_files(path)
    if not files:
        raise TraceFormatError(f"edge file {str(path)!r} does not exist")
    con = connect()
    try:
        need = [edges.source, edges.target] + ([edges.since] if edges.since else [])
        src = scan_sql(files)
        try:
            cols = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()]
        except duckdb.Error as exc:
            raise TraceFormatError(f"DuckDB cannot read edge file {str(path)!r}: {str(exc)[:300]}") from exc
        missing = [c for c in need if c not in cols]
        if missing:
            raise TraceSchemaError(f"edge file {str(path)!r} has no column(s) {missing}; its columns are "
                                   f"{[c for c in cols if c != 'filename']}")
        rel = con.sql(f"SELECT {', '.join(_ident(c) for c in need)} FROM {src}")
        tab = rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()
    finally:
        con.close()
    cols_ = [tab.column(i).to_pylist() for i in range(tab.num_columns)]
    return edge_positions(cols_[0], cols_[1], cols_[2] if edges.since else None, ids, coder, f"edge file {path}")


__all__ = ["TableReader", "edge_positions", "read_edge_file", "scan_sql", "table_files"]
