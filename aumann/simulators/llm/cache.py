"""Persistent, content-addressed LLM response cache (SQLite, shared by threads and processes).

key = sha256(canonical JSON of the *logical* request: backend, model, the caller's messages, the
schema's JSON schema, temperature, seed, completion limit and an optional scope label). The API key,
the base URL and the structured-output mode are never part of the key or the stored row, so a cache
recorded against one host replays against another serving the same model.

Modes:

* ``"record"`` (default) -- read-through: a hit returns the stored reply; a miss calls the server
  and stores the validated reply.
* ``"replay"`` -- hits only; a miss raises :class:`CacheMissError` and nothing is sent.
* ``"off"`` -- no reads, no writes.

Writes are buffered and committed in one transaction per batch of decisions (the backend flushes
after every batch, and every ``flush_every`` replies or ``flush_seconds`` within a long one), so a
batch that fails half-way keeps the answers that completed. The file is opened in WAL mode with a
busy timeout: one cache file can serve every worker process of a run (``INSERT OR IGNORE``: the
first write of a key wins; nothing is lost or duplicated). A writer whose reply lost -- another process asked the
same request at the same time and stored its answer first -- learns it (:meth:`ResponseCache.lost`), and the
backend uses the stored reply in place of its own, so that a replay of either run is that run. Reads see the
pending buffer too.

A corrupted file, a file that is not SQLite, or a SQLite database that is not an aumann response
cache raises :class:`aumann.errors.ResponseCacheError` naming the file -- never a raw
``sqlite3.DatabaseError`` -- and a foreign database is never written to.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from aumann.errors import ConfigError, ResponseCacheError
from aumann.simulators.llm.base import canonical_json, stable_hash

CacheMode = Literal["record", "replay", "off"]
_MODES = ("record", "replay", "off")
_APP_ID = 0x41554D4E  # "AUMN": marks the file as an aumann response cache
_COLUMNS = ("key", "backend", "model", "request", "response", "prompt_tokens", "completion_tokens", "created")
_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    model TEXT NOT NULL,
    request TEXT NOT NULL,
    response TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL
)
"""
_CHUNK = 500  # keys per SELECT ... IN (...)
#: how long opening or reading a cache waits for another process's lock before it gives up
BUSY_SECONDS = 60.0
WAIT_NOTICE_SECONDS = 1.0  # a wait for the file's lock longer than this is told on stderr (one line)
_DAMAGED = "is corrupted or not a SQLite file"
_MAX_LOST = 100_000  # keys remembered as lost to another writer (see ResponseCache.lost)


