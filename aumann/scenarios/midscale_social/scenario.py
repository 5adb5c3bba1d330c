"""MidScale-Social scenario: config, the influence-weighted propagation risk, registration.

Features per agent and step (after the step): ``belief`` s ∈ [−1, 1], ``exposure`` e ≥ 0
(influence-weighted incoming volume), ``posting`` p ∈ [0, 1.5] (intensity), ``reshare`` r ∈ [0, 1),
``influence`` w > 0.

Influence-weighted propagation risk (our definition; the paper names it without a formula):

    π_i  = w_i (p_i + r_i) e(s_i)                           influence-weighted extreme expression
    f(z) = log(1 + c · mean_i π_i · (1 + mean_i e_i / e_ref))  +  (1/N) Σ_i (s_i − s̄)²

Original (non-smooth): e(s) = max(|s| − τ, 0). C² surrogate: e_β(s) = softplus(β(|s|_ε − τ))/β with
|s|_ε = sqrt(s² + ε²). Defaults c = 10, e_ref = 10, τ = 0.3, β = 20, ε = 0.01. The surrogate is
pooled: ψ(z_i) = (π_i, e_i, s_i, s_i²), ρ(m) = log(1 + c m₀ (1 + m₁/e_ref)) + m₃ − m₂², so masking
games cost O(N) per permutation (running sums).

Baseline action: neutral and disengaged at the target step; per-agent attribution baseline
z⁰_i = (0, 0, 0, 0, w_i) with w_i the influence weight before the step (kept, like wealth).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
from pydantic import Field

from aumann.attribution import Indicator, PooledForm
from aumann.attribution.aggregators import standard_aggregators
from aumann.attribution.smoothing import smooth_abs, softplus
from aumann.scenarios import register
from aumann.scenarios.base import MAX_COUNTS, Scenario, ScenarioConfig

FEATURES = ("belief", "exposure", "posting", "reshare", "influence")


class MidScaleConfig(ScenarioConfig):
    """MidScale-Social parameters."""

    agents: int = Field(1000, ge=4)
    steps: int = Field(30, ge=2)
    runs: int = Field(10, ge=1)
    seed: int = Field(0, ge=0)
    fixture: str | None = None  # relative in a config file: from that file's folder
    path_keys: ClassVar[dict[str, frozenset[str]]] = {"fixture": frozenset()}
    ba_m: int = Field(3, ge=1, le=MAX_COUNTS["ba_m"])
    post_slope: float = 2.0
    attention_amplitude: float = Field(0.2, ge=0, lt=1)
    exposure_scale: float = Field(1.0, gt=0)
    like_radius: float = 0.3
    agree_width: float = Field(0.05, gt=0)
    alpha: float = 0.5
    mu: float = 0.3
    feedback: float = 1.0
    influence_gain: float = 2.0
    risk_scale: float = Field(10.0, gt=0)
    risk_exposure_ref: float = Field(10.0, gt=0)
    risk_tau: float = Field(0.3, ge=0)
    risk_sharpness: float = Field(20.0, gt=0)
    risk_eps: float = Field(0.01, gt=0)


class PropagationRisk(Indicator):
    """f = log(1 + c mean π (1 + mean e / e_ref)) + Var(s); ``smooth=False`` is the original."""

    def __init__(self, *, scale: float = 10.0, exposure_ref: float = 1.0, tau: float = 0.3, sharpness: float = 20.0,
                 eps: float = 0.01, smooth: bool = True) -> None:
        self.scale, self.exposure_ref, self.tau, self.sharpness, self.eps = scale, exposure_ref, tau, sharpness, eps
        self.smooth = smooth
        self.name = "propagation_risk" if smooth else "propagation_risk_original"
        self.pooled = PooledForm(psi=self._psi, rho=self._rho) if smooth else None

    def extremity(self, s: torch.Tensor) -> torch.Tensor:
        if not self.smooth:
            return torch.relu(s.abs() - self.tau)
        return softplus(smooth_abs(s, self.eps) - self.tau, self.sharpness)

    def agent_score(self, z: torch.Tensor) -> torch.Tensor:
        """π_i = w_i (p_i + r_i) e(s_i), shape (…, N)."""
        return z[..., 4] * (z[..., 2] + z[..., 3]) * self.extremity(z[..., 0])

    def _psi(self, z: torch.Tensor) -> torch.Tensor:
        s = z[..., 0]
        return torch.stack([self.agent_score(z), z[..., 1], s, s * s], dim=-1)

    def _rho(self, m: torch.Tensor) -> torch.Tensor:
        return torch.log1p(self.scale * m[..., 0] * (1.0 + m[..., 1] / self.exposure_ref)) + m[..., 3] - m[..., 2] ** 2

    def forward(self, z, context=None):
        return self._rho(self._psi(z).mean(dim=-2))


def _indicator(cfg: MidScaleConfig, smooth: bool = True) -> PropagationRisk:
    return PropagationRisk(scale=cfg.risk_scale, exposure_ref=cfg.risk_exposure_ref, tau=cfg.risk_tau,
                           sharpness=cfg.risk_sharpness, eps=cfg.risk_eps, smooth=smooth)


def _aggregators(cfg: MidScaleConfig) -> dict[str, Indicator]:
    f = _indicator(cfg)

    def score(z: torch.Tensor) -> torch.Tensor:
        return f.agent_score(z) * (1.0 + z[..., 1] / cfg.risk_exposure_ref)

    return standard_aggregators(score, lambda z: z[..., 0], cfg.agents)


def _build(cfg: MidScaleConfig, rng: np.random.Generator, backend=None):
    from aumann.scenarios.midscale_social.fixture import load_fixture
    from aumann.scenarios.midscale_social.model import MidScaleModel

    if backend is None:
        fixture = load_fixture(cfg.fixture)
    else:
        from aumann.scenarios.midscale_social.prompts import FixtureSpec, fixture_messages
        from aumann.simulators.llm import decide_all
        from aumann.simulators.llm.backend import is_abstention

        spec = decide_all(backend, [{"messages": fixture_messages(), "schema": FixtureSpec,
                                     "context": {"kind": "fixture"}, "seed": cfg.seed}], return_exceptions=True)[0]
        if isinstance(spec, BaseException) and is_abstention(spec):  # degrade: the committed fixture, counted
            fixture = {**load_fixture(cfg.fixture),
                       "generator": f"committed fixture (the LLM's fixture reply was unusable: {str(spec)[:160]})"}
            errors = 1
        elif isinstance(spec, BaseException):
            raise spec
        else:
            spec = spec if isinstance(spec, FixtureSpec) else FixtureSpec.model_validate(spec)
            fixture = {"generator": f"LLM backend {type(backend).__name__}", **spec.model_dump()}
            errors = 0
    model = MidScaleModel(cfg, rng, fixture)
    model.usage = getattr(backend, "usage", None)
    model.llm_errors = errors if backend is not None else 0
    return model


def _fixture_policy(context, schema, rng):
    """Offline answer to the fixture request: the committed fixture (what the offline run uses)."""
    from aumann.scenarios.midscale_social.fixture import load_fixture

    data = load_fixture()
    return {k: data[k] for k in ("personas", "stances", "prototypes")}


def _offline_backend():
    from aumann.simulators.llm import OfflineBackend

    return OfflineBackend(_fixture_policy, name="midscale-fixture")


def _recorder(cfg: MidScaleConfig):
    from aumann.simulators import ArrayRecorder

    return ArrayRecorder(lambda m: m.features(), features=FEATURES)


def _baseline_action(model, positions) -> None:
    model.force_baseline(positions)


def _step_map(model, cfg: MidScaleConfig):
    from aumann.scenarios.midscale_social.stepmap import midscale_step_map

    return midscale_step_map(model, cfg)


def _baseline_features(model, cfg: MidScaleConfig) -> np.ndarray:
    out = np.zeros((cfg.agents, len(FEATURES)))
    out[:, 4] = model.influence
    return out


MIDSCALE_SOCIAL = register(Scenario(
    name="midscale-social",
    description="MidScale-Social: deterministic influence-weighted propagation on a scale-free graph",
    config_model=MidScaleConfig,
    build_model=_build,
    make_recorder=_recorder,
    features=FEATURES,
    indicator=_indicator,
    original=lambda cfg: _indicator(cfg, smooth=False),
    baseline_action=_baseline_action,
    baseline_features_fn=_baseline_features,
    context=lambda cfg: {"attention": lambda m: m.attention},
    aggregators=_aggregators,
    step_map=_step_map,
    offline_backend=_offline_backend,
    config_file="midscale-social.toml",
    baseline_description="neutral and disengaged at the target step: belief 0, no posting, no resharing, "
                         "exposure 0; influence weight kept",
    abstention_description="the run uses the committed fixture in place of the LLM's personas, stances and "
                           "prototypes, its one LLM decision per run; the propagation asks the LLM nothing",
))

__all__ = ["FEATURES", "MIDSCALE_SOCIAL", "MidScaleConfig", "PropagationRisk"]
