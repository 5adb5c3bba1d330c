"""Jetstream ingestion: the real 10-event sample and a synthetic capture with hand-known counts."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from aumann.data.bluesky.filters import FilterConfig
from aumann.data.bluesky.ingest import IngestOptions, ingest
from aumann.data.bluesky.topics import load_topics
from aumann.errors import IngestError
from tests.data.bluesky.jetstream_builder import MALFORMED_LINES, PROFILES_CSV, A, B, C, D, H, build
from tests.paths import JETSTREAM_SAMPLE, SHARED_MISSING

GOLDEN = JETSTREAM_SAMPLE


def _opts() -> IngestOptions:
    return IngestOptions(threads=1)


@pytest.fixture
def capture_files(tmp_path: Path):
    cap, expected = build()
    files = cap.write(tmp_path / "capture")
    prof = tmp_path / "profiles.csv"
    prof.write_text(PROFILES_CSV)
    return cap, expected, files, prof


def _daily_dict(counts) -> dict:
    return {(int(r.user), int(r.day), r.topic): (int(r.posts), int(r.replies_received))
            for r in counts.daily.itertuples()}


def _follows_dict(counts) -> dict:
    return {(int(r.user), int(r.day)): int(r.follows_received) for r in counts.follows.itertuples()}


@pytest.mark.skipif(not GOLDEN.exists(), reason=SHARED_MISSING)
def test_real_golden_sample_exact_counts():
    counts, report = ingest([GOLDEN], options=_opts())
    rep = report.to_dict()
    assert rep["events"]["by_kind"] == {"commit": 8, "identity": 1, "account": 1}
    assert rep["events"]["by_collection_operation"] == {
        "app.bsky.actor.profile": {"update": 1},
        "app.bsky.feed.like": {"create": 1},
        "app.bsky.feed.post": {"create": 1},
        "app.bsky.feed.repost": {"create": 1},
        "app.bsky.graph.block": {"create": 1},
        "app.bsky.graph.follow": {"create": 1},
        "org.hypercerts.claim.activity": {"delete": 1},
        "place.stream.broadcast.origin": {"update": 1},
    }
    assert rep["malformed_lines"] == 0 and rep["duplicates"] == 0
    assert rep["days"] == ["2026-05-25"]
    # six app.bsky actors; the profile updater and the blocker have no non-self engagement
    assert rep["users_seen"] == 6 and rep["users_kept"] == 4
    assert rep["dropped_users"] == {"account_age": 0, "bot_handle": 0, "no_engagement": 2}
    assert set(counts.users["did"]) == {"did:plc:mcc5yghbk7tixqryac2yxku7", "did:plc:q235v55g5unth4zjjdpacfdr",
                                        "did:plc:eizxoqcsvvvarxeb3pjkblrp", "did:plc:mxwlsvdgs6tn75lq6jrr2vp7"}
    assert counts.daily.empty  # no topic posts in the sample


def test_synthetic_capture_exact(capture_files):
    cap, expected, files, prof = capture_files
    counts, report = ingest(files, profiles=prof, options=_opts())
    rep = report.to_dict()
    assert rep["events"]["by_kind"] == dict(cap.kinds)
    by_co = rep["events"]["by_collection_operation"]
    got_ops = Counter({(c, o): n for c, ops in by_co.items() for o, n in ops.items()})
    assert got_ops == cap.coll_ops
    assert rep["events"]["by_kind"]["sync"] == 1  # unknown kind counted, not dropped
    assert rep["events"]["by_collection_operation"]["fm.teal.alpha.feed.play"] == {"create": 1}
    assert rep["malformed_lines"] == cap.malformed == len(MALFORMED_LINES)
    assert rep["duplicates"] == cap.duplicates == 1
    assert rep["rows_read"] == sum(cap.kinds.values()) + cap.malformed + cap.duplicates
    assert rep["days"] == ["2026-04-10", "2026-04-11"]
    assert rep["dropped_users"] == expected["dropped"]
    assert rep["users_seen"] == 9 and rep["users_kept"] == 5
    assert rep["profiles"] == {"rows": 6, "invalid_rows": 2, "duplicate_dids": 0, "unparseable_created_at": 0}
    assert _daily_dict(counts) == expected["daily"]
    assert _follows_dict(counts) == expected["follows"]
    users = counts.users
    assert list(users["user"]) == [0, 1, 2, 3, 4]
    for u, (did, followers, source) in expected["users"].items():
        row = users.iloc[u]
        assert (row["did"], int(row["followers"]), row["followers_source"]) == (did, followers, source)
    assert users.loc[0, "handle"] == "alice.bsky.social" and users.loc[1, "handle"] == "abbott.bsky.social"
    assert users.loc[0, "created_at"] == pd.Timestamp("2020-01-01", tz="UTC")
    assert pd.isna(users.loc[3, "created_at"]) and users.loc[3, "handle"] is None
    assert str(users["created_at"].dtype) == "datetime64[ns, UTC]"
    for col in ("user", "day", "posts", "replies_received"):
        assert counts.daily[col].dtype == np.int64
    assert counts.topics == ["earth-day-climate", "mythos", "the-masters", "trump-tariffs", "wrestlemania"]
    assert counts.meta["synthetic"] is False


def test_window_panel_and_daily_panel_values(capture_files):
    _, _, files, prof = capture_files
    counts, _ = ingest(files, profiles=prof, options=_opts())
    w = counts.window_panel("trump-tariffs")
    assert w.shape == (1, 5, 3)
    np.testing.assert_allclose(w.values[0, :, 0], np.log1p([1000, 50, 7, 0, 1]))
    np.testing.assert_allclose(w.values[0, :, 1], np.log1p([2, 0, 1, 1, 0]))
    np.testing.assert_allclose(w.values[0, :, 2], np.log1p([2, 0, 0, 0, 0]))
    d = counts.daily_panel("mythos")
    assert d.shape == (2, 5, 3)
    np.testing.assert_allclose(d.values[:, 4, 1], np.log1p([1, 1]))


def test_without_profiles_followers_are_window_follows_lower_bound(capture_files):
    _, _, files, _ = capture_files
    counts, report = ingest(files, options=_opts())
    assert set(counts.users["followers_source"]) == {"window_follows"}
    followers = dict(zip(counts.users["did"], counts.users["followers"]))
    # A: followed by D and B in the window; C's follow was deleted in the window.
    assert followers[A] == 2 and followers[B] == 1 and followers[H] == 1 and followers[C] == 0 and followers[D] == 0
    # without the snapshot F's age is unknown, so F passes the age filter and is kept
    assert report.dropped_users == {"account_age": 0, "bot_handle": 1, "no_engagement": 2}
    assert report.filter_notes["age_unknown"] == report.users_seen


def test_days_window_restricts_and_counts_out_of_window(capture_files):
    cap, _, files, prof = capture_files
    counts, report = ingest(files, profiles=prof, options=IngestOptions(threads=1, days=("2026-04-11", "2026-04-11")))
    assert report.days == ["2026-04-11"]
    assert report.out_of_window_events == report.events_per_day["2026-04-10"]
    # D's repost of A's topic post seen on day 0 is outside the window: A's post is not seen → nothing
    assert set(counts.daily["topic"]) <= {"mythos"}
    assert report.to_dict()["events"]["by_kind"] == dict(cap.kinds)  # counts cover every event read


def test_a_days_window_that_misses_every_event_says_so(capture_files):
    _, _, files, prof = capture_files
    with pytest.raises(IngestError, match=r"no valid event falls in the window 2020-01-01 \.\. 2020-01-02 \(--days\): "
                                          r"all \d+ lie on 2026-04-10 \.\. 2026-04-1\d"):
        ingest(files, profiles=prof, options=IngestOptions(threads=1, days=("2020-01-01", "2020-01-02")))


def test_filters_can_be_relaxed(capture_files):
    _, _, files, prof = capture_files
    cfg = FilterConfig(min_account_age_days=0, bot_handle_patterns=[], require_non_self_engagement=False)
    counts, report = ingest(files, profiles=prof, filters=cfg, options=_opts())
    assert report.dropped_users == {"account_age": 0, "bot_handle": 0, "no_engagement": 0}
    assert counts.n_users == 9


def test_duplicates_across_files_do_not_double_count(capture_files, tmp_path):
    _, expected, files, prof = capture_files
    copy = tmp_path / "again.jsonl"
    copy.write_bytes(files[0].read_bytes())
    counts, _ = ingest([*files, copy], profiles=prof, options=_opts())
    assert _daily_dict(counts) == expected["daily"]
    assert _follows_dict(counts) == expected["follows"]


def test_the_order_files_are_given_in_changes_no_byte(capture_files, tmp_path):
    """counts.json (meta.source) and ingest_report.json (files) recorded the files in the order given: the same
    captures in another order wrote other bytes, and the study's fingerprint of counts.json changed with them."""
    _, _, files, prof = capture_files
    assert len(files) >= 2
    out = {}
    for name, order in (("given", files), ("reversed", files[::-1])):
        counts, report = ingest(order, profiles=prof, options=_opts())
        counts.save(tmp_path / name)
        rep = report.to_dict()
        rep.pop("seconds", None)
        rep.pop("throughput_mb_s", None)
        out[name] = ((tmp_path / name / "counts.json").read_bytes(), json.dumps(rep, sort_keys=True))
    assert out["given"] == out["reversed"]
    assert json.loads(out["given"][0])["meta"]["source"] == sorted(str(f) for f in files)


