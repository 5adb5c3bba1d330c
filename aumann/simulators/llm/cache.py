"""Persistent, content-addressed LLM response cache (SQLite).

key = sha256(canonical JSON of {backend, model, messages, schema's JSON schema, temperature, seed,
other request parameters}). The API key and the base URL are never part of the key or the stored
row, so a cache recorded against one host replays against another serving the same model.

Modes:

* ``"record"`` (default) -- read-through: a hit returns the stored reply; a miss calls the server
  and stores the validated reply.
* ``"replay"`` -- hits only; a miss raises :class:`CacheMissError` and nothing is sent.
* ``"off"`` -- no reads, no writes.

A re-run from the cache is bit-identical (the stored reply text is parsed and validated the same
way) and makes no network call. The stored reply is the raw assistant text that passed validation.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from aumann.errors import ConfigError
from aumann.simulators.llm.base import canonical_json, stable_hash

CacheMode = Literal["record", "replay", "off"]
_MODES = ("record", "replay", "off")
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


@dataclass(frozen=True)
class CachedResponse:
    """One stored reply."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ResponseCache:
    """SQLite response cache with modes ``record`` | ``replay`` | ``off``.

    Args:
        path: the SQLite file (parent folders are created), or ``":memory:"``.
        mode: ``"record"`` (read-through, default), ``"replay"`` (miss → CacheMissError) or ``"off"``.

    Example:
        >>> cache = ResponseCache(":memory:")
        >>> key = cache.key(backend="openai", model="m", messages=[{"role": "user", "content": "hi"}])
        >>> cache.put(key, "{}", backend="openai", model="m", request={"messages": []})
        >>> cache.get(key).text
        '{}'
    """

    def __init__(self, path: str | os.PathLike[str], mode: CacheMode = "record") -> None:
        if mode not in _MODES:
            raise ConfigError(f"cache mode must be one of {list(_MODES)}; got {mode!r}")
        self.mode: CacheMode = mode
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                self._conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
                self._conn.execute(_SCHEMA_SQL)
                self._conn.commit()
            except sqlite3.DatabaseError as exc:
                raise ConfigError(f"cannot open response cache {self.path!r}: {exc}") from exc
        return self._conn

    @staticmethod
    def key(**parts: Any) -> str:
        """The content address of a request: sha256 of its canonical JSON (callers never pass keys)."""
        return stable_hash(parts)

    def get(self, key: str) -> CachedResponse | None:
        """The stored reply for ``key`` (``None`` on a miss or in mode ``off``)."""
        if self.mode == "off":
            return None
        with self._lock:
            row = self.conn.execute(
                "SELECT response, prompt_tokens, completion_tokens FROM responses WHERE key = ?", (key,)
            ).fetchone()
        return None if row is None else CachedResponse(row[0], int(row[1]), int(row[2]))

    def put(
        self,
        key: str,
        text: str,
        *,
        backend: str,
        model: str,
        request: Any,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
    ) -> None:
        """Store a validated reply (only in mode ``record``; the first write of a key wins)."""
        if self.mode != "record":
            return
        with self._lock:
            self.conn.execute(
                "INSERT OR IGNORE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key, backend, model, canonical_json(request), text, int(prompt_tokens),
                 int(completion_tokens), time.time()),
            )
            self.conn.commit()

    def __len__(self) -> int:
        with self._lock:
            return int(self.conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __deepcopy__(self, memo: dict) -> ResponseCache:
        return self  # one cache shared by every fork of a model

    def __getstate__(self) -> dict:  # picklable: workers reopen the file
        return {"path": self.path, "mode": self.mode}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"], state["mode"])

    def __repr__(self) -> str:
        return f"ResponseCache({self.path!r}, mode={self.mode!r})"


__all__ = ["CacheMode", "CachedResponse", "ResponseCache"]
