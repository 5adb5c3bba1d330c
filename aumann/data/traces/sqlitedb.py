"""An SQLite database read as a trace, apart from what OASIS's schema means (:mod:`aumann.data.traces.oasis`): the
file's header checked before SQLite opens it, its text as read (TEXT that is not UTF-8 kept as lone surrogates, a BLOB
that is UTF-8 text as that text), and a scan of a table or view that resumes after text sqlite3 could not decode.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from aumann.data.traces.edges import EdgeRows, _label
from aumann.data.traces.encoding import undecoded_at
from aumann.data.traces.idtext import bytes_as_text
from aumann.errors import TraceFormatError

MAGIC = b"SQLite format 3\x00"


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def check_whole_pages(p: Path, head: bytes) -> None:
    """Refuse a database cut short inside a page: SQLite reads the missing bytes of its last page as zeros, so rows
    of that page came back as rowid 0 with NULL columns (one refused as "row 0: no usable agent id", or under
    on_bad = 'skip' the page's real rows lost and counted as bad records) instead of an error. An SQLite file is a
    whole number of pages, at least as many as its header counts (when that count is valid: the change counter at
    offset 24 equals the version-valid-for number at offset 92)."""
    if len(head) < 100:
        raise TraceFormatError(f"{str(p)!r} is cut short: {len(head)} bytes, less than SQLite's 100-byte header "
                               "(a truncated file?)")
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    if page < 512 or page & (page - 1):
        raise TraceFormatError(f"{str(p)!r} cannot be read as SQLite: its header's page size {page} is not a power "
                               "of two from 512 to 65536 (a damaged file?)")
    size = p.stat().st_size
    counted = int.from_bytes(head[28:32], "big") if head[24:28] == head[92:96] else 0
    if size % page or size < counted * page:
        raise TraceFormatError(f"{str(p)!r} is cut short: {size:,} bytes is not the whole "
                               + (f"{counted:,} pages of {page:,} bytes its header counts" if counted else
                                  f"number of {page:,}-byte pages an SQLite file holds")
                               + " (a truncated or damaged file?)")


BAD_JSON = object()  # a JSON column that does not parse

LATIN1_HINT = ("Latin-1 or Windows-1252 text stored as TEXT? traces are read as UTF-8: rewrite those values as UTF-8")


def lenient_text(data: bytes) -> str:
    """SQLite TEXT as Python text, a byte that is no UTF-8 kept as a lone surrogate (``surrogateescape``)."""
    return data.decode("utf-8", "surrogateescape")


class Scan:
    """Where a scan of an OASIS table resumes after text that is not UTF-8 stopped :mod:`sqlite3`'s read (its
    decoding fails the fetch, and the rows it held are lost): the batch is read again with such text kept
    (:meth:`lenient`), then the rest with plain decoding (:meth:`rest`). A table resumes after the last row id read
    (rowid order, as the scan); a view, which has no row id, after the number of rows read."""

    def __init__(self, con: sqlite3.Connection, table: str, base: str, rid: str | None, columns: list[str]) -> None:
        self.con, self.table, self.base, self.rid, self.columns = con, table, base, rid, columns
        self.last: Any = None  # the last row id read (a table)
        self.count = 0  # rows read (a view)

    def done(self, rows: list[tuple[Any, ...]]) -> Any:
        self.count += len(rows)
        self.last = rows[-1][0]
        return self.last

    def numbered(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """A view's ``rows`` (no row id: NULL) with their places in the view, 1-based, in its place."""
        return [(self.count + i, *row[1:]) for i, row in enumerate(rows, start=1)]

    def _query(self, limit: int) -> tuple[str, tuple[Any, ...]]:
        if self.rid is None:
            return f"{self.base} LIMIT ? OFFSET ?", (limit, self.count)
        if self.last is None:
            return f"{self.base} ORDER BY {self.rid} LIMIT ?", (limit,)
        return f"{self.base} WHERE {self.rid} > ? ORDER BY {self.rid} LIMIT ?", (self.last, limit)

    def lenient(self, size: int) -> list[tuple[Any, ...]]:
        self.con.text_factory = lenient_text
        try:
            return self.con.execute(*self._query(size)).fetchall()
        finally:
            self.con.text_factory = str

    def rest(self) -> sqlite3.Cursor:
        return self.con.execute(*self._query(-1))