def test_errors_are_typed(tmp_path):
    with pytest.raises(IngestError, match="no input files"):
        ingest([], options=_opts())
    with pytest.raises(IngestError, match="does not exist"):
        ingest([tmp_path / "missing.jsonl"], options=_opts())
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"not json\n{\n")
    with pytest.raises(IngestError, match=r"no valid Jetstream events.*\(2 malformed"):
        ingest([bad], options=_opts())
    with pytest.raises(IngestError, match="ISO date"):
        ingest([bad], options=IngestOptions(days=("April", "2026-04-11")))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_counts_invariant_to_line_order_and_replays(capture_files, tmp_path, seed):
    """Shuffling lines within each day file and replaying random events changes nothing but `duplicates`."""
    cap, expected, files, prof = capture_files
    rng = np.random.default_rng(seed)
    shuffled, injected = [], 0
    for f in files:
        lines = [x for x in f.read_bytes().split(b"\n") if x]
        valid = [x for x in lines if x.startswith(b'{"did":"did:plc:') and b'"kind":"commit"' in x]
        extra = [valid[i] for i in rng.choice(len(valid), size=3, replace=False)]
        injected += len(extra)
        lines = lines + extra
        order = rng.permutation(len(lines))
        g = tmp_path / f"shuffled-{seed}" / f.name
        g.parent.mkdir(exist_ok=True)
        g.write_bytes(b"\n".join(lines[i] for i in order) + b"\n")
        shuffled.append(g)
    counts, report = ingest(shuffled, profiles=prof, options=_opts())
    assert _daily_dict(counts) == expected["daily"]
    assert _follows_dict(counts) == expected["follows"]
    assert report.by_kind == dict(cap.kinds)
    assert report.duplicates == cap.duplicates + injected
    assert report.malformed_lines == cap.malformed


