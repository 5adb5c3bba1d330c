"""Sampling protocols of the cross-scale study (paper, Section 3.1 and Appendix N).

Each protocol fixes a *pool* of user positions, then draws N users uniformly from it:

* ``BIAS_visibility``: pool = top ``pool_fraction`` (5 %) of users by the composite visibility
  score ``v_i = z(log1p followers_i) + z(log1p(topic posts_i + topic replies received_i))``, with
  ``z`` standardising over the full population;
* ``BIAS_topic_x_follow``: pool = top K by ``log1p(b_i + c_i) · log1p(followers_i)`` (raw window
  counts b, c);
* ``BIAS_topic_top``: pool = top K by topic posts b_i;
* ``RAND``: pool = everyone.

K is matched to the topic's active count: the median number of users active on the topic per day
(window panels: the number of users with any topic post), clamped to ``[k_min, pool_fraction·U]``.
Ranking ties are broken by the opaque user index (stable sort), so pools are deterministic.

**Pool-exhaustion rule**: when N ≥ |pool| the subset is the whole pool plus a uniform random
complement of N − |pool| users from outside it; N = U is the full panel (a single deterministic run).

**Seeds**: the generator for a draw is ``SeedSequence([seed, protocol code, crc32(topic), N])`` — no
Python ``hash`` — so each (protocol, topic, size, seed) cell is reproducible and independent.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from aumann.checks import as_int
from aumann.errors import ProtocolError

PROTOCOLS = ("BIAS_visibility", "BIAS_topic_x_follow", "BIAS_topic_top", "RAND")
SHORT = {"BIAS_visibility": "BIAS_v", "BIAS_topic_x_follow": "BIAS_xf", "BIAS_topic_top": "BIAS_top",
         "RAND": "RAND"}
_CODE = {name: i + 1 for i, name in enumerate(PROTOCOLS)}


def _z(x: np.ndarray) -> np.ndarray:
    sd = x.std()
    return (x - x.mean()) / (sd if sd > 0 else 1.0)


def top_k(score: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest scores (ties broken by position), sorted ascending."""
    k = int(min(max(k, 0), score.shape[0]))
    order = np.argsort(-np.asarray(score, dtype=np.float64), kind="stable")
    return np.sort(order[:k])


def visibility_score(followers: np.ndarray, posts: np.ndarray, replies: np.ndarray) -> np.ndarray:
    """``z(log1p followers) + z(log1p(posts + replies))`` over the full population."""
    return _z(np.log1p(followers.astype(np.float64))) + _z(np.log1p((posts + replies).astype(np.float64)))


@dataclass(frozen=True)
class TopicPools:
    """The fixed pools of one topic (positions into the full population, sorted)."""

    topic: str
    n_users: int
    pools: dict[str, np.ndarray]
    k_matched: int

    def pool(self, protocol: str) -> np.ndarray | None:
        """The pool of ``protocol`` (``None`` for RAND: everyone)."""
        if protocol not in PROTOCOLS:
            raise ProtocolError(f"unknown protocol {protocol!r}; valid: {list(PROTOCOLS)}")
        return None if protocol == "RAND" else self.pools[protocol]

    def pool_size(self, protocol: str) -> int:
        p = self.pool(protocol)
        return self.n_users if p is None else int(p.size)


def build_pools(topic: str, followers: np.ndarray, posts: np.ndarray, replies: np.ndarray, *,
                pool_fraction: float = 0.05, active_count: int | None = None, k_min: int = 100) -> TopicPools:
    """Build the three biased pools of one topic from window counts (length-U int arrays).

    Args:
        topic: topic name (for labels and seeding).
        followers, posts, replies: per-user follower counts, topic posts and topic replies received
            over the window.
        pool_fraction: size of the visibility pool as a fraction of U (paper: 5 %).
        active_count: the topic's active count that K is matched to (default: users with posts > 0).
        k_min: lower clamp of K.
    """
    u = followers.shape[0]
    if not (posts.shape == replies.shape == (u,)):
        raise ProtocolError(f"followers/posts/replies must all have shape ({u},); got "
                            f"{followers.shape}, {posts.shape}, {replies.shape}")
    if not 0 < pool_fraction <= 1:
        raise ProtocolError(f"pool_fraction must be in (0, 1]; got {pool_fraction}")
    n_vis = max(1, round(pool_fraction * u))
    active = int((posts > 0).sum()) if active_count is None else int(active_count)
    k = int(np.clip(active, min(k_min, u), max(min(k_min, u), n_vis)))
    lf = np.log1p(followers.astype(np.float64))
    xf = np.log1p((posts + replies).astype(np.float64)) * lf
    pools = {
        "BIAS_visibility": top_k(visibility_score(followers, posts, replies), n_vis),
        "BIAS_topic_x_follow": top_k(xf, k),
        "BIAS_topic_top": top_k(posts.astype(np.float64), k),
    }
    return TopicPools(topic=topic, n_users=u, pools=pools, k_matched=k)


def draw_rng(seed: int, protocol: str, topic: str, size: int) -> np.random.Generator:
    """The generator of one draw: ``SeedSequence([seed, protocol code, crc32(topic), size])``."""
    if protocol not in _CODE:
        raise ProtocolError(f"unknown protocol {protocol!r}; valid: {list(PROTOCOLS)}")
    entropy = [int(seed), _CODE[protocol], zlib.crc32(topic.encode("utf-8")), int(size)]
    return np.random.default_rng(np.random.SeedSequence(entropy))


def draw(pool: np.ndarray | None, n: int, n_users: int, rng: np.random.Generator) -> np.ndarray:
    """N positions drawn uniformly from ``pool`` with the pool-exhaustion rule; sorted ascending.

    ``pool=None`` means everyone. ``n >= n_users`` returns all positions.
    """
    if n < 1:
        raise ProtocolError(f"sample size must be ≥ 1; got {n}")
    if n >= n_users:
        return np.arange(n_users, dtype=np.int64)
    if pool is None:
        return np.sort(rng.choice(n_users, size=n, replace=False)).astype(np.int64)
    pool = np.asarray(pool, dtype=np.int64)
    if n < pool.size:
        return np.sort(rng.choice(pool, size=n, replace=False))
    mask = np.ones(n_users, dtype=bool)
    mask[pool] = False
    rest = np.flatnonzero(mask)
    extra = rng.choice(rest, size=n - pool.size, replace=False)
    return np.sort(np.concatenate([pool, extra]))


def sample(pools: TopicPools, protocol: str, size: int, seed: int) -> np.ndarray:
    """The subset (positions) of one (protocol, topic, size, seed) cell."""
    if not isinstance(pools, TopicPools):
        raise ProtocolError(f"sample needs the TopicPools of a topic (build_pools); got {type(pools).__name__}")
    if protocol not in PROTOCOLS:
        raise ProtocolError(f"unknown sampling protocol {protocol!r}; use one of {list(PROTOCOLS)}")
    size = as_int(size, "size", minimum=1, error=ProtocolError)
    seed = as_int(seed, "seed", minimum=0, error=ProtocolError)
    rng = draw_rng(seed, protocol, pools.topic, size)
    return draw(pools.pool(protocol), size, pools.n_users, rng)


__all__ = ["PROTOCOLS", "SHORT", "ProtocolError", "TopicPools", "build_pools", "draw", "draw_rng", "sample",
           "top_k", "visibility_score"]