def blob_text(v: Any) -> Any:
    """A value as read, a BLOB (bytes) that is UTF-8 text as that text (as the table reader reads a binary column)."""
    if type(v) is bytes:
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            return v
    return v


def blobs_as_text(values: Any) -> Any:
    """``values`` (an array: as it is), each BLOB that is UTF-8 text as that text (:func:`blob_text`): a user_id
    stored as BLOB b'1' was the agent "b'1'", another than 1, and an action b'create_post' counted in no feature.
    ``values`` itself where it holds no BLOB (checked in C: a read pays one pass per column of text)."""
    if isinstance(values, np.ndarray) or bytes not in set(map(type, values)):
        return values
    return bytes_as_text(list(values))


def column_values(values: tuple[Any, ...]) -> Any:
    """A fetched column as an int64 array when every value is an int (the fast path, in C), else a list."""
    try:
        arr = np.array(values)
    except (ValueError, OverflowError):
        return list(values)
    return arr.astype(np.int64, copy=False) if arr.dtype.kind in "iu" and arr.ndim == 1 else list(values)


def endpoint_text(cols: list[Any], names: list[str], ids: dict[Any, int], rows: EdgeRows) -> np.ndarray:
    """The edge rows to keep (a mask) of an SQLite edge table read with :func:`lenient_text` (``cols``: the row
    places, then the ``names`` columns: source, target, since): a row holding TEXT that is not UTF-8 is bad (refused
    by ``rows``, or skipped and counted); a BLOB is read as the UTF-8 text it spells (``cols`` updated in place);
    one that is no UTF-8 text stays bytes and reaches an agent whose id is the same BLOB, else, in an endpoint, the
    row is bad (a value of the wrong type, not a good id of no agent, which ``unknown_endpoint`` counts)."""
    n = len(cols[0])
    keep = np.ones(n, dtype=bool)
    for j, col in enumerate(names, start=1):
        at = [undecoded_at(v) if isinstance(v, str) else None for v in cols[j]]
        mask = np.fromiter((a is not None for a in at), dtype=bool, count=n) & keep
        if mask.any():
            def said(i: int, j: int = j, col: str = col, at: list = at) -> str:
                byte = cols[j][i].encode("utf-8", "surrogateescape")[at[i]]
                return (f"column {col!r} holds text that is not UTF-8 (byte 0x{byte:02X} at byte {at[i]:,} of the "
                        f"value; {LATIN1_HINT})")

            keep &= rows.refuse(mask, f"column {col!r} holds text that is not UTF-8 ({LATIN1_HINT})", said)
    # a BLOB is read as the UTF-8 text it spells, as in the trace table: an endpoint stored as BLOB b'2' was the
    # id "b'2'", and its edge an unknown_endpoint; one that is no UTF-8 text stays bytes, and reaches an agent
    # whose id is the same BLOB, else it is a bad row (a value of the wrong type, not a good id of no agent)
    known: set[str | None] | None = None
    for j, col in enumerate(names, start=1):
        vals = blobs_as_text(cols[j])
        if vals is cols[j]:
            continue
        cols[j] = vals
        if j == 3:  # since: bytes left are no step, which the step coder says
            continue
        if known is None:
            known = {_label(k) for k in ids}
        mask = np.fromiter((isinstance(v, bytes) and _label(v) not in known for v in vals), dtype=bool,
                           count=n) & keep
        if mask.any():
            def blob(i: int, vals: list = vals, col: str = col) -> str:
                return (f"column {col!r} holds a BLOB that is not UTF-8 text (X'{vals[i][:32].hex().upper()}"
                        f"{'...' if len(vals[i]) > 32 else ''}'), and no agent has it as its id")

            keep &= rows.refuse(mask, f"column {col!r} holds a BLOB that is not UTF-8 text, where an agent id "
                                "belongs", blob)
    return keep


__all__ = ["BAD_JSON", "LATIN1_HINT", "MAGIC", "Scan", "blob_text", "blobs_as_text", "check_whole_pages",
           "column_values", "endpoint_text", "lenient_text", "quote"]