def test_identity_event_carrying_a_commit_serves_both_uses(tmp_path: Path):
    """A hostile line with ``kind = "identity"`` and a follow-create ``commit``: as before the store was
    folded into one table, its handle is the account's handle and its follow is received (the follow
    rules do not look at ``kind``); it is counted once, under ``identity``, and is no app.bsky action."""
    a, b, c = "did:plc:" + "a" * 24, "did:plc:" + "b" * 24, "did:plc:" + "c" * 24
    t = 1_776_600_000_000_000  # 2026-04-19
    lines = [
        {"did": a, "time_us": t, "kind": "commit", "commit": {
            "rev": "r1", "operation": "create", "collection": "app.bsky.feed.post", "rkey": "p1",
            "record": {"text": "hello"}}},
        {"did": b, "time_us": t + 1, "kind": "commit", "commit": {
            "rev": "r2", "operation": "create", "collection": "app.bsky.feed.like", "rkey": "l1",
            "record": {"subject": {"cid": "x", "uri": f"at://{a}/app.bsky.feed.post/p1"}}}},
        {"did": b, "time_us": t + 2, "kind": "identity", "identity": {"did": b, "handle": "bee.test", "seq": 7},
         "commit": {"rev": "r3", "operation": "create", "collection": "app.bsky.graph.follow", "rkey": "f1",
                    "record": {"subject": a}}},
        {"did": c, "time_us": t + 3, "kind": "identity", "identity": {"did": c, "handle": "sea.test", "seq": 8},
         "commit": {"rev": "r4", "operation": "create", "collection": "app.bsky.graph.follow", "rkey": "f2",
                    "record": {"subject": a}}},
    ]
    path = tmp_path / "hostile.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    cfg = FilterConfig(min_account_age_days=0, bot_handle_patterns=[], require_non_self_engagement=False)
    counts, report = ingest([path], filters=cfg, options=_opts())
    assert report.by_kind == {"commit": 2, "identity": 2}
    users = counts.users.set_index("did")
    assert list(users.index) == [a, b]  # c only sent identity events: no app.bsky commit
    assert users.loc[b, "handle"] == "bee.test"
    assert users.loc[a, "followers"] == 2 and users.loc[a, "followers_source"] == "window_follows"
    assert _follows_dict(counts) == {(0, 0): 2}


