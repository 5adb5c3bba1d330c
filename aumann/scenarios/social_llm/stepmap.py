"""SocialLLM's step as a torch map of participation intensities, same-step decisions held at recorded values.

Within a SocialLLM step, decisions read same-step actions: which posts an agent's feed samples
depends on who posted, and a reaction reads the agent's belief after its earlier reactions and the
post's counters. The step map therefore *holds* the step's decisions at their recorded values
(``model.last_trace`` of a factual replay of the step): who posted, which posts each agent viewed
in which order, and whether it liked, disliked or ignored each. With intensities λ ∈ [0, 1]^N:

* agent i's belief entering the step is λ_i b_i (the baseline action resets it to 0), its post
  carries that belief and counts λ_i (``posted``);
* the view of j's post by i has weight ω_ij = λ_i λ_j (both take part): ``views``, ``likes`` and
  ``dislikes`` are sums of ω, and the reaction moves i's belief by ω_ij · (± s(b_i) μ (b_j − b_i)),
  clipped to [−1, 1], in the recorded order;
* author feedback rescales b_j by 1 + κ (L_j − D_j)/V_j with the ω-weighted counts (none when
  V_j = 0).

G equals the simulator at λ = 1 (the factual step: same decisions, same float operations) and at
λ = 0 (everyone at the baseline action: all features 0), which the tests check against forks. At
other corners it differs from a fork, where the removed agents' absence changes the others' feeds
(resampled from the per-agent streams) and reactions; the study reports that G-vs-fork gap on the
coalitions its deletion curves re-simulate. (Differentiating the offline policy's decision
probabilities instead would not reproduce the factual step at λ = 1, where the recorded draws
decide; it is not done.)

Kinks: every reaction's and every feedback's clip to [−1, 1] and the |b| of the sensitivity are
declared as switching functions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from aumann.checks import as_torch
from aumann.scenarios.base import StepMap

HOLDS = ("same-step decisions at their recorded values: who posted, which posts each agent viewed in which "
         "order, and like / dislike / ignore")


def social_step_map(model: Any, config: Any, factual: Callable[[Any], Any]) -> StepMap:
    """The step ``model`` (a :class:`SocialModel` before some step) is about to take, as a StepMap;
    ``factual(model)`` returns a branch of ``model`` after the factual step (``model`` is not touched)."""
    trace = factual(model).last_trace
    n = len(model.people)
    b0 = as_torch(np.array([a.belief for a in model.people], dtype=np.float64))
    posts = list(trace["posts"])
    views = list(trace["views"])
    s0, alpha, mu, kappa = config.sensitivity0, config.alpha, config.mu, config.kappa

    def forward(lam: torch.Tensor, want_switches: bool = False) -> Any:
        B = lam.shape[0]
        cols = [lam[:, i] for i in range(n)]
        zero = torch.zeros(B, dtype=lam.dtype)
        belief = [cols[i] * b0[i] for i in range(n)]
        posted = [zero] * n
        for j in posts:
            posted[j] = cols[j]
        post_belief = {j: belief[j] for j in posts}
        n_views, n_likes, n_dislikes = [zero] * n, [zero] * n, [zero] * n
        got = {j: [zero, zero, zero] for j in posts}  # views, likes, dislikes of j's post
        switches = []
        for i, j, action in views:
            omega = cols[i] * cols[j]
            n_views[i] = n_views[i] + omega
            got[j][0] = got[j][0] + omega
            if action is None:
                continue
            b = belief[i]
            sens = torch.clamp(s0 * (1.0 - alpha * b.abs()), 0.0, 1.0)
            sign = 1.0 if action == "like" else -1.0
            moved = b + omega * sign * (sens * mu * (post_belief[j] - b))
            belief[i] = torch.clamp(moved, -1.0, 1.0)
            if action == "like":
                n_likes[i] = n_likes[i] + omega
                got[j][1] = got[j][1] + omega
            else:
                n_dislikes[i] = n_dislikes[i] + omega
                got[j][2] = got[j][2] + omega
            if want_switches:
                switches += [b, moved - 1.0, moved + 1.0]
        for j in posts:
            v, lk, dk = got[j]
            ok = v > 0
            share = torch.where(ok, kappa * (lk - dk) / torch.where(ok, v, torch.ones_like(v)), zero)
            scaled = belief[j] * (1.0 + share)
            belief[j] = torch.where(ok, torch.clamp(scaled, -1.0, 1.0), belief[j])
            if want_switches:
                switches += [scaled - 1.0, scaled + 1.0]
        if want_switches:
            return torch.stack(switches, dim=-1) if switches else torch.zeros((B, 0), dtype=lam.dtype)
        feats = [torch.stack(x, dim=-1) for x in (belief, posted, n_views, n_likes, n_dislikes)]
        return torch.stack(feats, dim=-1)

    return StepMap(fn=forward, n_agents=n, context={}, switches=lambda lam: forward(lam, True), exact=False,
                   holds=HOLDS)


__all__ = ["HOLDS", "social_step_map"]
