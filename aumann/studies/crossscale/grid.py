"""One topic's study data and the computation of one grid cell (paper §3, §4.2, App. A.4, K–O).

A *cell* is (topic, protocol, size): for each seed a subset S is drawn (protocols.py), the window
panel is restricted to S (``panel.take_agents``, a panel of its own scale n = |S|) and every indicator
is attributed on it with the engine (``attribute(f, sub_panel)``; zero baseline → closed forms).
Per seed the cell keeps only aggregates (privacy by default, Appendix I):

* tier shares R_G^S = Σ_{i∈S∩G} φ̃_i^S for the follower tiers (inherited from the full panel) and
  the alternative elite anchors (top 1 % by topic posts, by topic replies received);
* the best-scalar residual ε and c* against the full-panel shares restricted to S;
* for f_var the residual law ε_law (from raw features) and |ε − ε_law|;
* for f_heat the top-10 Jaccard of S's top-10 against the full panel's top-10;
* |S ∩ G_top|; optionally the per-day R_top^(t) of the per-day panel restricted to S.

The FULL cell of a topic holds the full-panel tier shares per indicator and the per-day heat
attribution aggregated to days × 100 follower-percentile bins (the heatmap M(t, p)), Φ_t and the
per-day tier shares (peak day).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aumann.attribution import Panel, attribute, indicators
from aumann.attribution.metrics import set_jaccard
from aumann.attribution.result import group_shares
from aumann.data.bluesky.counts import RawCounts
from aumann.errors import ZeroDeltaVError
from aumann.studies.crossscale.protocols import TopicPools, build_pools, sample
from aumann.studies.crossscale.residual import best_scalar, residual_law_var
from aumann.tiers import TIER_LABELS, tier_codes, tiers_by_rank

ANCHORS = ("posts", "replies")
N_BINS = 100


@dataclass
class TopicData:
    """Everything about one topic that the cells of that topic share."""

    topic: str
    panel: Panel  # window panel (T = 1)
    followers: np.ndarray
    posts: np.ndarray
    replies: np.ndarray
    tier_code: np.ndarray  # 0 top, 1 mid, 2 tail
    anchors: dict[str, np.ndarray]  # bool masks
    pools: TopicPools
    g: np.ndarray
    full: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def n_users(self) -> int:
        return int(self.followers.shape[0])


def _tier_shares(share: np.ndarray, code: np.ndarray) -> dict[str, float]:
    """R_G of the normalised shares φ̃ = φ/Δv per tier (codes 0, 1, 2)."""
    return group_shares(share, np.asarray(TIER_LABELS)[code], total=1.0, groups=TIER_LABELS)


def _top10(share: np.ndarray) -> np.ndarray:
    """Positions of the 10 largest shares (ties by position), O(n)."""
    k = min(10, share.shape[0])
    if share.shape[0] > 64:
        cut = np.partition(share, share.shape[0] - k)[share.shape[0] - k]
        cand = np.flatnonzero(share >= cut)
    else:
        cand = np.arange(share.shape[0])
    return cand[np.argsort(-share[cand], kind="stable")[:k]]


def _topic_counts(counts: RawCounts, topic: str) -> tuple[np.ndarray, np.ndarray]:
    """(days, U) posts and replies-received matrices of one topic (bincount: fast at 10^6 users)."""
    d = counts.daily[counts.daily["topic"] == topic]
    flat = d["day"].to_numpy(np.int64) * counts.n_users + d["user"].to_numpy(np.int64)
    shape = (len(counts.days), counts.n_users)
    size = shape[0] * shape[1]
    return tuple(np.bincount(flat, weights=d[c].to_numpy(np.float64), minlength=size).astype(np.int64)
                 .reshape(shape) for c in ("posts", "replies_received"))  # type: ignore[return-value]


def prepare_topic(counts: RawCounts, topic: str, indicator_names: list[str], *, pool_fraction: float = 0.05,
                  k_min: int = 100) -> TopicData:
    """Window panel, pools, tiers, anchors and the full-panel attribution of every indicator."""
    panel = counts.window_panel(topic)
    posts_d, replies_d = _topic_counts(counts, topic)
    replies = replies_d.sum(0)
    posts = posts_d.sum(0)
    followers = counts.followers()
    active = int(np.median((posts_d > 0).sum(1)))  # median daily active users: K of the topic pools
    pools = build_pools(topic, followers, posts, replies, pool_fraction=pool_fraction, active_count=active,
                        k_min=k_min)
    tier_code = tier_codes(np.asarray(panel.groups["tier"]))
    anchors = {"posts": tiers_by_rank(posts.astype(np.float64), (0.01, 0.0)) == "top",
               "replies": tiers_by_rank(replies.astype(np.float64), (0.01, 0.0)) == "top"}
    data = TopicData(topic=topic, panel=panel, followers=followers, posts=posts, replies=replies,
                     tier_code=tier_code, anchors=anchors, pools=pools, g=panel.values[0].sum(axis=1))
    for name in indicator_names:
        res = attribute(indicators.get(name), panel)
        dv = float(res.delta_v[0])
        if dv == 0.0:
            raise ZeroDeltaVError(f"topic {topic!r}: Δv = 0 for {name} on the full panel (no topic activity?)")
        share = res.phi[0] / dv
        data.full[name] = {"share": share, "delta_v": dv, "top10": _top10(share),
                           "R": _tier_shares(share, tier_code),
                           "anchors": {a: float(share[m].sum()) for a, m in anchors.items()},
                           "efficiency_gap": float(res.max_efficiency_gap)}
    return data


def full_cell(counts: RawCounts, data: TopicData, *, top_agents: int = 0) -> dict[str, Any]:
    """The FULL cell: window tier shares per indicator, plus the per-day heat structure.

    With ``top_agents = k > 0`` it also keeps the k users with the largest Φ_i = Σ_t φ_{i,t} of the
    per-day heat attribution (keyed by the opaque user index, never a DID or handle): Φ_i, its share
    of Σ_t Δv_t, φ_i per day, tier, followers and that user's features on the peak day. The study asks
    for them only for SYNTHETIC panels or with ``export_per_user`` (privacy by default).
    """
    t0 = time.perf_counter()
    out: dict[str, Any] = {
        "topic": data.topic, "protocol": "FULL", "size": data.n_users,
        "pool_sizes": {p: data.pools.pool_size(p) for p in data.pools.pools} | {"RAND": data.n_users},
        "k_matched": data.pools.k_matched,
        "ind": {name: {"R": v["R"], "anchors": v["anchors"], "delta_v": v["delta_v"],
                       "efficiency_gap": v["efficiency_gap"]} for name, v in data.full.items()},
        "anchor_overlap_with_top": {a: float((m & (data.tier_code == 0)).sum() / max((data.tier_code == 0).sum(), 1))
                                    for a, m in data.anchors.items()},
    }
    daily = counts.daily_panel(data.topic)
    res = attribute(indicators.get("heat"), daily)
    phi = res.phi  # (T, U)
    order = np.argsort(-data.followers.astype(np.float64), kind="stable")
    bins = np.empty(data.n_users, dtype=np.int64)
    bins[order] = (np.arange(data.n_users) * N_BINS) // data.n_users  # bin 0 = top 1 %
    heat = np.stack([np.bincount(bins, weights=phi[t], minlength=N_BINS) for t in range(phi.shape[0])])
    dv = res.delta_v
    tiers = np.stack([np.bincount(data.tier_code, weights=phi[t], minlength=3) for t in range(phi.shape[0])])
    with np.errstate(invalid="ignore", divide="ignore"):
        tier_shares = np.where(dv[:, None] != 0, tiers / np.where(dv[:, None] != 0, dv[:, None], 1.0), np.nan)
    peak = int(np.argmax(dv))
    out["daily"] = {
        "days": list(counts.days), "Phi_t": dv.tolist(),
        "tier_shares": {lab: [None if np.isnan(x) else float(x) for x in tier_shares[:, i]]
                        for i, lab in enumerate(TIER_LABELS)},
        "heatmap_M": heat.tolist(), "peak_index": peak, "peak_day": counts.days[peak],
        "efficiency_gap": float(res.max_efficiency_gap),
    }
    if top_agents > 0:
        phi_i = phi.sum(axis=0)
        total = float(dv.sum())
        k = min(int(top_agents), data.n_users)
        cut = np.argpartition(-phi_i, k - 1)[:k] if k < data.n_users else np.arange(data.n_users)
        order = cut[np.lexsort((cut, -phi_i[cut]))]  # descending Φ_i, ties by user index
        out["top_agents"] = {
            "basis": "f_heat on the per-day panel (zero baseline); Φ_i = Σ_t φ_i,t", "features": list(daily.features),
            "rows": [{"user": int(i), "Phi": float(phi_i[i]), "share": float(phi_i[i] / total) if total else None,
                      "tier": TIER_LABELS[int(data.tier_code[i])], "followers": int(data.followers[i]),
                      "posts": int(data.posts[i]), "replies": int(data.replies[i]),
                      "features_at_peak": [float(x) for x in daily.values[peak, i]],
                      "phi_t": [float(x) for x in phi[:, i]]} for i in order]}
    out["seconds"] = time.perf_counter() - t0
    return out


def _seed_record(data: TopicData, S: np.ndarray, names: list[str], daily: Panel | None) -> dict[str, Any]:
    sub = data.panel.take_agents(S)
    code = data.tier_code[S]
    rec: dict[str, Any] = {"n": int(S.size), "n_top": int((code == 0).sum()), "ind": {}}
    for name in names:
        res = attribute(indicators.get(name), sub)
        dv = float(res.delta_v[0])
        if dv == 0.0:
            rec["ind"][name] = {"degenerate": "delta_v = 0 (no topic activity in S)"}
            continue
        share = res.phi[0] / dv
        fs = data.full[name]["share"][S]
        item: dict[str, Any] = {"delta_v": dv, "R": _tier_shares(share, code),
                                "anchors": {a: float(share[m[S]].sum()) for a, m in data.anchors.items()},
                                "efficiency_gap": float(res.max_efficiency_gap)}
        try:
            item["c_star"], item["eps"] = best_scalar(share, fs)
        except ZeroDeltaVError:
            item["eps"] = None
        if name == "var":
            m_full = float(data.g.mean())
            try:
                law = residual_law_var(data.g[S], m_full)
                item["eps_law"] = law
                item["law_dev"] = None if item["eps"] is None else abs(item["eps"] - law)
            except ZeroDeltaVError:
                item["eps_law"] = None
            item["mean_shift"] = float(data.g[S].mean() - m_full)
        if name == "heat":
            top_s = set(S[_top10(share)].tolist())
            top_f = set(data.full[name]["top10"].tolist())
            item["jaccard10"] = set_jaccard(top_s, top_f)
        rec["ind"][name] = item
    if daily is not None:
        res = attribute(indicators.get("heat"), daily.take_agents(S))
        dv = res.delta_v
        top = res.phi[:, code == 0].sum(axis=1)
        rec["daily_R_top"] = [None if d == 0 else float(x / d) for x, d in zip(top, dv)]
    return rec


def grid_cell(data: TopicData, protocol: str, size: int, seeds: list[int], names: list[str],
              daily: Panel | None = None) -> dict[str, Any]:
    """All seeds of one (topic, protocol, size) cell (see the module docstring)."""
    t0 = time.perf_counter()
    runs = []
    full = size >= data.n_users
    for seed in ([seeds[0]] if full else seeds):
        S = sample(data.pools, protocol, size, seed)
        runs.append({"seed": int(seed), **_seed_record(data, S, names, daily)})
    return {"topic": data.topic, "protocol": protocol, "size": int(size),
            "pool_size": data.pools.pool_size(protocol), "exhausted": size >= data.pools.pool_size(protocol),
            "seeds": runs, "seconds": time.perf_counter() - t0}


__all__ = ["ANCHORS", "N_BINS", "TopicData", "full_cell", "grid_cell", "prepare_topic"]
