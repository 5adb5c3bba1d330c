"""Small measures of the MegaScale-Social analysis: the policy label, Kendall τ on the agents that can
be credited, and the masking-deletion curve of the cascade pressure (:func:`cascade_masking_curve`, the
masking game's kernel curve). Tiers and their shares R_G are :mod:`aumann.tiers` and
:func:`aumann.attribution.result.group_shares`; :data:`TIER_COLUMNS` names the tiers in this analysis'
tables."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from aumann.attribution.metrics import kendall_tau

TIER_COLUMNS = {"top": "top_1pct", "mid": "next_9pct", "tail": "tail_90pct"}
"""The column of each tier (:data:`aumann.tiers.TIER_LABELS`) in ``tier_shares.csv``."""


def policy_label(backend_label: str, model: Any, *, offline: bool | None = None) -> str:
    """"offline policy", or which LLM made the decisions (recorded or replayed alike: how the response
    cache was used is in ``manifest.json`` → ``llm_cache``). ``offline``: whether the offline policy decides
    (:meth:`~aumann.studies.context.RunOptions.offline_policy_decides`: also under a registered backend whose factory
    returned ``None``); ``None``: the label says (``"offline"``)."""
    if backend_label == "offline" if offline is None else offline:
        return "offline policy"
    return f"LLM {backend_label.split('@')[0]}"  # the same for a recorded run and its replay (cache: manifest)


def nonzero_tau(a: np.ndarray, b: np.ndarray, support: np.ndarray) -> float:
    """Kendall τ restricted to the agents in ``support`` (NaN with fewer than two)."""
    return float(kendall_tau(a[support], b[support])) if support.size >= 2 else math.nan


def cascade_masking_curve(f: Any, x: np.ndarray, z0: np.ndarray, order: np.ndarray,
                          ks: list[int] | np.ndarray) -> np.ndarray:
    """f_casc after the first k agents of ``order`` are masked to the baseline, for each k in ``ks``: the masking
    game's own curve (:meth:`aumann.attribution.network.NetworkQuadraticKernel.curve`, one pass along the order,
    O(k_max + Σ deg)). Build the kernel once (``f.masking_kernel(x, z0)``) to draw several curves."""
    ks = np.asarray(ks, dtype=np.int64)
    if ks.size and ks.min() <= 0:
        raise ValueError(f"deletion sizes must be ≥ 1; got {int(ks.min())}")
    x = np.asarray(x, dtype=np.float64)
    return f.masking_kernel(x, np.broadcast_to(np.asarray(z0, dtype=np.float64), x.shape)).curve(order, ks)


__all__ = ["TIER_COLUMNS", "cascade_masking_curve", "nonzero_tau", "policy_label"]
