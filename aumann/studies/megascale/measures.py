"""Small measures of the MegaScale-Social analysis: the policy label, Kendall τ on the agents that can
be credited, and the one-pass masking-deletion curve of the cascade pressure (its one entry point:
:func:`cascade_masking_curve`). Tiers and their shares R_G are :mod:`aumann.tiers` and
:func:`aumann.attribution.result.group_shares`; :data:`TIER_COLUMNS` names the tiers in this analysis'
tables."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from aumann.attribution.metrics import kendall_tau

TIER_COLUMNS = {"top": "top_1pct", "mid": "next_9pct", "tail": "tail_90pct"}
"""The column of each tier (:data:`aumann.tiers.TIER_LABELS`) in ``tier_shares.csv``."""


def policy_label(backend_label: str, model: Any) -> str:
    """"offline policy", or which LLM made the decisions (recorded or replayed alike: how the response
    cache was used is in ``manifest.json`` → ``llm_cache``)."""
    if backend_label == "offline":
        return "offline policy"
    return f"LLM {backend_label.split('@')[0]}"  # the same for a recorded run and its replay (cache: manifest)


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


__all__ = ["TIER_COLUMNS", "cascade_masking_curve", "nonzero_tau", "policy_label"]
