"""User filters for the Bluesky panel: account age, bot-like handles, non-self engagement.

Applied in this order; a user that fails several filters is counted under the first one, so the
per-filter counts in ``ingest_report.json`` sum to the number of users dropped:

1. ``account_age``: the profile snapshot's ``created_at`` is known and later than
   ``window_start − min_account_age_days`` (unknown ages pass and are counted as ``age_unknown``).
2. ``bot_handle``: the handle (snapshot, else an identity event's ``handle``) matches one of
   ``bot_handle_patterns`` (Python regexes, searched case-insensitively; the defaults are
   word-boundary aware, see ``configs/bluesky-ingest.toml``). Unknown handles pass.
3. ``no_engagement``: the user performed or received no engagement event (like, repost, reply,
   follow) whose actor DID differs from the DID of the subject's / parent's author.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import ConfigDict, Field, field_validator

from aumann import configs
from aumann.errors import ConfigError

FILTER_ORDER = ("account_age", "bot_handle", "no_engagement")

DEFAULT_BOT_PATTERNS = (
    r"(?<![a-z0-9])bots?(?![a-z])",
    r"(?<![a-z0-9])[a-z0-9]*(?<!ro)(?<!ab)(?<!sa)(?<!tur)(?<!ca)(?<!tal)bot(?![a-z])",
)


class FilterConfig(configs.ConfigModel):
    """The ``[filters]`` table of the ingest config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: at most a million days (2,700 years, older than any account): 1e9 passed and then overflowed pandas'
    #: Timedelta in apply_filters (an OutOfBoundsTimedelta traceback)
    min_account_age_days: float = Field(default=7.0, ge=0, le=1_000_000)
    bot_handle_patterns: list[str] = Field(default_factory=lambda: list(DEFAULT_BOT_PATTERNS))
    require_non_self_engagement: bool = True

    @field_validator("bot_handle_patterns")
    @classmethod
    def _compile(cls, v: list[str]) -> list[str]:
        for p in v:
            try:
                re.compile(p)
            except re.error as exc:
                raise ValueError(f"bad bot handle regex {p!r}: {exc}") from exc
        return v

    def bot_matchers(self) -> list[re.Pattern[str]]:
        """The patterns, compiled case-insensitively: one alternation when they join safely, else each on its own.

        Joined, a pattern with groups would renumber the next one's (``(b)\\1`` then refers to another pattern's
        group, or two ``(?P<x>...)`` collide) and a global flag such as ``(?i)bot`` is not at the start of the
        alternation (an ``re.error`` traceback); such patterns are searched one by one.
        """
        pats = self.bot_handle_patterns
        each = [re.compile(p, re.IGNORECASE) for p in pats]
        if len(each) > 1 and all(rx.groups == 0 for rx in each):
            try:
                return [re.compile("|".join(f"(?:{p})" for p in pats), re.IGNORECASE)]
            except re.error:
                pass
        return each

    def is_bot_handle(self, handle: str | None) -> bool:
        """Whether ``handle`` matches a bot pattern (``False`` for unknown handles)."""
        return bool(handle) and any(rx.search(handle) is not None for rx in self.bot_matchers())


def load_filters(path: str | os.PathLike[str] | None = None) -> FilterConfig:
    """Load ``[filters]`` from a TOML file (default: the packaged ``bluesky-ingest.toml``).

    Raises:
        ConfigError: unreadable TOML or invalid values.
    """
    p = Path(path) if path is not None else configs.path("bluesky-ingest.toml")
    data = configs.load_toml(p, what="filters file")
    extra = sorted(k for k in data if k != "filters")
    if extra:  # a misspelt table or a key outside [filters] would otherwise be ignored without a word
        raise ConfigError(f"filters file {str(p)!r} holds {extra} outside the [filters] table; it takes only "
                          "[filters] (min_account_age_days, bot_handle_patterns, require_non_self_engagement)")
    if "filters" not in data:
        raise ConfigError(f"filters file {str(p)!r} has no [filters] table")
    section = data["filters"]
    if not isinstance(section, dict):
        raise ConfigError(f"[filters] in {str(p)!r} must be a table")
    try:
        return FilterConfig(**section)
    except ConfigError as exc:
        raise ConfigError(f"invalid [filters] in {str(p)!r}: {str(exc).split(': ', 1)[-1]}") from exc


def apply_filters(
    users: pd.DataFrame, window_start: pd.Timestamp, config: FilterConfig
) -> tuple[np.ndarray, dict[str, int], dict[str, int]]:
    """Which users pass.

    Args:
        users: columns ``created_at`` (UTC timestamps or NaT), ``handle`` (str or None),
            ``engaged`` (bool: ≥ 1 non-self engagement event).
        window_start: 00:00 UTC of the first day of the window.
        config: the filter settings.

    Returns:
        ``(keep, dropped, notes)``: a bool mask, users dropped per filter (``FILTER_ORDER``), and
        counts of users a filter could not judge (``age_unknown``, ``handle_unknown``).
    """
    n = len(users)
    created = pd.to_datetime(users["created_at"], utc=True)
    age_known = created.notna().to_numpy()
    too_young = age_known & _created_after(created, window_start, config.min_account_age_days)
    handles = users["handle"]
    handle_known = handles.notna().to_numpy() & (handles.fillna("").astype(str) != "").to_numpy()
    matchers = config.bot_matchers()
    bot = np.fromiter((bool(h) and any(rx.search(h) is not None for rx in matchers)
                       for h in handles.fillna("").astype(str)), dtype=bool, count=n)
    no_eng = ~users["engaged"].to_numpy(dtype=bool) if config.require_non_self_engagement \
        else np.zeros(n, dtype=bool)
    keep = np.ones(n, dtype=bool)
    dropped: dict[str, int] = {}
    for name, fail in zip(FILTER_ORDER, (too_young, bot, no_eng)):
        hit = keep & fail
        dropped[name] = int(hit.sum())
        keep &= ~fail
    notes = {"age_unknown": int((~age_known).sum()), "handle_unknown": int((~handle_known).sum())}
    return keep, dropped, notes


def _created_after(created: pd.Series, window_start: pd.Timestamp, days: float) -> np.ndarray:
    """Whether each ``created`` time (UTC, NaT: False) is later than ``window_start`` less ``days``. pandas 2.x holds
    a Timedelta in nanoseconds, about 292 years at most: an age of 200,000 days (which the config allows, up to
    1,000,000) ended build-panel in a bare OverflowError there. Such a cut-off is compared in seconds instead (a
    float64 of seconds is exact to well under a microsecond that far back, and no created time lies near it)."""
    try:
        cutoff = window_start - pd.Timedelta(days=days)
    except (OverflowError, ValueError):  # pandas' OutOfBoundsTimedelta / OutOfBoundsDatetime are ValueErrors
        times = created.dt.tz_convert(None).to_numpy()
        unit, count = np.datetime_data(times.dtype)
        secs = times.view(np.int64).astype(np.float64) * (count / _PER_SECOND[unit])
        start = window_start.tz_convert(None).to_datetime64()
        s_unit, s_count = np.datetime_data(start.dtype)
        limit = float(start.astype(np.int64)) * (s_count / _PER_SECOND[s_unit]) - days * 86_400.0
        return ~np.isnat(times) & (secs > limit)
    return (created > cutoff).fillna(False).to_numpy(dtype=bool)


#: a datetime64 unit's ticks per second
_PER_SECOND = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}


__all__ = ["FILTER_ORDER", "FilterConfig", "apply_filters", "load_filters"]
