"""The influence tiers: top 1 %, next 9 %, tail 90 % of agents by a score — one split, one label set.

Used wherever agents are grouped into tiers (the Bluesky panels, the synthetic panel, MegaScale-Social's
influence tiers) and their group shares R_G are reported
(:func:`aumann.attribution.result.group_shares`).

>>> import numpy as np
>>> tiers_by_rank(np.arange(200.0))[:3], tiers_by_rank(np.arange(200.0))[-3:]
(array(['tail', 'tail', 'tail'], dtype='<U4'), array(['mid', 'top', 'top'], dtype='<U4'))
"""

from __future__ import annotations

import numpy as np

TIER_LABELS = ("top", "mid", "tail")
"""The tier labels, largest score first: top 1 %, next 9 %, tail 90 %."""
TIER_FRACTIONS = (0.01, 0.09)
"""The fractions of agents in the top and mid tiers (the tail is the rest)."""


def tiers_by_rank(score: np.ndarray, fractions: tuple[float, float] = TIER_FRACTIONS) -> np.ndarray:
    """Labels "top"/"mid"/"tail": the top ``fractions[0]`` of agents by ``score``, the next ``fractions[1]``,
    the rest.

    Sizes are ``round(N · f)`` (top) and ``round(N · (f₀ + f₁)) − top`` (mid); ties are broken by position
    (stable sort), deterministically.
    """
    score = np.asarray(score)
    u = score.shape[0]
    order = np.argsort(-score, kind="stable")
    n_top = round(u * fractions[0])
    n_mid = round(u * (fractions[0] + fractions[1])) - n_top
    labels = np.full(u, TIER_LABELS[2], dtype="<U4")
    labels[order[:n_top]] = TIER_LABELS[0]
    labels[order[n_top:n_top + n_mid]] = TIER_LABELS[1]
    return labels


def tier_codes(labels: np.ndarray) -> np.ndarray:
    """The tier labels as codes 0 (top), 1 (mid), 2 (tail; anything else)."""
    labels = np.asarray(labels)
    code = np.full(labels.shape[0], 2, dtype=np.int8)
    code[labels == TIER_LABELS[0]] = 0
    code[labels == TIER_LABELS[1]] = 1
    return code


__all__ = ["TIER_FRACTIONS", "TIER_LABELS", "tier_codes", "tiers_by_rank"]
