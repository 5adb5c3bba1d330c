"""Sampling protocols: pools, pool-exhaustion rule, determinism, seed independence."""

from __future__ import annotations

import numpy as np
import pytest

from aumann.studies.crossscale.protocols import (
    PROTOCOLS,
    ProtocolError,
    build_pools,
    draw,
    sample,
    visibility_score,
)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    u = 10_000
    followers = np.floor(np.exp(rng.normal(0.9, 2.3, u))).astype(np.int64)
    posts = np.where(rng.random(u) < 0.05, rng.integers(1, 20, u), 0)
    replies = np.where(posts > 0, rng.poisson(0.5 * posts), 0)
    return followers, posts, replies


def test_pool_sizes_and_contents(data) -> None:
    followers, posts, replies = data
    pools = build_pools("mythos", followers, posts, replies, pool_fraction=0.05, active_count=300)
    assert pools.pool_size("BIAS_visibility") == 500
    assert pools.pool_size("BIAS_topic_x_follow") == 300 == pools.pool_size("BIAS_topic_top")
    assert pools.pool_size("RAND") == 10_000 and pools.pool("RAND") is None
    v = visibility_score(followers, posts, replies)
    pool = pools.pool("BIAS_visibility")
    outside = np.setdiff1d(np.arange(10_000), pool)
    assert v[pool].min() >= v[outside].max()
    top = pools.pool("BIAS_topic_top")
    assert posts[top].min() >= np.sort(posts)[::-1][299]


def test_k_is_clamped(data) -> None:
    followers, posts, replies = data
    assert build_pools("t", followers, posts, replies, active_count=5).k_matched == 100
    assert build_pools("t", followers, posts, replies, active_count=10**9).k_matched == 500


def test_draw_inside_pool_and_exhaustion_rule() -> None:
    pool = np.arange(100, 200)
    rng = np.random.default_rng(1)
    s = draw(pool, 50, 1000, rng)
    assert s.size == 50 and np.unique(s).size == 50 and np.isin(s, pool).all()
    s = draw(pool, 300, 1000, rng)
    assert s.size == 300 and np.unique(s).size == 300 and np.isin(pool, s).all()
    assert draw(pool, 1000, 1000, rng).tolist() == list(range(1000))
    s = draw(None, 10, 1000, rng)
    assert s.size == 10 and np.unique(s).size == 10


def test_deterministic_per_cell_and_independent_across_seeds(data) -> None:
    followers, posts, replies = data
    pools = build_pools("mythos", followers, posts, replies)
    for protocol in PROTOCOLS:
        a = sample(pools, protocol, 100, 0)
        assert np.array_equal(a, sample(pools, protocol, 100, 0))
        b = sample(pools, protocol, 100, 1)
        assert not np.array_equal(a, b)
        assert np.intersect1d(a, b).size < 60  # different seeds give (mostly) disjoint draws
    other = build_pools("wrestlemania", followers, posts, replies)
    assert not np.array_equal(sample(pools, "RAND", 100, 0), sample(other, "RAND", 100, 0))


def test_bad_requests_are_typed_errors(data) -> None:
    followers, posts, replies = data
    pools = build_pools("mythos", followers, posts, replies)
    with pytest.raises(ProtocolError, match="unknown protocol"):
        pools.pool("BIAS_nope")
    with pytest.raises(ProtocolError, match="≥ 1"):
        draw(None, 0, 10, np.random.default_rng(0))
    with pytest.raises(ProtocolError, match="pool_fraction"):
        build_pools("t", followers, posts, replies, pool_fraction=0)
