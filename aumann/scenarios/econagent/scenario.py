"""EconAgent scenario: configuration, recorders, baseline action, registration in the scenario registry.

Features (recorded after each month, in this order): consumption, income, consumption_rate,
investment_rate, labor, saving_rate, wealth. World context (held fixed by the indicator, never
attributed): price, stock, wage_scale, inflation_prev, vol_prev, plus diagnostics (the
predecessor's risk_h, the model's imbalance φ, the interest rate, demand and supply).

>>> from aumann import scenarios
>>> sc = scenarios.get("econagent")
>>> cfg = sc.load_config(agents=10, steps=6)
>>> sc.simulate(cfg, rng=1).panel.shape
(6, 10, 7)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import ConfigDict, Field

from aumann.configs import ConfigModel
from aumann.scenarios import register
from aumann.scenarios.base import MAX_COUNTS, Scenario, ScenarioConfig
from aumann.scenarios.econagent.indicator import FEATURES, MacroPressure, agent_score, wealth_position


class IndicatorConfig(ConfigModel):
    """Macro-pressure indicator settings (see ``indicator.py``)."""

    model_config = ConfigDict(extra="forbid")

    tau: float = Field(0.05, gt=0)
    weights: tuple[float, float, float, float, float] = (1.0, 1.0, 1.0, 1.0, 1.0)
    kappa: float = Field(0.1, gt=0)
    target_saving: float = 0.1

    def build(self, *, smooth: bool = True) -> MacroPressure:
        return MacroPressure(tau=self.tau if smooth else 0.0, weights=self.weights, kappa=self.kappa,
                             target_saving=self.target_saving)


class EconAgentConfig(ScenarioConfig):
    """The EconAgent run: N households, T months, the economy's parameters and the indicator."""

    agents: int = Field(10, ge=2, le=1000)
    steps: int = Field(36, ge=2)
    runs: int = Field(1, ge=1)
    seed: int = Field(0, ge=0)
    max_wage_inflation: float = 0.05
    max_price_inflation: float = 0.10
    period: int = Field(12, ge=1, le=MAX_COUNTS["period"])
    initial_rate: float = Field(0.03, gt=-1)  # r ≤ −1 (−100 %) divides by 1 + r in the households' policy
    indicator: IndicatorConfig = Field(default_factory=IndicatorConfig)


def build_model(config: EconAgentConfig, rng: Any = None, backend: Any = None):
    """A fresh :class:`EconModel` (``rng``: seed or Generator; ``backend``: None = rule policy)."""
    from aumann.scenarios.econagent.model import EconModel

    return EconModel(config.agents, backend=backend, rng=rng if rng is not None else config.seed,
                     max_wage_inflation=config.max_wage_inflation, max_price_inflation=config.max_price_inflation,
                     period=config.period, initial_rate=config.initial_rate)


def make_recorder(config: Any = None):
    """A FeatureRecorder for the seven features (households ordered by ``unique_id``)."""
    from aumann.simulators import FeatureRecorder

    return FeatureRecorder({name: name for name in FEATURES}, agents=lambda m: m.households)


CONTEXT_KEYS = ("price", "stock", "wage_scale", "inflation_prev", "vol_prev", "risk_h", "imbalance", "rate",
                "demand", "supply")


def _reader(key: str):
    src = {"stock": "carried"}.get(key, key)

    def read(model: Any) -> float:
        return float(model.last[src])

    read.__name__ = f"context_{key}"
    return read


CONTEXT_FNS = {k: _reader(k) for k in CONTEXT_KEYS}
"""Per-step world state recorded into ``Panel.context``."""


def context(config: Any = None) -> dict[str, Any]:
    return dict(CONTEXT_FNS)


def baseline_action(model: Any, positions: Sequence[int]) -> None:
    """Force the households at panel positions ``positions`` to the baseline action next month."""
    hh = model.households
    model.force_baseline([hh[int(p)].unique_id for p in positions])


def baseline_features_now(model: Any, config: Any = None) -> np.ndarray:
    """(N, D) features under the baseline action in the coming month: zeros, wealth kept."""
    out = np.zeros((len(model.households), len(FEATURES)))
    out[:, FEATURES.index("wealth")] = [a.wealth for a in model.households]
    return out


def step_map(model: Any, config: Any = None):
    """The coming month as a torch map of participation intensities (:mod:`.stepmap`; exact at every corner)."""
    from aumann.scenarios.econagent.stepmap import econ_step_map
    from aumann.simulators import fork

    return econ_step_map(model, config, CONTEXT_FNS, lambda m: fork(m, steps=1, recorder=make_recorder(config)).model)


def aggregators(config: EconAgentConfig) -> dict[str, Any]:
    """f-sensitivity aggregators over a per-household score (stress + consumption propensity)."""
    from aumann.attribution.aggregators import standard_aggregators

    tau = config.indicator.tau
    return standard_aggregators(lambda z: agent_score(z, tau), wealth_position, config.agents)


def _offline_backend():
    from aumann.scenarios.econagent.policy import offline_backend

    return offline_backend()


def run_panel(config: EconAgentConfig | None = None, *, rng: Any = None, backend: Any = None,
              progress: bool = False):
    """Simulate ``config.steps`` months and return the (T, N, 7) Panel with the world context."""
    from aumann.simulators import simulate

    cfg = config or EconAgentConfig()
    model = build_model(cfg, rng, backend)
    return simulate(model, steps=cfg.steps, recorder=make_recorder(cfg), context=CONTEXT_FNS, progress=progress)


ECONAGENT = register(Scenario(
    name="econagent",
    description="EconAgent (Li et al. 2024): households, 2018 brackets, rationing, Taylor rule; "
                "wealth-amplified macro-pressure risk",
    config_model=EconAgentConfig,
    build_model=build_model,
    make_recorder=make_recorder,
    features=FEATURES,
    indicator=lambda cfg: cfg.indicator.build(),
    original=lambda cfg: cfg.indicator.build(smooth=False),
    baseline_action=baseline_action,
    baseline_features_fn=baseline_features_now,
    context=context,
    aggregators=aggregators,
    step_map=step_map,
    offline_backend=_offline_backend,
    config_file="econagent.toml",
    baseline_description="no work, no consumption, no investment at the target step; wealth preserved "
                         "(no tax, no redistribution credit, no interest)",
    tags=("llm", "economy"),
    abstention_description="the household takes the original EconAgent's fallback: work 1, consumption 0.5, "
                           "investment 0.5",
))

__all__ = [
    "CONTEXT_FNS",
    "CONTEXT_KEYS",
    "ECONAGENT",
    "EconAgentConfig",
    "IndicatorConfig",
    "aggregators",
    "baseline_action",
    "baseline_features_now",
    "build_model",
    "make_recorder",
    "run_panel",
    "step_map",
]