def test_replayed_follows_posts_and_replies_count_once_across_files(tmp_path: Path):
    """Replayed lines (twice in one file and again in a second file) and a second follow record from the same
    follower: window followers are distinct followers whose follow was not deleted (a follow deleted, and its
    delete replayed, does not count), follows received and topic posts / replies are distinct records."""
    a, b, c, d = ("did:plc:" + ch * 24 for ch in "abcd")
    t = 1_776_600_000_000_000  # 2026-04-19

    def commit(did, dt, coll, rkey, op="create", record=None):
        body = {"rev": f"r{dt}", "operation": op, "collection": coll, "rkey": rkey}
        if record is not None:
            body["record"] = record
        return json.dumps({"did": did, "time_us": t + dt, "kind": "commit", "commit": body}) + "\n"

    follow = "app.bsky.graph.follow"
    post_uri = f"at://{a}/app.bsky.feed.post/p1"
    first = [commit(a, 1, "app.bsky.feed.post", "p1", record={"text": "new tariffs today"}),
             commit(b, 2, follow, "f1", record={"subject": a}),
             commit(b, 3, follow, "f2", record={"subject": a}),   # a second follow record, same follower
             commit(c, 4, follow, "f3", record={"subject": a}),
             commit(c, 5, follow, "f3", op="delete"),
             commit(d, 6, "app.bsky.feed.post", "r1", record={"text": "hi", "reply": {
                 "parent": {"cid": "x", "uri": post_uri}, "root": {"cid": "x", "uri": post_uri}}})]
    f1, f2 = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    f1.write_text("".join(first + first[:3] + first[4:]))  # every line but c's follow create twice
    f2.write_text("".join(first[1:3] + first[4:]))  # a replay of b's follows, c's delete and d's reply
    cfg = FilterConfig(min_account_age_days=0, bot_handle_patterns=[], require_non_self_engagement=False)
    tariffs = [tp for tp in load_topics() if tp.name == "trump-tariffs"]
    counts, report = ingest([f1, f2], topics=tariffs, filters=cfg, options=_opts())
    users = counts.users.set_index("did")
    assert list(users.index) == [a, b, c, d]
    assert users.loc[a, "followers"] == 1 and users.loc[a, "followers_source"] == "window_follows"
    assert _follows_dict(counts) == {(0, 0): 3}  # f1, f2, f3: follows received, the deleted one included
    assert _daily_dict(counts) == {(0, 0, "trump-tariffs"): (1, 1)}
    assert report.duplicates == 5  # within each file: the second file repeats the first but holds no copy itself


