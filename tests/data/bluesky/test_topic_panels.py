"""A topic's window and daily panels from one pass over its counts (what build-panel writes for every topic)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from aumann.data.bluesky.build import write_build_outputs
from aumann.data.bluesky.counts import RawCounts
from aumann.panel import Panel


def _counts() -> RawCounts:
    users = pd.DataFrame({"user": [0, 1, 2], "did": ["did:plc:a", "did:plc:b", "did:plc:c"],
                          "followers": [10, 0, 3], "followers_source": ["snapshot"] * 3,
                          "created_at": pd.to_datetime([None] * 3, utc=True), "handle": [None] * 3})
    daily = pd.DataFrame({"user": [0, 0, 2, 1, 2], "day": [0, 1, 1, 0, 0], "topic": ["x", "x", "x", "y", "x"],
                          "posts": [1, 2, 3, 4, 5], "replies_received": [6, 0, 7, 8, 9]})
    follows = pd.DataFrame({"user": [1], "day": [0], "follows_received": [2]})
    return RawCounts(users=users, daily=daily, follows=follows, days=["2026-04-10", "2026-04-11"], topics=["x", "y"])


def test_topic_panels_are_the_window_and_daily_panels_by_hand():
    counts = _counts()
    window, daily = counts.topic_panels("x")
    assert window.equals(counts.window_panel("x")) and daily.equals(counts.daily_panel("x"))
    posts = np.array([[1, 0, 5], [2, 0, 3]])  # topic x by (day, user), written out from the table above
    replies = np.array([[6, 0, 9], [0, 0, 7]])
    np.testing.assert_array_equal(daily.values[:, :, 1], np.log1p(posts))
    np.testing.assert_array_equal(daily.values[:, :, 2], np.log1p(replies))
    np.testing.assert_array_equal(window.values[0, :, 1], np.log1p(posts.sum(0)))
    np.testing.assert_array_equal(window.values[0, :, 2], np.log1p(replies.sum(0)))
    np.testing.assert_array_equal(window.values[0, :, 0], np.log1p([10, 0, 3]))
    np.testing.assert_array_equal(counts.topic_matrix("y", "posts"), [[0, 4, 0], [0, 0, 0]])


def test_build_outputs_gather_each_topics_counts_once(tmp_path, monkeypatch):
    counts = _counts()
    calls: list[str] = []
    real = RawCounts._topic_matrices
    monkeypatch.setattr(RawCounts, "_topic_matrices", lambda self, topic, *a: (calls.append(topic),
                                                                                real(self, topic, *a))[1])
    write_build_outputs(counts, {}, tmp_path)
    assert calls == ["x", "y"]  # was four times each (window and daily, posts and replies apart)
    monkeypatch.undo()
    for topic in counts.topics:
        assert Panel.load(tmp_path / "panels" / "window" / f"{topic}.npz").equals(counts.window_panel(topic))
        assert Panel.load(tmp_path / "panels" / "daily" / f"{topic}.npz").equals(counts.daily_panel(topic))
