"""SocialLLM scenario: config, the risky-expression risk (C² surrogate and original), registration.

Features per agent and step (recorded after the step): ``belief`` b ∈ [−1, 1], ``posted`` ∈ {0, 1},
``views`` (posts viewed), ``likes`` and ``dislikes`` (given).

Risky-expression risk (our definition; the predecessor used belief variance alone):

    x_i   = posted_i + η (likes_i + dislikes_i) / (1 + views_i)          expression intensity
    f(z)  = (1/N) Σ_i (b_i − b̄)²  +  λ (1/N) Σ_i x_i · e(b_i)            polarization + risky expression

with the extremity e. Original (non-smooth): e(b) = max(|b| − τ, 0). C² surrogate:
e_β(b) = softplus(β (|b|_ε − τ)) / β with |b|_ε = sqrt(b² + ε²) (``aumann.attribution.smoothing``; C^∞,
→ the original as β → ∞, ε → 0; 0 ≤ e_β − e ≤ log(2)/β + ε per agent). Defaults λ = 1, τ = 0.5, β = 20, ε = 0.01,
η = 0.5. The surrogate is pooled: ψ(z_i) = (b_i, b_i², x_i e_β(b_i)), ρ(m) = m₁ − m₀² + λ m₂.

Baseline action: neutral and silent at the target step (belief 0, no post, no views, no reactions),
so the per-agent attribution baseline is z⁰_i = 0 — here the zero baseline *is* the features under
the baseline action.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from aumann.attribution import Indicator, PooledForm
from aumann.attribution.aggregators import standard_aggregators
from aumann.attribution.smoothing import smooth_abs, softplus
from aumann.scenarios import register
from aumann.scenarios.base import MAX_COUNTS, Scenario, ScenarioConfig

FEATURES = ("belief", "posted", "views", "likes", "dislikes")


class SocialLLMConfig(ScenarioConfig):
    """SocialLLM parameters (defaults: the predecessor's config values, spec §1).

    ``interaction``: ``"sequential"`` (default; each reaction sees the counters and belief left by
    the previous ones) or ``"synchronous"`` (every reaction of a step sees the state at the start of
    the interaction phase; one batch of requests per step). See ``model.py``.
    """

    agents: int = Field(20, ge=2)
    steps: int = Field(30, ge=2)
    runs: int = Field(10, ge=1)
    seed: int = Field(57, ge=0)
    network: Literal["ba", "mixed"] = "ba"
    interaction: Literal["sequential", "synchronous"] = "sequential"
    ba_m: int = Field(4, ge=1, le=MAX_COUNTS["ba_m"])
    init_low: float = Field(-0.5, ge=-1, le=1)  # initial beliefs ~ U(init_low, init_high), inside b's range [-1, 1]
    init_high: float = Field(0.5, ge=-1, le=1)
    post0: float = 0.5
    interact0: float = 0.4
    sensitivity0: float = 0.5
    alpha: float = 0.5
    beta: float = 0.5
    gamma: float = 0.3
    mu: float = 0.1
    kappa: float = 0.5
    silent_boost: float = 1.2
    min_view_ratio: float = Field(0.3, gt=0, le=1)
    max_view_ratio: float = Field(1.0, gt=0, le=1)
    like_radius: float = 0.3
    risk_lambda: float = Field(1.0, ge=0)
    risk_tau: float = Field(0.5, ge=0)
    risk_sharpness: float = Field(20.0, gt=0)
    risk_eps: float = Field(0.01, gt=0)
    risk_eta: float = Field(0.5, ge=0)

    @model_validator(mode="after")
    def _ordered_ranges(self) -> SocialLLMConfig:
        """The two (low, high) pairs are ranges: crossed, the run stopped at its first step with numpy's
        ``high - low < 0`` / ``low >= high`` blamed on the scenario's code."""
        if self.init_low > self.init_high:
            raise ValueError(f"init_low ({self.init_low}) must be ≤ init_high ({self.init_high}): initial beliefs "
                             "are drawn from U(init_low, init_high)")
        if self.min_view_ratio > self.max_view_ratio:
            raise ValueError(f"min_view_ratio ({self.min_view_ratio}) must be ≤ max_view_ratio "
                             f"({self.max_view_ratio}): each feed shows between the two shares of the posts")
        return self


def _expression(z: torch.Tensor, eta: float) -> torch.Tensor:
    return z[..., 1] + eta * (z[..., 3] + z[..., 4]) / (1.0 + z[..., 2])


class RiskyExpression(Indicator):
    """f = Var(b) + λ mean_i x_i e(b_i) (see the module docstring); ``smooth=False`` is the original."""

    uses_context = False

    def __init__(self, *, lam: float = 1.0, tau: float = 0.5, sharpness: float = 20.0, eps: float = 0.01,
                 eta: float = 0.5, smooth: bool = True) -> None:
        self.lam, self.tau, self.sharpness, self.eps, self.eta, self.smooth = lam, tau, sharpness, eps, eta, smooth
        self.name = "risky_expression" if smooth else "risky_expression_original"
        self.pooled = PooledForm(psi=self._psi, rho=self._rho) if smooth else None

    def extremity(self, b: torch.Tensor) -> torch.Tensor:
        if not self.smooth:
            return torch.relu(b.abs() - self.tau)
        return softplus(smooth_abs(b, self.eps) - self.tau, self.sharpness)

    def agent_score(self, z: torch.Tensor) -> torch.Tensor:
        """Per-agent risky-expression term x_i e(b_i) (…, N)."""
        return _expression(z, self.eta) * self.extremity(z[..., 0])

    def _psi(self, z: torch.Tensor) -> torch.Tensor:
        b = z[..., 0]
        return torch.stack([b, b * b, self.agent_score(z)], dim=-1)

    def _rho(self, m: torch.Tensor) -> torch.Tensor:
        return m[..., 1] - m[..., 0] ** 2 + self.lam * m[..., 2]

    def forward(self, z, context=None):
        b = z[..., 0]
        var = (b * b).mean(-1) - b.mean(-1) ** 2
        return var + self.lam * self.agent_score(z).mean(-1)


def _indicator(cfg: SocialLLMConfig, smooth: bool = True) -> RiskyExpression:
    return RiskyExpression(lam=cfg.risk_lambda, tau=cfg.risk_tau, sharpness=cfg.risk_sharpness, eps=cfg.risk_eps,
                           eta=cfg.risk_eta, smooth=smooth)


def _aggregators(cfg: SocialLLMConfig) -> dict[str, Indicator]:
    f = _indicator(cfg)

    def score(z: torch.Tensor) -> torch.Tensor:
        return z[..., 0] ** 2 + f.agent_score(z)

    return standard_aggregators(score, lambda z: z[..., 0], cfg.agents)


def _build(cfg: SocialLLMConfig, rng: np.random.Generator, backend=None):
    from aumann.scenarios.social_llm.model import SocialModel

    return SocialModel(cfg, rng, backend)


def _recorder(cfg: SocialLLMConfig):
    from aumann.simulators import FeatureRecorder

    return FeatureRecorder({name: name for name in FEATURES}, agents=lambda m: m.people)


def _offline_backend():
    from aumann.scenarios.social_llm.agents import rule_policy
    from aumann.simulators.llm import OfflineBackend

    return OfflineBackend(rule_policy, name="social-llm-rule-policy")


def _baseline_action(model, positions) -> None:
    model.force_baseline(positions)


def _step_map(model, cfg: SocialLLMConfig):
    from aumann.scenarios.social_llm.stepmap import social_step_map
    from aumann.simulators import fork

    return social_step_map(model, cfg, lambda m: fork(m, steps=1, recorder=_recorder(cfg)).model)


def _baseline_features(model, cfg: SocialLLMConfig) -> np.ndarray:
    return np.zeros((cfg.agents, len(FEATURES)))


SOCIAL_LLM = register(Scenario(
    name="social-llm",
    description="SocialLLM: belief/post/like agents on a Barabási–Albert graph, risky-expression risk",
    config_model=SocialLLMConfig,
    build_model=_build,
    make_recorder=_recorder,
    features=FEATURES,
    indicator=_indicator,
    original=lambda cfg: _indicator(cfg, smooth=False),
    baseline_action=_baseline_action,
    baseline_features_fn=_baseline_features,
    aggregators=_aggregators,
    step_map=_step_map,
    offline_backend=_offline_backend,
    config_file="social-llm.toml",
    baseline_description="neutral and silent at the target step: belief 0, no post, no views, no reactions",
    abstention_description="the agent does nothing that step: no post, no reaction",
))

__all__ = ["FEATURES", "SOCIAL_LLM", "RiskyExpression", "SocialLLMConfig"]
