"""MidScale-Social's step as a torch map of participation intensities (exact at every corner).

Every decision in a MidScale-Social step is computed from the state *before* the step (posting,
content, exposure, resharing, belief and influence updates; there is no randomness after
initialisation), so the step is a deterministic function of the agents' participation, and G below
equals :meth:`MidScaleModel.step` at every corner of the cube (λ_i ∈ {0, 1}: λ_i = 0 is the
baseline action, neutral and disengaged). In between, λ_i enters exactly where the model's
``live`` switch for agent i does (the model's step, with ``live`` replaced by λ):

* its state entering the step: s_i = λ_i b_i (the baseline action resets the belief to 0);
* its activity volumes: posting p_i, reshare r_i and the volume it reads, E_i = λ_i Σ_j A_ij w_j p_j
  and e_i = λ_i (Σ_j A_ij w_j p_j + Σ_j A_ij w_j r_j). The *composition* of what it reads (the
  mean incoming content m_i, m̃_i) does not depend on how much it reads;
* its influence after the step: λ_i w_new,i + (1 − λ_i) w_i (the baseline action keeps w_i).

The belief after the step needs no extra factor: a disengaged agent's update is exactly 0 in the
model (s_i = 0, e_i = 0). G is built from the same float64 operations as the model, so it reproduces
the simulator's step to rounding (≈1e-15).

Kinks: the clips of the content c_i and of the updated belief (before and after author feedback)
are declared as switching functions; the quadrature splits the path where they switch. The |·| in
the soft "agree" switch a(x) = σ((r − |x|)/θ) also has a kink at x = 0, which is small (a slope jump of
2 σ'(r/θ)/θ ≈ 0.1 at the defaults) and crossed by hundreds of agent/edge arguments along the path;
it is left to adaptive refinement.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from aumann.checks import as_torch
from aumann.scenarios.base import StepMap


def midscale_step_map(model: Any, config: Any) -> StepMap:
    """The step ``model`` (a :class:`MidScaleModel` before some step) is about to take, as a StepMap."""
    tab = model.table
    n = model.n
    # Internally agents are the leading axis ((N, B) tensors): the graph sums are one sparse product
    # A @ X and the per-edge terms index rows, which is several times faster than indexing the last axis.
    src, dst = as_torch(model.src), as_torch(model.dst)
    adj = torch.sparse_coo_tensor(torch.stack([dst, src]), torch.ones(src.numel(), dtype=torch.float64),
                                  (n, n), check_invariants=True).coalesce()  # A_ij = number of edges j → i
    n_edges = src.numel()
    senders = torch.sparse_coo_tensor(torch.stack([src, torch.arange(n_edges)]),
                                      torch.ones(n_edges, dtype=torch.float64), (n, n_edges),
                                      check_invariants=True).coalesce()  # S_ie = [src_e = i]

    def col(a: Any) -> torch.Tensor:
        return as_torch(np.asarray(a, dtype=np.float64))[:, None]

    deg = col(model.degree)
    deg_safe = torch.where(deg > 0, deg, torch.ones_like(deg))
    belief, w, infl0 = col(model.belief), col(model.influence), col(tab.influence0)
    post_logit, intensity = col(tab.post_logit), col(tab.intensity)
    rr, susc = col(tab.reshare_rate), col(tab.susceptibility)
    attention = 1.0 + config.attention_amplitude * np.sin(2.0 * np.pi * model.t / 7.0)

    def gather(v: torch.Tensor) -> torch.Tensor:  # Σ_j A_ij v_j for every i
        return torch.sparse.mm(adj, v)

    def per_sender(v: torch.Tensor) -> torch.Tensor:  # Σ over edges e with src_e = i of v_e
        return torch.sparse.mm(senders, v)

    def agree(d: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid((config.like_radius - d.abs()) / config.agree_width)

    def ratio(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # a / b where b > 1e-12, else 0 (as the model)
        ok = b > 1e-12
        return torch.where(ok, a / torch.where(ok, b, torch.ones_like(b)), torch.zeros_like(a))

    def forward(lam_bn: torch.Tensor, want_switches: bool = False) -> Any:
        lam = lam_bn.T  # (N, B)
        s = lam * belief
        p = torch.sigmoid(post_logit + config.post_slope * s.abs()) * attention * lam
        c_arg = (1.0 + 0.5 * intensity) * s
        c = torch.clamp(c_arg, -1.0, 1.0)
        wp = w * p
        g_wp = gather(wp)
        E = g_wp * lam
        g_wpc = gather(wp * c)
        m = ratio(g_wpc, g_wp)
        r = rr * agree(m - s) * (1.0 - torch.exp(-E / config.exposure_scale)) * lam
        wr = w * r
        g_all = g_wp + gather(wr)
        e = g_all * lam
        m_tot = ratio(g_wpc + gather(wr * m), g_all)
        d = m_tot - s
        sens = susc * (1.0 - config.alpha * s.abs())
        s1 = s + sens * config.mu * d * (2.0 * agree(d) - 1.0) * (1.0 - torch.exp(-e / config.exposure_scale))
        s_new = torch.clamp(s1, -1.0, 1.0)
        c_src = c[src]
        L = per_sender(2.0 * agree(c_src - s_new[dst]) - 1.0) / deg_safe
        s2 = s_new * (1.0 + config.feedback * p * L)
        s_new = torch.clamp(s2, -1.0, 1.0)
        reshared = per_sender(r[dst] * agree(c_src - s_new[dst]))
        w_new = infl0 * (1.0 + config.influence_gain * reshared / deg_safe)
        if want_switches:
            return torch.cat([c_arg - 1.0, c_arg + 1.0, s1 - 1.0, s1 + 1.0, s2 - 1.0, s2 + 1.0], dim=0).T
        return torch.stack([s_new, e, p, r, lam * w_new + (1.0 - lam) * w], dim=-1).transpose(0, 1)

    return StepMap(fn=forward, n_agents=n, context={"attention": attention},
                   switches=lambda lam: forward(lam, True), exact=True, holds="")


__all__ = ["midscale_step_map"]
