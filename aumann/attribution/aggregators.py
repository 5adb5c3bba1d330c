"""Alternative macro indicators for the f-sensitivity ablation (paper, Appendix R, Table f-sensitivity).

Each scenario supplies a per-agent, non-negative risk score r_i(z_i) (a C² function of agent i's
features) and an opinion coordinate o_i(z_i). From them:

* f₁ weighted sum:        f₁ = (1/N) Σ_i r_i
* f₂ log-aggregate:       f₂ = log(1 + Σ_i r_i)
* f₃ pairwise interaction: f₃ = (1/N) Σ_i r_i + (1/N²) Σ_{i<j} r_i r_j (o_i − o_j)²
  computed in O(N) as [(Σ r)(Σ r o²) − (Σ r o)²] / N².

All three are C² when r and o are. f₁ and f₂ are pooled (f = ρ(mean_i ψ(z_i))); so is f₃ with
ψ = (r, r o, r o²).

All three are alive-aware: at a step with dead rows (``Panel.alive``) means and sums run over the
living rows at the living count n_t (f₂'s sum over the living is not a function of the living mean
alone, so its pooled form declares ``living=False`` and coalition methods evaluate it on masks there).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from aumann.attribution.indicators import Indicator, PooledForm, living

Score = Callable[[torch.Tensor], torch.Tensor]  # z[..., N, D] -> [..., N]


def _living(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return x if mask is None else torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))


class WeightedSum(Indicator):
    """f₁ = (1/N) Σ_i r_i."""

    def __init__(self, score: Score, name: str = "weighted_sum") -> None:
        self.score = score
        self.name = name
        self.pooled = PooledForm(psi=lambda z: score(z)[..., None], rho=lambda m: m[..., 0])

    def forward(self, z, context=None, alive=None):
        r = self.score(z)
        mask, n = living(r, alive)
        return r.mean(dim=-1) if mask is None else _living(r, mask).sum(dim=-1) / n


class LogAggregate(Indicator):
    """f₂ = log(1 + Σ_i r_i)."""

    def __init__(self, score: Score, n_agents: int, name: str = "log_aggregate") -> None:
        self.score = score
        self.name = name
        self.pooled = PooledForm(psi=lambda z: score(z)[..., None], rho=lambda m: torch.log1p(n_agents * m[..., 0]),
                                 living=False)

    def forward(self, z, context=None, alive=None):
        r = self.score(z)
        mask, _ = living(r, alive)
        return torch.log1p(_living(r, mask).sum(dim=-1))


class PairwiseInteraction(Indicator):
    """f₃ = mean r + (1/N²) Σ_{i<j} r_i r_j (o_i − o_j)²."""

    def __init__(self, score: Score, opinion: Score, name: str = "pairwise_interaction") -> None:
        self.score = score
        self.opinion = opinion
        self.name = name

        def psi(z):
            r, o = score(z), opinion(z)
            return torch.stack([r, r * o, r * o * o], dim=-1)

        self.pooled = PooledForm(psi=psi, rho=lambda m: m[..., 0] + m[..., 0] * m[..., 2] - m[..., 1] ** 2)

    def forward(self, z, context=None, alive=None):
        r, o = self.score(z), self.opinion(z)
        mask, n = living(r, alive)
        r = _living(r, mask)
        s0, s1, s2 = r.sum(-1), (r * o).sum(-1), (r * o * o).sum(-1)
        return (r.mean(-1) if mask is None else s0 / n) + (s0 * s2 - s1**2) / n**2


def standard_aggregators(score: Score, opinion: Score, n_agents: int) -> dict[str, Indicator]:
    """{"weighted_sum": f₁, "log_aggregate": f₂, "pairwise_interaction": f₃}."""
    return {"weighted_sum": WeightedSum(score), "log_aggregate": LogAggregate(score, n_agents),
            "pairwise_interaction": PairwiseInteraction(score, opinion)}


__all__ = ["LogAggregate", "PairwiseInteraction", "WeightedSum", "standard_aggregators"]
