"""Raw per-user per-day counts: the one format that ingestion and the synthetic generator produce.

Both ``aumann bluesky build-panel`` (real Jetstream captures) and ``aumann bluesky synth`` (the
calibrated synthetic panel) produce a :class:`RawCounts`; the study only ever reads this format.

Tables (pandas, stored as Parquet):

* ``users``: ``user`` (int64 opaque index 0..U-1, the row order), ``did`` (str), ``followers``
  (int64), ``followers_source`` ("snapshot" | "window_follows" | "synthetic"), ``created_at``
  (UTC timestamp or NaT), ``handle`` (str or None).
* ``daily``: long format, one row per (user, day, topic) with any activity: ``user``, ``day``
  (int64 index into ``days``), ``topic`` (str), ``posts`` (topic posts + topic reposts that day),
  ``replies_received`` (replies received that day to the user's topic posts).
* ``follows``: ``user``, ``day``, ``follows_received``.

Features (paper, Section 3.1): a = log(1 + followers), b = log(1 + topic posts),
c = log(1 + topic replies received). The **window panel** (T = 1) sums b and c over all days; the
**per-day panel** (T = len(days)) keeps days apart. Tiers are by followers: top 1 % / next 9 % /
bottom 90 % (ties broken by the opaque index, deterministically).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from aumann.errors import IngestError, UnsafeNameError
from aumann.io import atomic_path, output_lock, safe_component, write_json
from aumann.panel import Panel
from aumann.tiers import TIER_LABELS, tiers_by_rank

FEATURES = ("a", "b", "c")
_USER_COLS = ("user", "did", "followers", "followers_source", "created_at", "handle")
_DAILY_COLS = ("user", "day", "topic", "posts", "replies_received")
_FOLLOW_COLS = ("user", "day", "follows_received")
#: the largest count one cell may hold (posts, replies, follows, followers): 10¹² is beyond any account, and
#: any sum of up to 10⁶ such cells stays below 2⁶³ (int64 arithmetic never wraps)
MAX_COUNT = 10**12


def _read_parquet(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise IngestError(f"raw counts table {str(path)!r} is missing")
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError / ValueError for damaged files
        raise IngestError(f"raw counts table {str(path)!r} is damaged or truncated ({type(exc).__name__}: "
                          f"{str(exc)[:160]})") from exc


@dataclass
class RawCounts:
    """Raw counts for U users over ``days`` and ``topics`` (see the module docstring)."""

    users: pd.DataFrame
    daily: pd.DataFrame
    follows: pd.DataFrame
    days: list[str]
    topics: list[str]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, df, cols in (("users", self.users, _USER_COLS), ("daily", self.daily, _DAILY_COLS),
                               ("follows", self.follows, _FOLLOW_COLS)):
            missing = [c for c in cols if c not in df.columns]
            if missing:
                raise IngestError(f"RawCounts.{name} lacks columns {missing}; has {list(df.columns)}")
        u = len(self.users)
        if u == 0:
            raise IngestError("RawCounts has no users (everything filtered out?)")
        if not np.array_equal(self.users["user"].to_numpy(), np.arange(u)):
            raise IngestError("RawCounts.users['user'] must be 0..U-1 in row order")
        if not isinstance(self.topics, list | tuple) or not isinstance(self.days, list | tuple):
            raise IngestError("RawCounts.topics and RawCounts.days must be lists of strings")
        for t in self.topics:
            safe_component(t, "topic")  # topics name files and folders of every output (panels/, cells/)
        if len(set(self.topics)) != len(self.topics):
            raise IngestError(f"RawCounts.topics repeat: {list(self.topics)}")
        if not all(isinstance(d, str) for d in self.days):
            raise IngestError(f"RawCounts.days must be strings (YYYY-MM-DD); got {list(self.days)[:5]}")
        unknown = sorted(map(str, set(self.daily["topic"].unique()) - set(self.topics)))
        if unknown:
            raise IngestError(f"daily counts name topics {unknown} not in topics {self.topics}")
        for name, df, cols in (("daily", self.daily, ("user", "day", "posts", "replies_received")),
                               ("follows", self.follows, ("user", "day", "follows_received")),
                               ("users", self.users, ("followers",))):
            for c in cols:
                col = df[c]
                if len(col) and bool(col.isna().any()):  # a nullable Int64 column passes the dtype test below
                    raise IngestError(f"RawCounts.{name}[{c!r}] holds {int(col.isna().sum())} missing value(s); "
                                      "every count must be a non-negative integer")
                if not pd.api.types.is_integer_dtype(col.dtype) or (len(col) and int(col.min()) < 0):
                    raise IngestError(f"RawCounts.{name}[{c!r}] must hold non-negative integers; got dtype "
                                      f"{col.dtype}" + (f", minimum {col.min()}" if len(col) and
                                                          pd.api.types.is_numeric_dtype(col.dtype) else ""))
                if len(col) and int(col.max()) > MAX_COUNT:  # sums over days and rows stay far from 2^63
                    n_bad = int((col.to_numpy() > MAX_COUNT).sum())
                    raise IngestError(f"RawCounts.{name}[{c!r}] holds {n_bad} count(s) above {MAX_COUNT:,} (largest "
                                      f"{int(col.max()):,}); no account has that many, and int64 sums of such "
                                      "counts would wrap: the table is damaged")
        for name, df in (("daily", self.daily), ("follows", self.follows)):
            if len(df) and (int(df["user"].max()) >= u or int(df["day"].max()) >= max(len(self.days), 1)):
                raise IngestError(f"RawCounts.{name} refers to users or days that do not exist ({u} users, "
                                  f"{len(self.days)} days)")

    @property
    def n_users(self) -> int:
        return len(self.users)

    # ------------------------------------------------------------------ panels
    def followers(self) -> np.ndarray:
        return self.users["followers"].to_numpy(dtype=np.int64)

    def tiers(self) -> np.ndarray:
        """Follower tiers (top 1 % / next 9 % / bottom 90 %) over all users."""
        return tiers_by_rank(self.followers().astype(np.float64))

    def topic_matrix(self, topic: str, column: str) -> np.ndarray:
        """(len(days), U) int64 matrix of one daily column for one topic."""
        return self._topic_matrices(topic, (column,))[0]

    def _topic_matrices(self, topic: str, columns: tuple[str, ...] = ("posts", "replies_received")
                        ) -> list[np.ndarray]:
        """:meth:`topic_matrix` of each of ``columns``, the topic's rows selected once."""
        if topic not in self.topics:
            raise IngestError(f"unknown topic {topic!r}; topics are {self.topics}")
        d = self.daily[self.daily["topic"] == topic]
        at = (d["day"].to_numpy(np.int64), d["user"].to_numpy(np.int64))
        out = []
        for column in columns:
            m = np.zeros((len(self.days), self.n_users), dtype=np.int64)
            np.add.at(m, at, d[column].to_numpy(np.int64))
            out.append(m)
        return out

    def _panel(self, b: np.ndarray, c: np.ndarray, steps: list[str], topic: str, kind: str) -> Panel:
        a = np.log1p(self.followers().astype(np.float64))
        t = b.shape[0]
        values = np.empty((t, self.n_users, 3), dtype=np.float64)
        values[:, :, 0] = a[None, :]
        values[:, :, 1] = np.log1p(b)
        values[:, :, 2] = np.log1p(c)
        return Panel(
            values, features=list(FEATURES), agent_ids=np.arange(self.n_users), steps=steps,
            groups={"tier": self.tiers()},
            meta={"topic": topic, "panel": kind, "synthetic": bool(self.meta.get("synthetic", False))},
        )

    def _window(self, topic: str, posts: np.ndarray, replies: np.ndarray) -> Panel:
        label = f"{self.days[0]}..{self.days[-1]}" if self.days else "window"
        return self._panel(posts.sum(0, keepdims=True), replies.sum(0, keepdims=True), [label], topic, "window")

    def window_panel(self, topic: str) -> Panel:
        """T = 1 panel: a = log1p(followers), b/c = log1p(window totals)."""
        return self._window(topic, *self._topic_matrices(topic))

    def daily_panel(self, topic: str) -> Panel:
        """T = len(days) panel: a = log1p(followers), b/c = log1p(that day's counts)."""
        return self._panel(*self._topic_matrices(topic), list(self.days), topic, "daily")

    def topic_panels(self, topic: str) -> tuple[Panel, Panel]:
        """``(window_panel(topic), daily_panel(topic))``, the topic's counts gathered once for both."""
        posts, replies = self._topic_matrices(topic)
        return self._window(topic, posts, replies), self._panel(posts, replies, list(self.days), topic, "daily")

    # ------------------------------------------------------------------ io
    def save(self, out_dir: str | os.PathLike[str]) -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        # one writer per folder (re-entrant: a command, build-panel or synth, holds it already)
        with output_lock(out, command="aumann.data.bluesky.RawCounts.save (a Python call)"):
            for name in ("users", "daily", "follows"):
                with atomic_path(out / f"{name}.parquet") as tmp:
                    getattr(self, name).to_parquet(tmp, index=False)
            meta = {"days": self.days, "topics": self.topics, "meta": self.meta, "format": "aumann.rawcounts/1"}
            write_json(out / "counts.json", meta, indent=2)
        return out

    @classmethod
    def load(cls, in_dir: str | os.PathLike[str]) -> RawCounts:
        """Read a directory written by :meth:`save`.

        Raises:
            IngestError: the directory or a file is missing, ``counts.json`` is not valid JSON or lacks
                ``days``/``topics``, a Parquet table is damaged or truncated, or the tables are inconsistent
                (every message names the file).
            UnsafeNameError: a topic name that cannot be a file name (``../x``, ``/abs``).
        """
        src = Path(in_dir)
        if not src.is_dir():
            raise IngestError(f"raw counts directory {str(src)!r} does not exist or is not a directory")
        cj = src / "counts.json"
        if not cj.is_file():
            raise IngestError(f"{str(src)!r} holds no raw counts (counts.json missing); "
                              "make them with `aumann bluesky build-panel` or `aumann bluesky synth`")
        from aumann.io import read_json
        from aumann.records import CountsMeta, check

        meta = read_json(cj, error=IngestError, what="raw counts metadata", within=src, max_bytes=64 * 2**20,
                         object_only=True)
        for key in ("days", "topics"):
            val = meta.get(key)
            if not isinstance(val, list) or not all(isinstance(v, str) for v in val):
                raise IngestError(f"{str(cj)!r} is damaged: {key!r} must be a list of strings; got {val!r:.80}")
        if not isinstance(meta.get("meta") or {}, dict):
            raise IngestError(f"{str(cj)!r} is damaged: 'meta' must be an object")
        check(CountsMeta, meta, error=IngestError, what=f"{str(cj)!r}")  # finite, typed, bounded lists
        tables = {name: _read_parquet(src / f"{name}.parquet") for name in ("users", "daily", "follows")}
        try:
            return cls(**tables, days=list(meta["days"]), topics=list(meta["topics"]),
                       meta=dict(meta.get("meta") or {}))
        except (IngestError, UnsafeNameError) as exc:
            raise type(exc)(f"raw counts in {str(src)!r}: {exc}") from exc


__all__ = ["FEATURES", "TIER_LABELS", "RawCounts", "tiers_by_rank"]
