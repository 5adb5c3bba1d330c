"""OASIS (camel-ai/oasis): the SQLite database a simulation writes.

Schema (``oasis/social_platform/schema/trace.sql`` at camel-ai/oasis 46cdc8d)::

    CREATE TABLE trace (user_id INTEGER, created_at DATETIME, action TEXT, info TEXT, ...)

Every platform action calls ``PlatformUtils._record_trace`` (``platform_utils.py``), which inserts
``(user_id, current_time, action_type, json.dumps(action_info))``. ``current_time`` is
``Clock.get_time_step()`` — ``str(time_step)``, stored as an INTEGER by the column's NUMERIC affinity
— on the Twitter recsys, and ``Clock.time_transfer(now, start_time)`` (a ``datetime``, stored as ISO
text) on Reddit; ``OasisEnv.step`` increments ``time_step`` after each step (Twitter only). The
``follow`` table holds ``(follower_id, followee_id, created_at)`` (rows are deleted on ``unfollow``).

The reader scans ``trace`` in rowid (insertion) order through :mod:`sqlite3` in read-only mode, a
``batch_size`` of rows at a time (``info`` is parsed as JSON only where the spec reads a key of it),
and names the rowid of any record it refuses. What is not OASIS's (the file's header checks, TEXT and BLOB values as
read, the scan that resumes after undecodable text) is :mod:`aumann.data.traces.sqlitedb`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from aumann import bounded
from aumann.data.traces.base import TraceReader, register_format
from aumann.data.traces.encoding import undecoded_at
from aumann.data.traces.events import MISSING, EventBatch, RawRecords, Validator, get_path, split_path
from aumann.data.traces.spec import EdgesSpec
from aumann.data.traces.sqlitedb import (
    BAD_JSON,
    LATIN1_HINT,
    MAGIC,
    Scan,
    blob_text,
    blobs_as_text,
    check_whole_pages,
    column_values,
    endpoint_text,
    lenient_text,
    quote,
)
from aumann.errors import TraceFormatError, TraceRecordError, TraceSchemaError, TraceSpecError

#: how long a read waits for a lock another process holds on the database (sqlite3's default), and when it says so
BUSY_SECONDS = 5.0
WAIT_NOTICE_SECONDS = 1.0


@register_format
class OasisReader(TraceReader):
    """OASIS's SQLite trace database (see the module docstring)."""

    name = "oasis"
    unit = "row"
    spec_keys = frozenset({"table", "features.edges.table"})

    @classmethod
    def sniff(cls, path: Path) -> bool:
        if not path.is_file():
            return False
        try:
            with open(path, "rb") as fh:
                return fh.read(16) == MAGIC
        except OSError:
            return False

    def _waiting(self) -> AbstractContextManager[None]:
        """Around a statement that may wait for a lock another process holds (an OASIS simulation still writing the
        database): one line on stderr once it lasts, not BUSY_SECONDS of silence."""
        from aumann.progress import notice_if_slow

        return notice_if_slow(f"waiting for the OASIS database {str(self.path)!r}: another process holds it locked "
                              f"(an OASIS simulation still writing it?); waiting at most {BUSY_SECONDS:g} s, then this "
                              "stops with an error; to avoid the wait, read it once that process has finished, or "
                              "read a copy", after=WAIT_NOTICE_SECONDS)

    def _locked(self, exc: sqlite3.Error) -> TraceFormatError | None:
        """The error for a database another process held locked past BUSY_SECONDS (``None`` for other failures): it
        was told as 'cannot be read as SQLite: database is locked (a truncated or damaged file?)'."""
        low = str(exc).lower()
        if "locked" not in low and "busy" not in low:
            return None
        return TraceFormatError(f"{str(self.path)!r} is locked by another process (waited {BUSY_SECONDS:g} s; an OASIS "
                                f"simulation still writing it?): {exc}. Read it once that process has finished, or "
                                "read a copy of the file")

    def _connect(self) -> sqlite3.Connection:
        p = self.path
        if not p.is_file():
            raise TraceFormatError(f"OASIS database {str(p)!r} does not exist" if not p.exists()
                                   else f"OASIS database {str(p)!r} is not a file")
        with open(p, "rb") as fh:
            head = fh.read(100)
        if head[:16] != MAGIC:
            raise TraceFormatError(f"{str(p)!r} is not an SQLite database (its first bytes are {head[:16]!r})")
        check_whole_pages(p, head)
        try:
            con = sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_SECONDS)
            with self._waiting():
                con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.DatabaseError as exc:
            raise self._locked(exc) or TraceFormatError(f"{str(p)!r} cannot be read as SQLite: {exc} (a truncated or "
                                                        "damaged file?)") from exc
        self.bytes = p.stat().st_size
        return con

    def _columns(self, con: sqlite3.Connection, table: str) -> list[str]:
        try:
            with self._waiting():
                tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
        except sqlite3.DatabaseError as exc:
            raise self._locked(exc) or TraceFormatError(f"{str(self.path)!r}: cannot read the schema: {exc}") from exc
        if table not in tables:
            raise TraceSchemaError(f"{str(self.path)!r} has no table {table!r} (an OASIS run writes 'trace'); its "
                                   f"tables are {sorted(tables)}")
        try:  # a view over a table that is gone fails here ("no such table")
            with self._waiting():
                return [r[1] for r in con.execute(f"PRAGMA table_info({quote(table)})")]
        except sqlite3.DatabaseError as exc:
            raise self._locked(exc) or TraceFormatError(f"{str(self.path)!r}: cannot read the columns of {table!r}: "
                                                        f"{exc}") from exc

    def batches(self, validator: Validator) -> Iterator[EventBatch]:
        spec = self.spec
        table = spec.table or "trace"
        con = self._connect()
        try:
            cols = self._columns(con, table)
            paths = {"agent": split_path(spec.agent.field), "step": split_path(spec.step.field)}
            if spec.action is not None:
                paths["action"] = split_path(spec.action.field)
            fields = {f: split_path(f) for f in validator.fields}
            wheres = {w: split_path(w) for w in validator.where}
            needed = {p[0] for p in [*paths.values(), *fields.values(), *wheres.values()]}
            missing = sorted(needed - set(cols))
            if missing:
                raise TraceSchemaError(f"{str(self.path)!r}: table {table!r} has no column(s) {missing}; its columns "
                                       f"are {cols}")
            for name, p in [*fields.items()]:
                if p[0] == "len:" or name.startswith("len:"):
                    raise TraceSpecError(f"field {name!r}: len: applies to Concordia logs only")
            order = sorted(needed)
            pos = {c: i + 1 for i, c in enumerate(order)}
            rid = self._row_id(cols, table)
            self._check_step_kind(con, table, paths["step"], rid)
            # in rowid (log) order: without ORDER BY, SQLite scans a covering index where the table has one (an index
            # on the columns the spec reads), and the rows came in that index's order, so `last` took the value of
            # the largest key, not of the agent's last event (a view has no rowid: its own order)
            base = f"SELECT {rid}, {', '.join(quote(c) for c in order)} FROM {quote(table)}"
            is_table = self._is_table(con, table)
            sql = base + (f" ORDER BY {rid}" if is_table else "")
            try:
                with self._waiting():
                    total = con.execute(f"SELECT coalesce(max({rid}), 0) FROM {quote(table)}").fetchone()[0]
                    cur = con.execute(sql)
            except sqlite3.DatabaseError as exc:
                raise self._locked(exc) or TraceFormatError(f"{str(self.path)!r}: cannot read table {table!r}: "
                                                            f"{exc}") from exc
            self.total = total if isinstance(total, int) else 0
            scan = Scan(con, table, base, rid if is_table else None, ["rowid", *order])
            yield from self._scan(scan, cur, pos, paths, fields, wheres, validator)
        finally:
            con.close()

    def _is_table(self, con: sqlite3.Connection, table: str) -> bool:
        """Whether ``table`` is a table (with SQLite's row id), not a view."""
        try:
            with self._waiting():
                row = con.execute("SELECT type FROM sqlite_master WHERE name = ?", (table,)).fetchone()
        except sqlite3.DatabaseError as exc:
            raise self._locked(exc) or TraceFormatError(f"{str(self.path)!r}: cannot read the schema: {exc}") from exc
        return row is not None and row[0] == "table"

    def _row_id(self, cols: list[str], table: str) -> str:
        """The name that reaches SQLite's row id in ``table``: ``rowid``, unless the table has a column of that
        name (which then hides it, in any letter case), then ``_rowid_``, then ``oid``."""
        taken = {c.lower() for c in cols}
        for alias in ("rowid", "_rowid_", "oid"):
            if alias not in taken:
                return alias
        raise TraceSchemaError(f"{str(self.path)!r}: table {table!r} has its own columns named rowid, _rowid_ and "
                               "oid, which hide SQLite's row id (the reader's row order and row numbers); rename one "
                               "of them")

    def _check_step_kind(self, con: sqlite3.Connection, table: str, step: tuple[str, ...], rid: str) -> None:
        """A default (integer-step) spec on a Reddit-mode database: say what to do before reading it all. Only text
        that looks like a time (a date's ``2025-03-01`` or a clock's ``:``) is a timestamp: integer steps stored as
        text (a column of TEXT affinity holds ``'3'``) are steps, and other text is refused by the validator, by its
        row, as not an integer step."""
        if self.spec.step.binned or len(step) != 1:
            return
        try:
            c = quote(step[0])
            with self._waiting():
                row = con.execute(f"SELECT {rid}, {c}, typeof({c}) FROM {quote(table)} WHERE typeof({c}) = 'text' "
                                  f"AND ({c} GLOB '*[0-9]-[0-9]*' OR {c} GLOB '*:*') LIMIT 1").fetchone()
        except sqlite3.DatabaseError as exc:
            raise self._locked(exc) or TraceFormatError(f"{str(self.path)!r}: cannot read table {table!r}: {exc}") \
                from exc
        if row is not None:  # (a view's row has no row id: SQLite gives NULL, which was named "row None")
            at = f"row {row[0]}" if row[0] is not None else f"view {table!r} (its rows have no row id)"
            raise TraceRecordError(f"{self.path!s} {at}: {step[0]} holds {row[1]!r}, a timestamp, not an "
                                   "integer step (OASIS's Reddit mode records clock time): bin it into steps with "
                                   "--bin 1h (or [step] bin = '1h' in a spec)")

    def _scan(self, scan: Scan, cur: sqlite3.Cursor, pos: dict[str, int], paths: dict[str, tuple[str, ...]],
              fields: dict[str, tuple[str, ...]], wheres: dict[str, tuple[str, ...]],
              validator: Validator) -> Iterator[EventBatch]:
        size = self.spec.batch_size
        last: Any = None

        def value(row: tuple[Any, ...], p: tuple[str, ...], json_cache: dict[str, Any]) -> Any:
            v = row[pos[p[0]]]
            if len(p) == 1:
                return blob_text(v)
            doc = json_cache.get(p[0], MISSING)
            if doc is MISSING:
                try:
                    doc = bounded.loads_json(v, what="a JSON column", error=ValueError) if isinstance(v, str | bytes) \
                        else None
                except ValueError:
                    doc = MISSING
                json_cache[p[0]] = doc
            if doc is MISSING:
                return BAD_JSON
            return get_path(doc, p[1:])

        while True:
            try:
                with self._waiting():
                    rows = cur.fetchmany(size)
            except sqlite3.DatabaseError as exc:
                if self._locked(exc) is not None or "decode to UTF-8" not in str(exc):
                    where = ("in its first rows" if last is None and not scan.count else
                             f"after row id {last}" if scan.rid is not None else f"after {scan.count} row(s)")
                    raise self._locked(exc) or TraceFormatError(f"{str(self.path)!r}: reading table {scan.table!r} "
                                                                f"stopped {where}: {exc} (a truncated or damaged "
                                                                "database?)") from exc
                # text that is not UTF-8 (a Latin-1 string stored as TEXT) stopped the whole read, --skip-bad or not:
                # this batch is read again with such text kept as it is, each row holding it refused by its row id
                # (or skipped and counted), and the scan goes on after it
                with self._waiting():
                    rows = scan.lenient(size)
                if not rows:
                    return
                validator.tally.records += len(rows)
                if scan.rid is None:
                    rows = scan.numbered(rows)
                last = self.done = scan.done(rows)
                rows = self._undecodable(scan, rows, validator)
                cur = scan.rest()
                if not rows:
                    continue
            else:
                if not rows:
                    return
                validator.tally.records += len(rows)
                if scan.rid is None:  # a view's rows have no row id: each is named by its place, 1, 2, ...
                    rows = scan.numbered(rows)
                last = self.done = scan.done(rows)
            raw = RawRecords(str(self.path), self.unit)
            simple = all(len(p) == 1 for p in [*paths.values(), *fields.values(), *wheres.values()])
            if simple:
                cols = list(zip(*rows))
                raw.loc = list(cols[0])
                raw.agent = blobs_as_text(column_values(cols[pos[paths["agent"][0]]]))
                raw.step = blobs_as_text(column_values(cols[pos[paths["step"][0]]]))
                raw.action = (blobs_as_text(list(cols[pos[paths["action"][0]]])) if "action" in paths
                              else [None] * len(rows))
                raw.values = {f: blobs_as_text(column_values(cols[pos[p[0]]])) for f, p in fields.items()}
                raw.where = {w: blobs_as_text(list(cols[pos[p[0]]])) for w, p in wheres.items()}
            else:
                raw.values = {f: [] for f in fields}
                raw.where = {w: [] for w in wheres}
                for row in rows:
                    cache: dict[str, Any] = {}
                    vals = {f: value(row, p, cache) for f, p in fields.items()}
                    whs = {w: value(row, p, cache) for w, p in wheres.items()}
                    got = [value(row, paths["agent"], cache), value(row, paths["step"], cache),
                           value(row, paths["action"], cache) if "action" in paths else None]
                    if any(v is BAD_JSON for v in [*got, *vals.values(), *whs.values()]):
                        bad = next(c for c in cache if cache[c] is MISSING)
                        validator.refuse(RawRecords(str(self.path), self.unit, loc=[row[0]]), np.array([True]),
                                          f"column {bad!r} is not valid JSON")
                        continue
                    raw.loc.append(row[0])
                    raw.agent.append(got[0])
                    raw.step.append(got[1])
                    raw.action.append(got[2])
                    for f in fields:
                        raw.values[f].append(vals[f])
                    for w in wheres:
                        raw.where[w].append(whs[w])
            b = validator.to_batch(raw)
            if b is not None:
                yield b

    def _undecodable(self, scan: Scan, rows: list[tuple[Any, ...]], validator: Validator) -> list[tuple[Any, ...]]:
        """The rows of ``rows`` (read by :meth:`~aumann.data.traces.sqlitedb.Scan.lenient`) whose text is all UTF-8;
        each other one is refused (``on_bad = "error"``: naming its table, row id, column and byte) or skipped and
        counted, by column."""
        keep: list[tuple[Any, ...]] = []
        for row in rows:
            bad = next(((i, at) for i, v in enumerate(row) if isinstance(v, str)
                        and (at := undecoded_at(v)) is not None), None)
            if bad is None:
                keep.append(row)
                continue
            col = scan.columns[bad[0]]
            if self.spec.on_bad == "error":
                byte = row[bad[0]].encode("utf-8", "surrogateescape")[bad[1]]
                raise TraceRecordError(f"{self.path!s} table {scan.table!r} row {row[0]}: column {col!r} holds text "
                                       f"that is not UTF-8 (byte 0x{byte:02X} at byte {bad[1]:,} of the value; "
                                       f"{LATIN1_HINT}) (on_bad = 'skip' in the spec skips and counts such records)")
            validator.refuse(RawRecords(str(self.path), self.unit, loc=[row[0]]), np.array([True]),
                             f"column {col!r} holds text that is not UTF-8 ({LATIN1_HINT})")
        return keep

    def edges(self, edges: EdgesSpec, ids: dict[Any, int], coder: Any):
        if edges.table is None:
            return super().edges(edges, ids, coder)
        con = self._connect()
        try:
            cols = self._columns(con, edges.table)
            need = [edges.source, edges.target] + ([edges.since] if edges.since else [])
            missing = [c for c in need if c not in cols]
            if missing:
                raise TraceSchemaError(f"{str(self.path)!r}: edge table {edges.table!r} has no column(s) {missing}; "
                                       f"its columns are {cols}")
            # text that is not UTF-8 kept (a bad row of its own): sqlite3's decoding failed the whole read
            con.text_factory = lenient_text
            rows = self._edge_rows(con, edges.table, cols, need)
        except sqlite3.DatabaseError as exc:
            raise self._locked(exc) or TraceFormatError(f"{str(self.path)!r}: cannot read edge table {edges.table!r}: "
                                                        f"{exc}") from exc
        finally:
            con.close()
        from aumann.data.traces.edges import EdgeRows, edge_positions

        cols_: list[Any] = list(zip(*rows)) if rows else [[], [], [], []]
        where = f"{self.path} table {edges.table!r} row"
        bad = EdgeRows(self.spec.on_bad, self.edge_tally, lambda i: f"{where} {cols_[0][i]}")
        keep = endpoint_text(cols_, need, ids, bad)
        if not keep.all():
            kept = np.flatnonzero(keep)
            cols_ = [[c[i] for i in kept] for c in cols_]
        s, t, since, info = edge_positions(cols_[1], cols_[2], cols_[3] if edges.since else None, ids, coder,
                                           f"{self.path} table {edges.table}", rows=bad,
                                           fields=(edges.source, edges.target, edges.since))
        removed = int((~keep).sum())  # rows refused before (not UTF-8): edges = used + unknown_endpoint + skipped
        info["edges"] += removed
        info["skipped"] += removed
        return s, t, since, info

    def _edge_rows(self, con: sqlite3.Connection, table: str, cols: list[str],
                   need: list[str]) -> list[tuple[Any, ...]]:
        """The ``need`` columns of each row of edge table ``table``, after its place: its row id (in row id order), as
        the trace table's rows are named; a view (whose row id SQLite gives as NULL: its rows were each "row None"),
        a WITHOUT ROWID table, or a table whose own columns hide the row id, by its place in scan order, 1, 2, ...,
        as the trace scan names a view's rows."""
        taken = {c.lower() for c in cols}
        rid = next((a for a in ("rowid", "_rowid_", "oid") if a not in taken), None)
        sel = ", ".join(quote(c) for c in need)
        if rid is not None and not self._is_table(con, table):
            rid = None
        with self._waiting():
            if rid is not None:
                try:
                    return con.execute(f"SELECT {rid}, {sel} FROM {quote(table)} ORDER BY {rid}").fetchall()
                except sqlite3.OperationalError as exc:
                    if rid not in str(exc):  # (a WITHOUT ROWID table: "no such column: rowid")
                        raise
            return [(i + 1, *r) for i, r in enumerate(con.execute(f"SELECT {sel} FROM {quote(table)}").fetchall())]


__all__ = ["OasisReader"]