def test_an_engagement_whose_target_is_not_a_did_is_counted_not_an_edge(tmp_path: Path):
    """The event's ``did`` must be a DID (``did:<method>:<id>``); an engagement's target only had to start with
    ``did:``, so a like of ``at://did:/...``, a follow of ``did:plc`` or a reply to ``at://did:x:/...`` made the
    liker an engaged account (and ``did:`` a user it engaged with). The target is held to the same rule: such an
    engagement is no edge, and is counted in the report (``malformed_engagements``, per file and in total)."""
    a, b, x = "did:plc:" + "a" * 24, "did:plc:" + "b" * 24, "did:plc:" + "x" * 24
    t = 1_776_600_000_000_000  # 2026-04-19

    def commit(did, dt, coll, rkey, record):
        return {"did": did, "time_us": t + dt, "kind": "commit", "commit": {
            "rev": f"r{dt}", "operation": "create", "collection": coll, "rkey": rkey, "record": record}}

    def ref(author):
        return {"cid": "c", "uri": f"at://{author}/app.bsky.feed.post/p1"}

    lines = [
        commit(a, 0, "app.bsky.feed.post", "p1", {"text": "hello"}),
        commit(b, 1, "app.bsky.feed.like", "l1", {"subject": ref(a)}),  # a real engagement
        # x engages only with targets that are not DIDs
        commit(x, 2, "app.bsky.feed.like", "l2", {"subject": ref("did:")}),
        commit(x, 3, "app.bsky.feed.repost", "r1", {"subject": ref("did:web:")}),
        commit(x, 4, "app.bsky.graph.follow", "f1", {"subject": "did:plc"}),
        commit(x, 5, "app.bsky.feed.post", "p2", {"text": "re", "reply": {"parent": ref("did:x:"),
                                                                          "root": ref("did:x:")}}),
        commit(x, 6, "app.bsky.graph.follow", "f2", {"subject": "did:plc:ok but spaces"}),
    ]
    path = tmp_path / "targets.jsonl"
    path.write_text("".join(json.dumps(v) + "\n" for v in lines))
    cfg = FilterConfig(min_account_age_days=0, bot_handle_patterns=[], require_non_self_engagement=True)
    counts, report = ingest([path], filters=cfg, options=_opts())
    assert report.valid_events == 7 and report.malformed_lines == 0  # the events stay valid events
    assert report.malformed_engagements == 5
    assert report.files[0]["malformed_engagements"] == 5
    assert report.to_dict()["malformed_engagements"] == 5
    assert report.dropped_users.get("no_engagement") == 1  # x: its only engagements had no DID target
    assert list(counts.users["did"]) == [a, b]  # b liked a: both engaged
    assert counts.follows.empty  # no follow of "did:plc" or of a DID with spaces


def test_a_replayed_engagement_without_a_did_target_is_counted_once(tmp_path: Path):
    """``malformed_engagements`` counted lines: a replayed copy of the same event (Jetstream resends after a
    reconnect) was counted twice, where ``by_kind`` counts it once and ``duplicates`` names the copy."""
    a, x = "did:plc:" + "a" * 24, "did:plc:" + "x" * 24
    t = 1_776_600_000_000_000
    lines = [{"did": a, "time_us": t, "kind": "commit", "commit": {
                 "rev": "r0", "operation": "create", "collection": "app.bsky.feed.post", "rkey": "p1",
                 "record": {"text": "hello"}}},
             {"did": x, "time_us": t + 1, "kind": "commit", "commit": {
                 "rev": "r1", "operation": "create", "collection": "app.bsky.feed.like", "rkey": "l1",
                 "record": {"subject": {"cid": "c", "uri": "at://did:/app.bsky.feed.post/p1"}}}},
             {"did": x, "time_us": t + 2, "kind": "commit", "commit": {
                 "rev": "r2", "operation": "create", "collection": "app.bsky.feed.like", "rkey": "l2",
                 "record": {"subject": {"cid": "c", "uri": f"at://{a}/app.bsky.feed.post/p1"}}}}]
    path = tmp_path / "replayed.jsonl"
    path.write_text("".join(json.dumps(v) + "\n" for v in [*lines, lines[1], lines[1]]))
    cfg = FilterConfig(min_account_age_days=0, bot_handle_patterns=[], require_non_self_engagement=True)
    _, report = ingest([path], filters=cfg, options=_opts())
    assert report.duplicates == 2 and report.valid_events == 5
    assert report.malformed_engagements == 1
    assert report.files[0]["malformed_engagements"] == 1


