"""What the Jetstream ingester read, skipped and dropped: ``ingest_report.json``.

Outside checks read this shape (extra keys are allowed)::

    {"events": {"by_kind": {"commit": n, ...},
                "by_collection_operation": {"app.bsky.feed.post": {"create": n, "delete": n}, ...}},
     "lines_read": n, "blank_lines": n, "malformed_lines": n, "valid_events": n,
     "dropped_users": {filter: n}, "days": ["YYYY-MM-DD", ...], "files": [{...per file...}], ...}

For the whole report and for every entry of ``files``: ``lines_read = valid_events + malformed_lines +
blank_lines`` (per file: ``valid + malformed + blank_lines``). A line is what ends with ``\n`` (plus a
last one without it); blank lines hold only whitespace; for zstd frames and length-prefixed records, a
record that does not decode is one line read and one malformed line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aumann.data.bluesky.filters import FILTER_ORDER

FOLLOWERS_NOTE = (
    "followers: profile snapshot where given (followers_source='snapshot'); otherwise distinct "
    "followers whose follow was created and not deleted inside the window "
    "(followers_source='window_follows'), a lower bound on the true count"
)


@dataclass
class IngestReport:
    """What the ingester read, skipped and dropped (``to_dict`` is ``ingest_report.json``)."""

    by_kind: dict[str, int] = field(default_factory=dict)
    by_collection_operation: dict[str, dict[str, int]] = field(default_factory=dict)
    malformed_lines: int = 0
    lines_read: int = 0
    blank_lines: int = 0
    dropped_users: dict[str, int] = field(default_factory=dict)
    days: list[str] = field(default_factory=list)
    duplicates: int = 0
    rows_read: int = 0
    valid_events: int = 0
    malformed_frames: int = 0
    malformed_engagements: int = 0  # valid events engaging a target that is not a DID (no edge; a replayed copy once)
    damaged_files: int = 0
    out_of_window_events: int = 0
    events_per_day: dict[str, int] = field(default_factory=dict)
    users_seen: int = 0
    users_kept: int = 0
    filter_notes: dict[str, int] = field(default_factory=dict)
    followers_source: dict[str, int] = field(default_factory=dict)
    profiles: dict[str, int] = field(default_factory=dict)
    files: list[dict[str, Any]] = field(default_factory=list)
    bytes: int = 0
    seconds: float = 0.0

    @property
    def throughput_mb_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "events": {"by_kind": dict(sorted(self.by_kind.items())),
                       "by_collection_operation": {c: dict(sorted(o.items())) for c, o in
                                                   sorted(self.by_collection_operation.items())}},
            "lines_read": self.lines_read,
            "blank_lines": self.blank_lines,
            "malformed_lines": self.malformed_lines,
            "dropped_users": dict(self.dropped_users),
            "days": list(self.days),
            "duplicates": self.duplicates,
            "rows_read": self.rows_read,
            "valid_events": self.valid_events,
            "malformed_frames": self.malformed_frames,
            "malformed_engagements": self.malformed_engagements,
            "damaged_files": self.damaged_files,
            "out_of_window_events": self.out_of_window_events,
            "events_per_day": dict(sorted(self.events_per_day.items())),
            "users_seen": self.users_seen,
            "users_kept": self.users_kept,
            "filter_order": list(FILTER_ORDER),
            "filter_notes": dict(self.filter_notes),
            "followers_source": dict(self.followers_source),
            "followers_note": FOLLOWERS_NOTE,
            "profiles": dict(self.profiles),
            "files": list(self.files),
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "throughput_mb_s": round(self.throughput_mb_s, 1),
        }


__all__ = ["FOLLOWERS_NOTE", "IngestReport"]
