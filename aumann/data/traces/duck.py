"""DuckDB helpers shared by the long-table reader and edge files: which files a table is, how to scan them."""

from __future__ import annotations

import glob as globlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aumann.data.traces.events import split_path
from aumann.errors import TraceFormatError

_TABLE_EXT = (".csv", ".tsv", ".parquet", ".pq", ".jsonl", ".ndjson", ".json", ".csv.gz", ".tsv.gz", ".jsonl.gz",
              ".ndjson.gz")


def lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def ident(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def table_files(path: Path) -> list[Path]:
    """The files of a table: the file itself, a directory's table files (sorted; names starting with ``_`` or
    ``.`` are sidecars, not rows), or a glob's matches."""
    s = str(path)
    if any(ch in s for ch in "*?["):
        files = sorted(Path(p) for p in globlib.glob(s))
    elif path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.name.lower().endswith(_TABLE_EXT)
                       and not p.name.startswith(("_", ".")))  # sidecars such as AgentSociety 2's _schema.json
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


def scan_sql(files: Sequence[Path], *, lenient: bool = False, json_columns: Sequence[str] | None = None) -> str:
    """DuckDB's table function over ``files`` (all of one kind), with the file name as a column.

    ``lenient`` (the long-table reader): a JSON line DuckDB cannot parse becomes an all-NULL row in its place
    (``ignore_errors``) and a CSV line that does not split into the header's columns is left out and kept in
    DuckDB's ``reject_errors`` table (``store_rejects``), so that the reader counts or refuses each one by its
    line instead of the whole file failing. ``json_columns``: read these top-level JSON fields, each as
    ``JSON`` (the value's JSON text), instead of detecting the columns (a file whose lines are not all objects
    detects as one ``json`` column)."""
    kinds = {_kind(f) for f in files}
    if len(kinds) != 1 or "unknown" in kinds:
        raise TraceFormatError(f"a table is CSV/TSV, Parquet or JSON lines files of one kind; got "
                               f"{sorted({f.name for f in files})[:5]}")
    lst = "[" + ", ".join(lit(str(f)) for f in files) + "]"
    kind = kinds.pop()
    if kind == "parquet":
        return f"read_parquet({lst}, filename = true)"
    if kind == "json":
        extra = ", ignore_errors = true" if lenient else ""
        if json_columns:
            extra += ", columns = {" + ", ".join(f"{lit(c)}: 'JSON'" for c in json_columns) + "}"
        return (f"read_json({lst}, format = 'newline_delimited', filename = true, maximum_object_size = 67108864"
                f"{extra})")
    return f"read_csv({lst}, header = true, filename = true{', store_rejects = true' if lenient else ''})"


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



__all__ = ["arrow_reader", "connect", "expr", "ident", "scan_sql", "table_files"]
