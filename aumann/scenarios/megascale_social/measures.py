"""Small measures shared by the MegaScale-Social analysis: influence tiers, tier shares, the policy
label, and the one-pass masking-deletion curve of the cascade pressure."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from aumann.attribution.metrics import kendall_tau

TIERS = (("top_1pct", 0.01), ("next_9pct", 0.10), ("tail_90pct", 1.0))


def policy_label(backend_label: str, model: Any) -> str:
    """"offline policy", or which LLM made the decisions (recorded or replayed alike: how the response
    cache was used is in ``manifest.json`` → ``llm_cache``)."""
    if backend_label == "offline":
        return "offline policy"
    return f"LLM {backend_label.split('@')[0]}"  # the same for a recorded run and its replay (cache: manifest)


def influence_tiers(influence: np.ndarray) -> np.ndarray:
    """Tier index per agent: 0 = top 1 % by influence, 1 = next 9 %, 2 = the tail (ties by position)."""
    n = influence.shape[0]
    order = np.argsort(-influence, kind="stable")
    tier = np.full(n, 2, dtype=np.int8)
    tier[order[: max(1, round(0.01 * n))]] = 0
    tier[order[max(1, round(0.01 * n)): max(2, round(0.10 * n))]] = 1
    return tier


def tier_labels(influence: np.ndarray) -> np.ndarray:
    """Tier name per agent (``TIERS``' names: top_1pct, next_9pct, tail_90pct), for ``Panel.groups``."""
    return np.array([name for name, _ in TIERS])[influence_tiers(influence)]


def tier_shares(phi: np.ndarray, tier: np.ndarray) -> dict[str, float]:
    """R_G = Σ_{i∈G} φ_i / Σ_i φ_i per tier (NaN when Σ φ = 0)."""
    total = float(phi.sum())
    out = {}
    for g, (name, _) in enumerate(TIERS):
        out[name] = float(phi[tier == g].sum()) / total if total != 0 else math.nan
    return out


def nonzero_tau(a: np.ndarray, b: np.ndarray, support: np.ndarray) -> float:
    """Kendall τ restricted to the agents in ``support`` (NaN with fewer than two)."""
    return float(kendall_tau(a[support], b[support])) if support.size >= 2 else math.nan


def cascade_masking_curve(f: Any, x: np.ndarray, z0: np.ndarray, order: np.ndarray,
                          ks: list[int] | np.ndarray) -> np.ndarray:
    """f_casc after the first k agents of ``order`` are masked to the baseline, for each k in ``ks``.

    One pass along the order: deleting agent i changes Q by −2 δr_i (A u)_i + A_ii(…) with u the current
    vector ((A u)_i read off row i of the CSR matrix), so the whole curve costs O(k_max + Σ deg)."""
    A = f.A
    r = f.r_numpy(x)
    r0 = f.r_numpy(np.array(np.broadcast_to(z0, x.shape)))
    u = r.copy()
    q = float(r @ (A @ r))
    ks = np.asarray(ks, dtype=np.int64)
    uniq = np.unique(ks)
    at = np.full(uniq.size, math.nan)
    indptr, indices, data = A.indptr, A.indices, A.data
    kmax = int(uniq[-1]) if uniq.size else 0
    nxt = 0
    if uniq.size and uniq[0] <= 0:
        raise ValueError(f"deletion sizes must be ≥ 1; got {int(uniq[0])}")
    for k, i in enumerate(order[:kmax], start=1):
        d = u[i] - r0[i]
        if d != 0.0:
            lo, hi = indptr[i], indptr[i + 1]
            au = float(data[lo:hi] @ u[indices[lo:hi]])
            q -= 2.0 * d * au  # zero diagonal: u_i's own term does not enter
            u[i] = r0[i]
        if k == uniq[nxt]:
            at[nxt] = math.log1p(f.scale * q)
            nxt += 1
    return at[np.searchsorted(uniq, ks)]



__all__ = ["TIERS", "cascade_masking_curve", "influence_tiers", "nonzero_tau", "policy_label", "tier_labels",
           "tier_shares"]
