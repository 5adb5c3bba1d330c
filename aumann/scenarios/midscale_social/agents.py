"""MidScale-Social agents, vectorised: one row per agent in numpy arrays (no per-agent objects).

Static per-agent attributes (drawn once from the fixture and the seed):

* persona index → ``post_logit``, ``reshare_rate``, ``susceptibility``, ``credibility``;
* stance index → initial belief s⁰_i = clip(center + spread · ξ_i, −1, 1), ξ_i ~ N(0, 1);
* prototype index → message ``intensity`` κ_i (a post carries c_i = clip((1 + ½ κ_i) s_i, −1, 1));
* base influence w⁰_i = credibility_i · log(1 + deg_i) / mean_j log(1 + deg_j).

Dynamic state: belief ``s``, influence ``w``, and the last step's ``exposure``, ``posting``, ``reshare``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class AgentTable:
    """Static per-agent attributes (arrays of shape (N,))."""

    post_logit: np.ndarray
    reshare_rate: np.ndarray
    susceptibility: np.ndarray
    credibility: np.ndarray
    intensity: np.ndarray
    belief0: np.ndarray
    influence0: np.ndarray
    persona: np.ndarray
    stance: np.ndarray

    @classmethod
    def draw(cls, fixture: dict[str, Any], degree: np.ndarray, rng: np.random.Generator) -> AgentTable:
        n = degree.shape[0]
        personas, stances, protos = fixture["personas"], fixture["stances"], fixture["prototypes"]
        pi = rng.integers(len(personas), size=n)
        si = rng.integers(len(stances), size=n)
        ki = rng.integers(len(protos), size=n)

        def col(items: list[dict[str, Any]], key: str, idx: np.ndarray) -> np.ndarray:
            return np.array([float(it[key]) for it in items])[idx]

        center, spread = col(stances, "center", si), col(stances, "spread", si)
        belief0 = np.clip(center + spread * rng.standard_normal(n), -1.0, 1.0)
        cred = col(personas, "credibility", pi)
        logdeg = np.log1p(degree.astype(np.float64))
        influence0 = cred * logdeg / logdeg.mean()
        return cls(post_logit=col(personas, "post_logit", pi), reshare_rate=col(personas, "reshare_rate", pi),
                   susceptibility=col(personas, "susceptibility", pi), credibility=cred,
                   intensity=col(protos, "intensity", ki), belief0=belief0, influence0=influence0, persona=pi,
                   stance=si)


__all__ = ["AgentTable"]
