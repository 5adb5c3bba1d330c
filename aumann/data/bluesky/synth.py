"""A calibrated SYNTHETIC Bluesky-like panel of raw counts (no real data; for users without a capture).

The generator produces the same :class:`~aumann.data.bluesky.counts.RawCounts` as Jetstream
ingestion, with ``meta["synthetic"] = True`` so every downstream output can say so. Functional forms
follow ``specs/jetstream.md`` §4.4 (our suggestion there, not a source's):

* **Followers** F (static, start of window): ``F + 1 = floor(exp(Y))`` with
  ``Y ~ N(mu_f, sigma_f)`` for most users, and a Pareto(alpha) tail for a small fraction, so that
  P(F ≤ 1) ≈ 0.5, p95 ≈ 100, p99 ≈ 400–600, p99.9 ≈ 2,300 and max ≈ 10^6 (spec §4.3).
* **Activity propensity** λ_u (events per user-day) ~ lognormal(1.95, 1.12) (spec §4.2), mildly
  correlated with log followers; topic posts are a small fraction of events.
* **Topic participation** (zero inflation): user u takes part in topic k over the window with
  probability ∝ sqrt(λ_u)·(1 + log1p F_u)^γ scaled to the topic's participation rate; on day d a
  participant posts NegBin(mean = s_k·(λ_u/8)·profile_k(d), shape r) topic posts (most days 0).
* **Replies received** on those posts ~ NegBin(mean = κ_k·posts·(F+1)^β, shape 0.5), κ_k set from
  the realised posts so that replies/post ≈ 0.46 in every topic (spec §4.4): concentrated on large
  accounts through β.
* **Follows received** per day ~ Poisson(ρ_u·w_d), ρ_u = r0·(F+1)^η·G_u with G_u ~ Gamma(k, 1/k):
  calibrated to the 8-day bucket table of spec §4.3 (52 % zero, 16.5 % one, …).
* **Temporal profiles** (day 0 = 2026-04-07 … day 13 = 2026-04-20, UTC): the-masters peaks on day 6
  (April 13, after the Sunday final), wrestlemania on day 12 (April 19, after night one),
  earth-day-climate is a run-up peaking at the window end (April 20), mythos and trump-tariffs are
  flat and multi-modal.

Everything is vectorised numpy from one explicit :class:`numpy.random.Generator`; 1.67 M users take
seconds. :func:`calibration` reports targets vs achieved quantiles (written as ``calibration.json``).
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pandas as pd
from pydantic import ConfigDict, Field

from aumann.configs import ConfigModel
from aumann.data.bluesky.counts import RawCounts
from aumann.data.bluesky.counts_folder import SYNTH_COMMAND, SYNTH_OUTPUTS, checked_others, remove_others
from aumann.errors import SynthError
from aumann.io import (
    OUTPUTS_COMPLETE,
    file_digests,
    journaled,
    output_lock,
    settle_journal,
    write_json,
)
from aumann.seeding import as_generator, spawn

TOPICS = ("mythos", "trump-tariffs", "the-masters", "earth-day-climate", "wrestlemania")
FIRST_DAY = _dt.date(2026, 4, 7)
PAPER_USERS = 1_671_587

# The 8-day follows-received bucket table of spec §4.3 (fraction of active users).
FOLLOW_BUCKETS = (
    ((0, 0), 0.520), ((1, 1), 0.165), ((2, 3), 0.129), ((4, 7), 0.086), ((8, 15), 0.051),
    ((16, 31), 0.026), ((32, 63), 0.012), ((64, 127), 0.0056), ((128, 255), 0.0028),
    ((256, 511), 0.0011), ((512, 1023), 0.0004), ((1024, 2047), 0.0002), ((2048, None), 0.0001),
)


class SynthConfig(ConfigModel):
    """Settings of the synthetic generator (defaults are the calibrated ones); bad values raise SynthError."""

    config_error = SynthError

    model_config = ConfigDict(extra="forbid")

    users: int = Field(PAPER_USERS, ge=100, le=100_000_000)
    days: int = Field(14, ge=1, le=366)
    seed: int = Field(0, ge=0)
    # followers
    mu_f: float = Field(0.9, ge=-20, le=20)
    sigma_f: float = Field(2.3, gt=0, le=20)
    tail_fraction: float = Field(0.0003, ge=0, le=1)
    tail_xmin: float = Field(1000.0, gt=0)
    tail_alpha: float = Field(1.0, gt=0)
    max_followers: int = Field(3_000_000, ge=1, le=10_000_000_000)
    # activity
    mu_events: float = Field(1.95, ge=-20, le=10)
    sigma_events: float = Field(1.12, ge=0, le=10)
    activity_follower_corr: float = Field(0.3, ge=-1, le=1)
    # topics: participation rate over the window and daily posting scale
    participation: dict[str, Annotated[float, Field(ge=0, le=1)]] = Field(default_factory=lambda: {
        "mythos": 0.04, "trump-tariffs": 0.10, "the-masters": 0.05,
        "earth-day-climate": 0.06, "wrestlemania": 0.04})
    post_scale: float = Field(0.25, ge=0, le=1000)
    post_shape: float = Field(0.6, gt=0)
    participation_follower_gamma: float = Field(0.0, ge=-10, le=10)
    reply_beta: float = Field(0.5, ge=-10, le=10)
    reply_shape: float = Field(0.5, gt=0)
    replies_per_post: float = Field(0.46, ge=0, le=1000)
    # follows received
    follow_rate: float = Field(0.1, ge=0, le=1000)
    follow_eta: float = Field(0.7, ge=-10, le=10)
    follow_gamma_shape: float = Field(0.3, gt=0)


def day_labels(days: int) -> list[str]:
    return [(FIRST_DAY + _dt.timedelta(days=d)).isoformat() for d in range(days)]


def topic_profiles(days: int) -> dict[str, np.ndarray]:
    """Daily intensity profile per topic (mean 1 over the window)."""
    t = np.arange(days, dtype=np.float64)

    def bump(center: float, width: float, height: float) -> np.ndarray:
        return height * np.exp(-0.5 * ((t - center) / width) ** 2)

    prof = {
        # flat, multi-modal (several modest bumps, none dominant)
        "mythos": 1.0 + bump(1, 0.8, 0.55) + bump(5, 1.0, 0.45) + bump(10, 1.2, 0.5),
        "trump-tariffs": 1.0 + bump(1, 1.0, 0.5) + bump(4, 0.8, 0.4) + bump(9, 1.2, 0.45),
        # sharp event peak: tournament Thu-Sun (days 2..5), final round -> UTC day 6 (April 13)
        "the-masters": 0.25 + bump(4.5, 1.3, 1.2) + bump(6, 0.5, 6.0),
        # pre-event run-up toward Earth Day (April 22), peaking at the window end
        "earth-day-climate": 0.3 + 3.0 * np.exp((t - (days - 1)) / 3.0),
        # night one April 18 US -> UTC day 12 (April 19), night two spills into day 13
        "wrestlemania": 0.2 + bump(12, 0.45, 7.0) + bump(13, 0.5, 3.0) + bump(9, 2.0, 0.4),
    }
    return {k: v / v.mean() for k, v in prof.items()}


def _negbin(rng: np.random.Generator, mean: np.ndarray, shape: float) -> np.ndarray:
    """NegBin draws with the given mean and shape (variance mean + mean²/shape); mean 0 -> 0."""
    mean = np.asarray(mean, dtype=np.float64)
    p = shape / (shape + np.maximum(mean, 1e-300))
    return rng.negative_binomial(shape, p).astype(np.int64)


def _followers(cfg: SynthConfig, rng: np.random.Generator) -> np.ndarray:
    y = rng.normal(cfg.mu_f, cfg.sigma_f, cfg.users)
    f = np.floor(np.exp(np.minimum(y, np.log(cfg.max_followers + 1.0)))) - 1.0
    tail = rng.random(cfg.users) < cfg.tail_fraction
    pareto = cfg.tail_xmin * (1.0 + rng.pareto(cfg.tail_alpha, int(tail.sum())))
    f[tail] = np.maximum(f[tail], np.floor(pareto))
    return np.clip(f, 0, cfg.max_followers).astype(np.int64)


def generate(config: SynthConfig | None = None, *, rng: Any = None) -> RawCounts:
    """Generate SYNTHETIC raw counts (see the module docstring for the model).

    Args:
        config: generator settings (default :class:`SynthConfig` with ``users = 1,671,587``).
        rng: optional override of ``config.seed`` (anything :func:`aumann.seeding.as_generator` takes).

    Returns:
        RawCounts with ``meta["synthetic"] = True`` and the settings in ``meta["config"]``.
    """
    cfg = config or SynthConfig()
    if not isinstance(cfg, SynthConfig):
        raise SynthError(f"config must be a SynthConfig; got {type(cfg).__name__}")
    unknown = sorted(set(cfg.participation) - set(TOPICS))
    if unknown:
        raise SynthError(f"participation names unknown topics {unknown}; topics are {list(TOPICS)}")
    try:
        with np.errstate(over="raise", invalid="raise"):
            return _generate(cfg, rng)
    except (ValueError, FloatingPointError, OverflowError) as exc:
        if isinstance(exc, SynthError):
            raise
        raise SynthError(f"these synth settings give an invalid distribution ({type(exc).__name__}: {exc}); "
                         f"settings: {cfg.model_dump()}") from exc


def _generate(cfg: SynthConfig, rng: Any) -> RawCounts:
    root = as_generator(cfg.seed if rng is None else rng)
    g_users, g_follows, *g_topics = spawn(root, 2 + len(TOPICS))
    u, n_days = cfg.users, cfg.days

    followers = _followers(cfg, g_users)
    logf = np.log1p(followers.astype(np.float64))
    zf = (logf - logf.mean()) / (logf.std() + 1e-12)
    rho = cfg.activity_follower_corr
    eps = g_users.standard_normal(u)
    log_events = cfg.mu_events + cfg.sigma_events * (rho * zf + np.sqrt(1 - rho**2) * eps)
    lam = np.exp(log_events)  # events per user-day

    profiles = topic_profiles(n_days)
    blocks: list[pd.DataFrame] = []
    fpow = (followers + 1.0) ** cfg.reply_beta
    w_part = np.sqrt(lam) * (1.0 + logf) ** cfg.participation_follower_gamma
    w_part /= w_part.mean()
    for topic, g in zip(TOPICS, g_topics):
        rate = cfg.participation.get(topic, 0.0)
        if rate <= 0:
            continue
        members = np.flatnonzero(g.random(u) < np.minimum(1.0, rate * w_part))
        prof = profiles[topic]
        mean = cfg.post_scale * (lam[members, None] / 8.0) * prof[None, :]
        posts = _negbin(g, mean, cfg.post_shape)  # (members, days)
        exposure = posts * fpow[members, None]
        kappa = cfg.replies_per_post * posts.sum() / max(exposure.sum(), 1e-12)
        replies = _negbin(g, kappa * exposure, cfg.reply_shape)
        mi, di = np.nonzero(posts)
        blocks.append(pd.DataFrame({
            "user": members[mi].astype(np.int64), "day": di.astype(np.int64), "topic": topic,
            "posts": posts[mi, di], "replies_received": replies[mi, di]}))
    daily = (pd.concat(blocks, ignore_index=True) if blocks else
             pd.DataFrame({c: pd.Series(dtype="int64") for c in ("user", "day", "posts", "replies_received")}
                          ).assign(topic=pd.Series(dtype=str)))
    daily = daily[["user", "day", "topic", "posts", "replies_received"]]

    # follows received: gamma-mixed Poisson, rate grows with followers
    heter = g_follows.gamma(cfg.follow_gamma_shape, 1.0 / cfg.follow_gamma_shape, u)
    frate = cfg.follow_rate * (followers + 1.0) ** cfg.follow_eta * heter
    fol_users, fol_days, fol_counts = [], [], []
    for d in range(n_days):
        c = g_follows.poisson(frate)
        nz = np.flatnonzero(c)
        fol_users.append(nz)
        fol_days.append(np.full(nz.size, d, dtype=np.int64))
        fol_counts.append(c[nz])
    follows = pd.DataFrame({"user": np.concatenate(fol_users).astype(np.int64),
                            "day": np.concatenate(fol_days),
                            "follows_received": np.concatenate(fol_counts).astype(np.int64)})

    users = pd.DataFrame({
        "user": np.arange(u, dtype=np.int64),
        "did": pd.array(np.char.add("did:synth:", np.arange(u).astype(str)), dtype="string"),
        "followers": followers,
        "followers_source": "synthetic",
        "created_at": pd.Series(pd.NaT, index=range(u), dtype="datetime64[ns, UTC]"),
        "handle": pd.Series([None] * u, dtype="object"),
    })
    meta = {"synthetic": True, "generator": "aumann.data.bluesky.synth",
            "note": "SYNTHETIC panel calibrated to public statistics; not real Bluesky data",
            "config": cfg.model_dump()}
    return RawCounts(users=users, daily=daily, follows=follows, days=day_labels(n_days),
                     topics=list(TOPICS), meta=meta)


def _q(x: np.ndarray, qs: tuple[float, ...]) -> dict[str, float]:
    return {f"p{round(q * 100, 1):g}": float(np.quantile(x, q)) for q in qs} if x.size else {}


def calibration(counts: RawCounts) -> dict[str, Any]:
    """Targets (spec §4) vs achieved statistics of a (synthetic or real) RawCounts."""
    f = counts.followers()
    u = counts.n_users
    fol = counts.follows
    n8 = min(8, len(counts.days))
    f8 = np.zeros(u, dtype=np.int64)
    sel = fol["day"].to_numpy() < n8
    np.add.at(f8, fol["user"].to_numpy()[sel], fol["follows_received"].to_numpy()[sel])
    buckets = []
    for (lo, hi), target in FOLLOW_BUCKETS:
        m = (f8 >= lo) if hi is None else ((f8 >= lo) & (f8 <= hi))
        buckets.append({"bucket": f"{lo}-{hi if hi is not None else 'inf'}", "target": target,
                        "achieved": float(m.mean())})
    topics: dict[str, Any] = {}
    d = counts.daily
    for topic in counts.topics:
        dt = d[d["topic"] == topic]
        per_user = dt.groupby("user")[["posts", "replies_received"]].sum()
        per_day = dt.groupby("day")["user"].nunique().reindex(range(len(counts.days)), fill_value=0)
        posts = int(dt["posts"].sum())
        rr = per_user["replies_received"].to_numpy()
        top1 = np.sort(rr)[::-1][: max(1, round(0.01 * len(rr)))].sum() / max(rr.sum(), 1)
        topics[topic] = {
            "participants": len(per_user), "participant_fraction": len(per_user) / u,
            "posts": posts, "replies_received": int(dt["replies_received"].sum()),
            "replies_per_post": {"target": 0.46, "achieved": float(dt["replies_received"].sum() / max(posts, 1))},
            "share_of_replies_to_top1pct_receivers": float(top1),
            "posts_per_participant": _q(per_user["posts"].to_numpy(), (0.5, 0.9, 0.99)),
            "active_users_per_day": per_day.astype(int).tolist(),
            "peak_day": counts.days[int(np.argmax(per_day.to_numpy()))],
        }
    return {
        "synthetic": bool(counts.meta.get("synthetic", False)),
        "users": u,
        "followers": {
            "targets": {"P(F<=1)": 0.5, "p95": 95.0, "p99": "400-600", "p99.9": 2300.0, "max": "~1e6"},
            "achieved": {"P(F<=1)": float((f <= 1).mean()), **_q(f, (0.5, 0.95, 0.99, 0.999)),
                         "max": int(f.max())},
        },
        "follows_received_8_days": buckets,
        "topics": topics,
    }


def write_synth(counts: RawCounts, out_dir: str | os.PathLike[str], *, command: str = SYNTH_COMMAND,
                config: dict[str, Any] | None = None, seeds: Any = None,
                extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Save the counts, ``calibration.json`` (both marked SYNTHETIC) and a manifest (``synthetic: true``, the
    SHA-256 of every file written, ``extra`` added); returns the calibration.

    The folder then holds this population's files alone: the outputs an earlier ``aumann bluesky build-panel``
    (or synth) recorded writing there that synth does not write (``panels/``, ``ingest_report.json``,
    ``identifiers.parquet``) are removed, so a real capture's files never sit beside SYNTHETIC counts.

    Raises:
        OutputError: before anything is written, a file in the folder with the name of an output (synth's or
            build-panel's) that aumann did not record writing there (a file of your own; kept).
    """
    from aumann.manifest import write_manifest

    out = Path(out_dir)
    # one writer per folder for the whole write (re-entrant: `aumann bluesky synth` holds it already)
    with output_lock(out, command=command):
        _, stale = checked_others(out, SYNTH_OUTPUTS)  # every file checked before any is written or removed
        with journaled(out):
            remove_others(out, stale)
            counts.save(out)
            cal = calibration(counts)
            write_json(out / "calibration.json",
                       {"SYNTHETIC": "this panel is synthetic, not real Bluesky data", **cal}, indent=2)
            write_manifest(out, command, config or {}, seeds=seeds,
                           extra={**(extra or {}), "synthetic": True, "outputs": sorted(SYNTH_OUTPUTS),
                                  OUTPUTS_COMPLETE: True, "outputs_sha256": file_digests(out, SYNTH_OUTPUTS)})
        settle_journal(out)
    return cal


__all__ = ["PAPER_USERS", "TOPICS", "SynthConfig", "SynthError", "calibration", "day_labels", "generate",
           "topic_profiles", "write_synth"]
