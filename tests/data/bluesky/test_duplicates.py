"""Replayed lines: counted per file by sorting the valid lines' keys (``duplicates``), with the same numbers as
DuckDB's grouping of them, which a file with more valid lines than ``SORTED_KEYS_MAX`` still uses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aumann.data.bluesky import duplicates
from aumann.data.bluesky.filters import FilterConfig
from aumann.data.bluesky.ingest import IngestOptions, ingest

A, B = "did:plc:" + "a" * 24, "did:plc:" + "b" * 24
T = 1_776_600_000_000_000  # 2026-04-19


def _commit(did: str, rev: str, coll: str, rkey: str, op: str = "create", record: dict | None = None,
            dt: int = 0) -> dict:
    body = {"rev": rev, "operation": op, "collection": coll, "rkey": rkey}
    if record is not None:
        body["record"] = record
    return {"did": did, "time_us": T + dt, "kind": "commit", "commit": body}


POST = _commit(A, "r1", "app.bsky.feed.post", "p1", record={"text": "hello"})
LIKE = _commit(B, "r2", "app.bsky.feed.like", "l1",
               record={"subject": {"cid": "x", "uri": f"at://{A}/app.bsky.feed.post/p1"}})
UNLIKE = _commit(B, "r3", "app.bsky.feed.like", "l0", op="delete")
PLAY = _commit(B, "r4", "fm.teal.alpha.feed.play", "x1", record={"trackName": "song"})
IDENT = {"did": A, "time_us": T + 5, "kind": "identity", "identity": {"did": A, "handle": "a.test", "seq": 5}}
SYNC = {"did": B, "time_us": T + 6, "kind": "sync"}
#: (line, copies in the file); a copy a day later is the same event (the key has no time), counted once
LINES = [(POST, 1), (LIKE, 3), (UNLIKE, 2), (PLAY, 2), (IDENT, 2), (SYNC, 4),
         ({**LIKE, "time_us": T + 86_400_000_000}, 1)]


@pytest.mark.parametrize("sorted_max", [duplicates.SORTED_KEYS_MAX, 0], ids=["sorted keys", "DuckDB grouping"])
def test_replayed_lines_are_counted_once_per_group_either_way(tmp_path: Path, monkeypatch, sorted_max: int):
    monkeypatch.setattr(duplicates, "SORTED_KEYS_MAX", sorted_max)
    path = tmp_path / "replays.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line, n in LINES for _ in range(n)))
    cfg = FilterConfig(min_account_age_days=0, bot_handle_patterns=[], require_non_self_engagement=False)
    counts, report = ingest([path], filters=cfg, options=IngestOptions(threads=1))
    assert report.valid_events == sum(n for _, n in LINES) == 15
    assert report.duplicates == report.files[0]["duplicates"] == 15 - 6
    assert report.by_kind == {"commit": 4, "identity": 1, "sync": 1}
    assert report.by_collection_operation == {"app.bsky.feed.post": {"create": 1},
                                              "app.bsky.feed.like": {"create": 1, "delete": 1},
                                              "fm.teal.alpha.feed.play": {"create": 1}}
    assert report.events_per_day == {"2026-04-19": 14, "2026-04-20": 1}
    assert list(counts.users["did"]) == [A, B]

