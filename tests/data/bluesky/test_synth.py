"""The SYNTHETIC generator: determinism, calibration quantiles, format, temporal profiles."""

from __future__ import annotations

import numpy as np
import pytest

from aumann.data.bluesky.counts import RawCounts
from aumann.data.bluesky.synth import TOPICS, SynthConfig, SynthError, calibration, generate, write_synth

U = 20_000


@pytest.fixture(scope="module")
def counts() -> RawCounts:
    return generate(SynthConfig(users=U, seed=3))


def test_same_seed_same_counts_and_different_seed_differs(counts: RawCounts) -> None:
    again = generate(SynthConfig(users=U, seed=3))
    assert np.array_equal(again.followers(), counts.followers())
    assert again.daily.equals(counts.daily)
    assert again.follows.equals(counts.follows)
    other = generate(SynthConfig(users=U, seed=4))
    assert not np.array_equal(other.followers(), counts.followers())


def test_follower_quantiles_in_calibrated_range(counts: RawCounts) -> None:
    f = counts.followers()
    assert 0.45 <= (f <= 1).mean() <= 0.62
    assert 60 <= np.quantile(f, 0.95) <= 160
    assert 300 <= np.quantile(f, 0.99) <= 800
    assert f.min() >= 0


def test_follows_received_bucket_table_roughly_matched(counts: RawCounts) -> None:
    cal = calibration(counts)
    zero = cal["follows_received_8_days"][0]
    assert zero["bucket"] == "0-0"
    assert abs(zero["achieved"] - zero["target"]) < 0.08
    for b in cal["follows_received_8_days"][:8]:  # buckets with enough users at U = 20k
        assert b["achieved"] / b["target"] == pytest.approx(1.0, abs=0.8), b


def test_topics_sparse_and_replies_per_post_calibrated(counts: RawCounts) -> None:
    cal = calibration(counts)
    assert set(counts.topics) == set(TOPICS)
    for topic, t in cal["topics"].items():
        assert 0.005 < t["participant_fraction"] < 0.2, topic  # zero-inflated: most users inactive
        assert t["replies_per_post"]["achieved"] == pytest.approx(0.46, abs=0.08), topic


def test_replies_concentrate_on_large_accounts(counts: RawCounts) -> None:
    d = counts.daily
    f = counts.followers()[d["user"].to_numpy()]
    per_post = d["replies_received"].to_numpy() / d["posts"].to_numpy()
    big = f >= np.quantile(counts.followers(), 0.99)
    assert per_post[big].mean() > 5 * per_post[f <= 1].mean()


def test_temporal_profiles_peak_where_the_events_are() -> None:
    c = generate(SynthConfig(users=60_000, seed=1))
    active = {t: (c.topic_matrix(t, "posts") > 0).sum(1) for t in c.topics}
    assert c.days[int(np.argmax(active["the-masters"]))] == "2026-04-13"
    assert c.days[int(np.argmax(active["wrestlemania"]))] == "2026-04-19"
    ed = active["earth-day-climate"]
    assert int(np.argmax(ed)) >= len(ed) - 2 and ed[-1] > 2 * ed[0]  # pre-event run-up
    for flat in ("mythos", "trump-tariffs"):
        a = active[flat]
        assert a.max() < 1.6 * np.median(a)  # no single dominant peak


def test_output_is_rawcounts_marked_synthetic(counts: RawCounts, tmp_path) -> None:
    cal = write_synth(counts, tmp_path)
    back = RawCounts.load(tmp_path)
    assert back.meta["synthetic"] is True and cal["synthetic"] is True
    assert (tmp_path / "calibration.json").read_text().count("SYNTHETIC") >= 1
    assert back.days[0] == "2026-04-07" and back.days[-1] == "2026-04-20"
    assert back.window_panel("mythos").meta["synthetic"] is True
    assert (back.users["followers_source"] == "synthetic").all()


def test_unknown_topic_in_participation_is_a_clear_error() -> None:
    with pytest.raises(SynthError, match="unknown topics"):
        generate(SynthConfig(users=200, participation={"nope": 0.1}))