def test_the_did_rule_on_distinct_values_separates_an_invalid_actor_from_an_invalid_target(tmp_path: Path):
    """The DID rule is applied once per distinct value after the scan (ingest_sql.NOT_DIDS): the same non-DID
    (``did:x:``) as an event's ``did`` makes that line malformed (neither acting nor engaging, not a malformed
    engagement), and as a valid account's target makes a malformed engagement; a self-like is neither; an invalid
    actor's engagement of a valid account is no edge; a clean like is an edge."""
    a, b, bad = "did:plc:" + "a" * 24, "did:plc:" + "b" * 24, "did:x:"
    t = 1_776_600_000_000_000

    def like(did, dt, author):
        return {"did": did, "time_us": t + dt, "kind": "commit", "commit": {
            "rev": f"r{dt}", "operation": "create", "collection": "app.bsky.feed.like", "rkey": f"l{dt}",
            "record": {"subject": {"cid": "c", "uri": f"at://{author}/app.bsky.feed.post/p"}}}}

    lines = [like(bad, 0, a),   # an invalid actor: a malformed line, so no engagement of a and no bad target
             like(bad, 1, bad),  # the same, liking itself
             like(a, 2, bad),    # a valid actor, an invalid target: a malformed engagement, no edge
             like(a, 3, a),      # a self-like: neither an edge nor malformed
             like(b, 4, a)]      # the one edge
    path = tmp_path / "dids.jsonl"
    path.write_text("".join(json.dumps(v) + "\n" for v in lines))
    cfg = FilterConfig(min_account_age_days=0, bot_handle_patterns=[], require_non_self_engagement=True)
    counts, report = ingest([path], filters=cfg, options=_opts())
    assert report.malformed_lines == 2 and report.valid_events == 3
    assert report.malformed_engagements == 1
    assert report.users_seen == 2 and list(counts.users["did"]) == [a, b]  # b liked a: both engaged
    assert report.dropped_users.get("no_engagement", 0) == 0


@pytest.mark.skipif(not GOLDEN.exists(), reason=SHARED_MISSING)
@pytest.mark.parametrize("name", ["day[1].jsonl", "day*.jsonl", "day?.jsonl"])
def test_a_file_named_like_a_glob_is_read_as_itself(tmp_path: Path, name: str):
    # DuckDB expands every file name it reads as a glob: 'day[1].jsonl' read its neighbour 'day1.jsonl' (three
    # events) in its place, silently, and a profile snapshot 'p[1].csv' read 'p1.csv'
    src = tmp_path / name
    src.write_bytes(GOLDEN.read_bytes())
    (tmp_path / "day1.jsonl").write_bytes(b"".join(GOLDEN.read_bytes().splitlines(keepends=True)[:3]))
    prof = tmp_path / "p[1].csv"
    prof.write_text("did,followers_count\ndid:plc:mcc5yghbk7tixqryac2yxku7,5\n")
    (tmp_path / "p1.csv").write_text("did,followers_count\ndid:plc:q235v55g5unth4zjjdpacfdr,7\n")
    counts, report = ingest([src], profiles=prof, options=_opts())
    rep = report.to_dict()
    assert rep["valid_events"] == 10 and rep["lines_read"] == 10
    assert rep["profiles"]["rows"] == 1
    by_did = dict(zip(counts.users["did"], counts.users["followers_source"], strict=True))
    assert by_did["did:plc:mcc5yghbk7tixqryac2yxku7"] == "snapshot"