@dataclass(frozen=True)
class CachedResponse:
    """One stored reply; ``failed``: the reason, for a decision stored as an abstention without a reply (an
    empty reply marked ``invalid``): ``"failed: ..."`` (its requests all failed) or ``"too large: ..."`` (its
    reply was over ``max_response_bytes``); else ``None``."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failed: str | None = None


#: how a stored decision whose requests all failed is marked (its request's ``invalid`` starts so)
FAILED_MARK = "failed: "
#: how a stored decision whose reply was over ``max_response_bytes`` is marked (the reply text is not kept)
TOO_LARGE_MARK = "too large: "
#: the marks of the abstentions stored without a reply (:attr:`CachedResponse.failed`)
NO_REPLY_MARKS = (FAILED_MARK, TOO_LARGE_MARK)
# selects the request of an empty reply so marked (rare: abstentions), else NULL -- no other request is read
_FAILED_SQL = ("CASE WHEN response = '' AND ("
               + " OR ".join(f"instr(request, '\"invalid\":\"{m}') > 0" for m in NO_REPLY_MARKS) + ") THEN request END")


def no_reply_reason(text: Any, why: Any) -> str | None:
    """``why`` (a stored request's ``invalid``) when the row is an abstention stored without a reply -- an empty
    ``text`` marked ``failed: ...`` or ``too large: ...`` -- capped at 300 characters; else ``None``."""
    if text != "" or not isinstance(why, str) or not why.startswith(NO_REPLY_MARKS):
        return None
    return why[:300]


def _failed_reason(text: Any, request: Any) -> str | None:
    """The ``failed: ...`` / ``too large: ...`` reason of a stored abstention without a reply, else ``None``."""
    if text != "" or not isinstance(request, str) or not any(f'"invalid":"{m}' in request for m in NO_REPLY_MARKS):
        return None
    from aumann import bounded

    try:
        req = bounded.loads_json(request, what="a cached request", error=ValueError, max_bytes=8 * 2**20)
    except ValueError:
        return None
    return no_reply_reason(text, req.get("invalid") if isinstance(req, dict) else None)


def _checked(key: str, text: Any, pt: Any, ct: Any, request: Any = None) -> CachedResponse:
    """A stored row read through :class:`~aumann.simulators.llm.records.CacheRow` (a reply is text, token
    counts integers in range); a damaged row becomes an empty, invalid reply -- re-validated, never trusted."""
    from pydantic import ValidationError

    from aumann.simulators.llm.records import CacheRow

    try:
        row = CacheRow(text=text, prompt_tokens=pt, completion_tokens=ct)
        return CachedResponse(row.text, row.prompt_tokens, row.completion_tokens, _failed_reason(row.text, request))
    except ValidationError:
        return CachedResponse(text if isinstance(text, str) else "", 0, 0)


def not_a_file(path: Path, *, error: type[Exception] = ResponseCacheError, what: str = "response cache") -> None:
    """Raise ``error`` when ``path`` exists and is not a regular file (a folder, a device): told as such, never as
    a damaged cache to move away or delete, nor as a cache that does not exist."""
    if path.exists() and not path.is_file():
        folder = path.is_dir()
        kind = "a directory" if folder else "not a regular file"
        example = f" (e.g. {str(path / 'llm-cache.sqlite')!r})" if folder else ""
        raise error(f"{what} {str(path)!r} is {kind}: the LLM response cache is one SQLite file -- pass the path of a "
                    f"file{example}")


def _flush_at_exit(ref: weakref.ReferenceType) -> None:  # pragma: no cover - interpreter shutdown
    """At interpreter exit (a normal one, or after Ctrl-C): commit what is buffered and close the file, which
    merges its log into it and lets SQLite remove its ``-wal`` and ``-shm`` files (``aumann run`` checkpoints the
    cache when it closes its backend but keeps the connection: both files stayed beside every run's cache)."""
    cache = ref()
    if cache is not None:
        try:
            cache.close()
        except Exception:
            pass


class ResponseCache:
    """SQLite response cache with modes ``record`` | ``replay`` | ``off`` (see the module docstring).

    Args:
        path: the SQLite file (parent folders are created), or ``":memory:"``.
        mode: ``"record"`` (read-through, default), ``"replay"`` (miss → CacheMissError) or ``"off"``.
        flush_every: commit after this many buffered replies (and at every :meth:`flush`).
        flush_seconds: commit a buffer older than this at the next write.

    Raises:
        ConfigError: an unknown mode.
        ResponseCacheError: the file is corrupted, not SQLite, or another application's database
            (raised when the cache is first used); in mode ``"replay"``, no file at ``path`` (raised here).

    Example:
        >>> cache = ResponseCache(":memory:")
        >>> key = cache.key(backend="openai", model="m", messages=[{"role": "user", "content": "hi"}])
        >>> cache.put(key, "{}", backend="openai", model="m", request={"messages": []})
        >>> cache.get(key).text
        '{}'
    """

    def __init__(self, path: str | os.PathLike[str], mode: CacheMode = "record", *, flush_every: int = 64,
                 flush_seconds: float = 2.0) -> None:
        if mode not in _MODES:
            raise ConfigError(f"cache mode must be one of {list(_MODES)}; got {mode!r}")
        self.mode: CacheMode = mode
        self.path = str(path)
        self.flush_every = int(flush_every)
        self.flush_seconds = float(flush_seconds)
        if self.path != ":memory:":
            not_a_file(Path(self.path), error=ResponseCacheError)
            if mode == "replay" and not Path(self.path).exists():
                # replay reads and never writes: a mistyped path made its folders and an empty file, and every
                # decision was then a "replay cache miss" of a cache that had never been there
                raise ResponseCacheError(f"no response cache at {self.path!r}: replay reads a cache recorded before "
                                         "(mode 'record' writes one); check the path")
            if mode != "replay":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._reads_wait = True  # whether a read can wait for another process's lock (not in WAL mode)
        self._pending: dict[str, tuple] = {}
        self._lost: dict[str, CachedResponse] = {}  # keys whose stored reply is another writer's, not the one put
        self._oldest = 0.0
        import atexit

        atexit.register(_flush_at_exit, weakref.ref(self))

    # ------------------------------------------------------------------ opening and checking
    def _fail(self, what: str, exc: BaseException) -> ResponseCacheError:
        """The error for a SQLite failure, with the advice that fits it: a read-only or full file is a good cache
        (never 'delete it'), a locked one is busy; only a damaged one is to be moved away."""
        low = str(exc).lower()
        if "full" in low:
            hint = "the disk is full: free some space and run again (the run resumes where it stopped)"
            what = "cannot be written" if what == _DAMAGED else what
        elif "locked" in low or "busy" in low:
            hint = "another process holds it locked: let that one finish, or pass another path"
            # a file in use is no damaged file: "is corrupted or not a SQLite file: database is locked" read as
            # advice to delete a good cache
            what = f"is locked by another process (waited {BUSY_SECONDS:g} s)" if what == _DAMAGED else what
        elif what in ("cannot be written", "cannot be opened") or "readonly" in low or "read-only" in low \
                or "unable to open" in low:  # (a folder SQLite cannot make its -wal/-shm files in)
            what = "cannot be opened" if what == _DAMAGED else what
            hint = ("check that the file and its folder are writable (SQLite keeps -wal and -shm files beside it); "
                    "--cache-mode replay reads a cache without writing to it")
        elif self.mode == "replay":  # read only: nothing is created in its place, and the file may be another's
            hint = ("It is not a usable aumann response cache (it was only read, and is left as it is): pass the path "
                    "of an aumann response cache (a run's llm-cache.sqlite)")
        else:
            hint = ("It is not a usable aumann response cache -- move it away or delete it (a new cache is created "
                    "in its place), or pass another path")
        return ResponseCacheError(f"response cache {self.path!r} {what}: {exc}. {hint[0].upper()}{hint[1:]}")

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            with self._lock:
                if self._conn is None:
                    self._conn = self._open()
        return self._conn

    def _waiting(self, doing: str = "", then: str = "then this stops with an error") -> AbstractContextManager[None]:
        """Around a statement that may wait (up to BUSY_SECONDS) for a lock another process holds on the file: one
        line on stderr once it has waited WAIT_NOTICE_SECONDS, saying what is waited on, what for (``doing``), for
        how long at most and what happens then, and how to avoid it -- not a silent minute."""
        from aumann.progress import notice_if_slow

        return notice_if_slow(f"waiting for the LLM response cache {self.path!r}: another process holds it locked "
                              f"({doing + '; ' if doing else ''}waiting at most {BUSY_SECONDS:g} s, {then}); to avoid "
                              "the wait, let that process finish first or use another cache file (--cache PATH)",
                              after=WAIT_NOTICE_SECONDS)

    def _open(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, check_same_thread=False, timeout=BUSY_SECONDS, isolation_level=None)
        except sqlite3.Error as exc:
            raise self._fail("cannot be opened", exc) from None
        try:
            # a file another process holds locked is waited on up to BUSY_SECONDS: said at once, not after a silent
            # minute (`aumann llm show` and `aumann run --cache` on a cache in use)
            with self._waiting():
                conn = self._prepare(conn)
                # a WAL reader never waits for a writer (nor an in-memory one): only other reads are watched
                self._reads_wait = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() not in ("wal",
                                                                                                          "memory")
                return conn
        except sqlite3.Error as exc:
            if self.mode == "replay" and self.path != ":memory:" and "unable to open" in str(exc).lower():
                self._reads_wait = False  # immutable: no locks
                return self._open_immutable(exc)
            raise self._fail(_DAMAGED, exc) from None

    def _open_immutable(self, exc: sqlite3.Error) -> sqlite3.Connection:
        """Replay of a cache in a folder that cannot be written (a read-only mount, a run directory shared read-only):
        SQLite opens a WAL-mode file only if it can make its ``-shm`` file beside it, and said "unable to open
        database file", which read as "corrupted or not a SQLite file". With no ``-wal`` file (every write
        checkpointed: a cache closed cleanly) the file alone is the cache and is read as immutable; with one, the
        last replies are in it and SQLite cannot read it here: refused, saying so (never read without them)."""
        wal = Path(self.path + "-wal")
        if wal.is_file() and wal.stat().st_size > 0:
            raise ResponseCacheError(
                f"response cache {self.path!r} cannot be read in its folder: {exc}. The folder cannot be written "
                f"(SQLite makes a -shm file beside a cache it reads) and the cache's last replies are still in "
                f"{wal.name}: copy both files to a writable folder and pass --cache COPY") from None
        try:
            conn = sqlite3.connect(Path(os.path.abspath(self.path)).as_uri() + "?immutable=1", uri=True,
                                   check_same_thread=False, isolation_level=None)
            return self._prepare(conn)
        except sqlite3.Error as again:
            raise self._fail(_DAMAGED, again) from None

    def _prepare(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        """``conn`` checked to be an aumann cache (or the in-memory one an empty file replays as), set up for its mode;
        closed on any failure."""
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_SECONDS * 1000)}")
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
            if tables:
                if "responses" not in tables or (app_id not in (0, _APP_ID)):
                    raise ResponseCacheError(
                        f"response cache {self.path!r} is a SQLite database of another application (tables "
                        f"{sorted(tables)[:8]}, application_id {app_id:#x}); aumann will not write into it -- "
                        f"pass a path for the LLM cache that is not used by anything else")
                cols = tuple(r[1] for r in conn.execute("PRAGMA table_info(responses)"))
                if cols != _COLUMNS:
                    raise ResponseCacheError(
                        f"response cache {self.path!r} has a 'responses' table with columns {list(cols)}, not an "
                        f"aumann response cache ({list(_COLUMNS)}); move it away or pass another path")
            if self.mode == "replay" and not tables and self.path != ":memory:":
                # replay never writes: an empty file (no tables) replays as an empty cache and is left as it was;
                # `aumann llm show --cache EMPTY` turned any 0-byte file into a 12 KiB SQLite database
                conn.close()
                conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
                conn.execute(_SCHEMA_SQL)
                return conn
            if self.path != ":memory:" and self.mode != "replay":
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
            if self.mode != "replay" or not tables:
                conn.execute(_SCHEMA_SQL)
                if app_id != _APP_ID:
                    conn.execute(f"PRAGMA application_id = {_APP_ID}")
            conn.execute("SELECT COUNT(*) FROM responses LIMIT 1").fetchone()
            if self.mode == "record" and self.path != ":memory:":
                self._check_writable(conn)  # now, before a request is sent: its answer could not be kept
        except BaseException:
            conn.close()
            raise
        return conn

    def open(self) -> ResponseCache:
        """Open the file now (it is otherwise opened at first use) and check it: a caller learns of a cache it cannot
        use -- corrupted, another application's, read-only in record mode -- before it starts working."""
        if self.mode != "off":
            _ = self.conn
        return self

    def _check_writable(self, conn: sqlite3.Connection) -> None:
        """A write that changes nothing, rolled back: a read-only file (or folder) fails here, at open, instead of
        at the first flush -- after the batch's requests were sent and paid for, their answers then lost."""
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("DELETE FROM responses WHERE 0")
        except sqlite3.Error as exc:
            raise self._fail("cannot be written", exc) from None
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    # ------------------------------------------------------------------ reads
    @staticmethod
    def key(**parts: Any) -> str:
        """The content address of a request: sha256 of its canonical JSON (callers never pass keys)."""
        return stable_hash(parts)

    def get(self, key: str) -> CachedResponse | None:
        """The stored reply for ``key`` (``None`` on a miss or in mode ``off``; ``failed`` set for an abstention
        stored without a reply: its requests all failed, or its reply was too large)."""
        return self.get_many([key]).get(key)

    def get_many(self, keys: Iterable[str]) -> dict[str, CachedResponse]:
        """Stored replies for the keys that have one (one query per 500 keys; pending writes included)."""
        if self.mode == "off":
            return {}
        keys = list(dict.fromkeys(keys))
        out: dict[str, CachedResponse] = {}
        with self._lock:
            for k in keys:
                row = self._pending.get(k)
                if row is not None:
                    out[k] = CachedResponse(row[4], row[5], row[6], _failed_reason(row[4], row[3]))
            rest = [k for k in keys if k not in out]
            if not rest:
                return out
            conn = self.conn
            try:  # (a thread per read only where a read can wait: ~0.2 ms, 8 times the read's own cost)
                with self._waiting("to read stored replies") if self._reads_wait else contextlib.nullcontext():
                    for i in range(0, len(rest), _CHUNK):
                        part = rest[i:i + _CHUNK]
                        q = (f"SELECT key, response, prompt_tokens, completion_tokens, {_FAILED_SQL} FROM responses "
                             "WHERE key IN (" + ",".join("?" * len(part)) + ")")
                        for k, text, pt, ct, req in conn.execute(q, part):
                            out[k] = _checked(k, text, pt, ct, req)
            except sqlite3.Error as exc:
                raise self._fail("cannot be read", exc) from None
        return out

    # ------------------------------------------------------------------ writes
    def put(self, key: str, text: str, *, backend: str, model: str, request: Any, prompt_tokens: int = 0,
            completion_tokens: int = 0) -> None:
        """Buffer a validated reply (only in mode ``record``; the first write of a key wins)."""
        if self.mode != "record":
            return
        req = request if isinstance(request, str) else canonical_json(request)
        row = (key, backend, model, req, text, int(prompt_tokens), int(completion_tokens), time.time())
        with self._lock:
            if not self._pending:
                self._oldest = time.monotonic()
            first = self._pending.setdefault(key, row)
            if first[4] != row[4]:  # put twice, two replies: the first stays, the second writer is told
                self._lose(key, first[4], first[5], first[6], first[3])
            due = len(self._pending) >= self.flush_every or time.monotonic() - self._oldest >= self.flush_seconds
        if due:
            self.flush()

    def flush(self) -> int:
        """Commit the buffered replies in one transaction; returns how many were new."""
        with self._lock:
            if not self._pending:
                return 0
            rows = list(self._pending.values())
            conn = self.conn
            try:
                before = conn.total_changes
                # another process writing the same cache (a second run sharing it) holds the write lock: waited on
                # up to BUSY_SECONDS, said once it lasts (it was a silent minute)
                with self._waiting(f"to store {len(rows)} repl{'y' if len(rows) == 1 else 'ies'}"):
                    conn.execute("BEGIN IMMEDIATE")
                    self._note_lost(conn, rows)
                    conn.executemany("INSERT OR IGNORE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
                    conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise self._fail("cannot be written", exc) from None
            self._pending.clear()
            if self.path != ":memory:":
                # merge the log into the file (passive: it waits for no one; ~10 ms): a run killed later (SIGKILL, the
                # OOM killer, a job's time limit) leaves the file itself holding every reply committed — its replies
                # sat in the -wal file alone, and a copy of llm-cache.sqlite without it (the file alone, as the docs
                # say it is shared) had no responses table at all
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error:
                    pass  # best effort: a reader elsewhere may hold the log; the next flush or close() merges it
            return conn.total_changes - before

    def _lose(self, key: str, text: Any, pt: Any, ct: Any, request: Any) -> None:
        if len(self._lost) >= _MAX_LOST:
            self._lost.pop(next(iter(self._lost)))
        self._lost[key] = _checked(key, text, pt, ct, request)

    def _note_lost(self, conn: sqlite3.Connection, rows: list[tuple]) -> None:
        """Inside the write transaction: the keys of ``rows`` another writer stored first (another process sharing
        the file), with a reply other than ours -- ``INSERT OR IGNORE`` keeps theirs (see :meth:`lost`)."""
        mine = {r[0]: r for r in rows}
        keys = list(mine)
        for i in range(0, len(keys), _CHUNK):
            part = keys[i:i + _CHUNK]
            q = (f"SELECT key, response, prompt_tokens, completion_tokens, {_FAILED_SQL} FROM responses "
                 "WHERE key IN (" + ",".join("?" * len(part)) + ")")
            for k, text, pt, ct, req in conn.execute(q, part):
                if text != mine[k][4]:
                    self._lose(k, text, pt, ct, req)

    def lost(self, keys: Iterable[str]) -> dict[str, CachedResponse]:
        """Of ``keys`` put here, those whose stored reply is another writer's (another process sharing this cache
        asked the same request at the same time and stored its answer first): the stored row, which every later
        read and every replay serve. Commits the buffer first. A caller that used its own answer for such a key
        must use the stored one instead, or a replay of its run would not be that run."""
        self.flush()
        with self._lock:
            if not self._lost:
                return {}
            return {k: self._lost[k] for k in keys if k in self._lost}

    def rows(self, *, limit: int | None = None, invalid_only: bool = False) -> Iterator[dict[str, Any]]:
        """Stored rows, oldest first, as dicts: key, backend, model, the request (messages, schema, seed, scope,
        and ``invalid``: why the reply was not a usable answer, for abstentions), the reply text and token
        counts. Every row is read through :class:`~aumann.simulators.llm.records.CacheRow` and the bounded
        JSON reader; a damaged row is yielded with ``damaged`` set instead of stopping the listing."""
        from pydantic import ValidationError

        from aumann import bounded
        from aumann.simulators.llm.records import CacheRow

        self.flush()
        q = "SELECT key, backend, model, request, response, prompt_tokens, completion_tokens FROM responses"
        if invalid_only:
            q += " WHERE instr(request, '\"invalid\":') > 0"
        q += " ORDER BY created, key"
        if limit is not None:
            q += f" LIMIT {max(0, int(limit))}"
        with self._lock:
            conn = self.conn
            try:
                with self._waiting("to list its rows"):
                    raw_rows = conn.execute(q).fetchall()
            except sqlite3.Error as exc:
                raise self._fail("cannot be read", exc) from None
        for key, backend, model, request, response, pt, ct in raw_rows:
            out: dict[str, Any] = {"key": str(key), "backend": str(backend), "model": str(model)}
            try:
                row = CacheRow(text=response, prompt_tokens=pt, completion_tokens=ct)
                req = bounded.loads_json(request, what="a cached request", error=ValueError, max_bytes=8 * 2**20)
                if not isinstance(req, dict):
                    raise ValueError("the stored request is not a JSON object")
                out.update({"request": req, "reply": row.text, "prompt_tokens": row.prompt_tokens,
                            "completion_tokens": row.completion_tokens, "invalid": req.get("invalid")})
            except (ValidationError, ValueError, TypeError) as exc:
                # pydantic's first line is only "1 validation error for CacheRow": name the field and the problem
                why = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'row'}: {e['msg']}" for e in exc.errors()) \
                    if isinstance(exc, ValidationError) else str(exc).splitlines()[0]
                out.update({"damaged": why[:200], "reply": str(response)[:2000]})
            yield out

    def __len__(self) -> int:
        self.flush()
        with self._lock:
            conn = self.conn
            try:
                with self._waiting("to count its rows"):
                    return int(conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0])
            except sqlite3.Error as exc:
                raise self._fail("cannot be read", exc) from None

    def checkpoint(self) -> None:
        """Merge the write-ahead log into the cache file itself (best effort: a reader elsewhere may hold it), so
        that a finished run's ``llm-cache.sqlite`` alone holds every reply: copied without its ``-wal`` file it
        was an empty shell, and a replay from the copy missed everything."""
        with self._lock:
            if self._conn is None or self.path == ":memory:" or self.mode == "replay":
                return
            self.flush()
            try:  # a TRUNCATE checkpoint waits for the readers and writers of other processes
                with self._waiting("to merge its log into the file", "then the merge is left to a later run"):
                    self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except sqlite3.Error:
                pass

    def close(self) -> None:
        with self._lock:
            if self._pending:  # replies buffered before the file was ever opened: close() skipped them (they
                self.flush()   # reached the file only at interpreter exit, so a reopened cache missed them)
        self.checkpoint()
        with self._lock:
            if self._conn is not None:
                self.flush()
                self._conn.close()
                self._conn = None

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __deepcopy__(self, memo: dict) -> ResponseCache:
        return self  # one cache shared by every fork of a model

    def __getstate__(self) -> dict:  # picklable: workers reopen the file
        if self._conn is not None:
            self.flush()
        return {"path": self.path, "mode": self.mode, "flush_every": self.flush_every,
                "flush_seconds": self.flush_seconds}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"], state["mode"], flush_every=state.get("flush_every", 64),
                      flush_seconds=state.get("flush_seconds", 2.0))

    def __repr__(self) -> str:
        return f"ResponseCache({self.path!r}, mode={self.mode!r})"


__all__ = ["CacheMode", "CachedResponse", "ResponseCache", "not_a_file"]
