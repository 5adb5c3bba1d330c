"""SocialLLM agents: a belief b ∈ [−1, 1] and three preferences derived from |b| (spec §2).

    s = clip(S0 (1 − α|b|), 0, 1)     sensitivity (how far a like/dislike moves b)
    p = clip(P0 + β|b|, 0, 1)         post preference
    q = clip(Q0 + γ|b|, 0, 1)         interaction preference

Extremists post more, interact more and are harder to move. The per-step counters ``posted``,
``views``, ``likes`` and ``dislikes`` (given by the agent at the current step) are the recorded
features together with ``belief``.
"""

from __future__ import annotations

from typing import Any

import mesa
import numpy as np


def rule_policy(context: dict[str, Any], schema: Any, rng: np.random.Generator) -> dict[str, Any]:
    """The predecessor's rule policy (its LLM fallback), drawing from a seeded generator.

    * post with probability p;
    * interact with probability q; if interacting, like when |b − b_post| < like_radius, else dislike.
    """
    if context["kind"] == "post":
        return {"post": bool(rng.random() < context["post_preference"])}
    if rng.random() < context["interaction_preference"]:
        close = abs(context["belief"] - context["post_belief"]) < context.get("like_radius", 0.3)
        return {"interact": True, "action": "like" if close else "dislike"}
    return {"interact": False, "action": None}


class SocialAgent(mesa.Agent):
    """One user: belief, derived preferences and this step's counters."""

    def __init__(self, model: mesa.Model, belief: float) -> None:
        super().__init__(model)
        self.belief0 = float(belief)
        self.belief = float(belief)
        self.post_boost: float | None = None  # transient all-silent boost of p (cleared on belief change)
        self.posted = 0
        self.views = 0
        self.likes = 0
        self.dislikes = 0

    @property
    def sensitivity(self) -> float:
        cfg = self.model.config
        return float(np.clip(cfg.sensitivity0 * (1.0 - cfg.alpha * abs(self.belief)), 0.0, 1.0))

    @property
    def post_preference(self) -> float:
        if self.post_boost is not None:
            return self.post_boost
        cfg = self.model.config
        return float(np.clip(cfg.post0 + cfg.beta * abs(self.belief), 0.0, 1.0))

    @property
    def interaction_preference(self) -> float:
        cfg = self.model.config
        return float(np.clip(cfg.interact0 + cfg.gamma * abs(self.belief), 0.0, 1.0))

    def set_belief(self, b: float) -> None:
        self.belief = float(np.clip(b, -1.0, 1.0))
        self.post_boost = None

    def reset_counters(self) -> None:
        self.posted = self.views = self.likes = self.dislikes = 0

    def react(self, post_belief: float, action: str) -> None:
        """Move toward a liked post, away from a disliked one: Δ = s · μ · |b_post − b|."""
        d = post_belief - self.belief
        step = self.sensitivity * self.model.config.mu * abs(d)
        direction = np.sign(d) if action == "like" else -np.sign(d)
        self.set_belief(self.belief + direction * step)


__all__ = ["SocialAgent", "rule_policy"]
