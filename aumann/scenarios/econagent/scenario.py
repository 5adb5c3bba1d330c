"""EconAgent scenario: configuration, feature and context recorders, a run, and registration.

>>> from aumann.scenarios.econagent.scenario import EconAgentConfig, run_panel
>>> panel = run_panel(EconAgentConfig(n_agents=10, steps=6, seed=1))      # doctest: +SKIP
>>> panel.shape
(6, 10, 7)
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aumann.errors import ConfigError
from aumann.scenarios.econagent.indicator import FEATURES, MacroPressure

CONFIG_PATH = Path(__file__).resolve().parents[3] / "configs" / "econagent.toml"


class IndicatorConfig(BaseModel):
    """Macro-pressure indicator settings (see ``indicator.py``)."""

    model_config = ConfigDict(extra="forbid")

    tau: float = Field(0.05, gt=0)
    weights: tuple[float, float, float, float, float] = (1.0, 1.0, 1.0, 1.0, 1.0)
    kappa: float = Field(0.1, gt=0)
    target_saving: float = 0.1

    def build(self) -> MacroPressure:
        return MacroPressure(tau=self.tau, weights=self.weights, kappa=self.kappa,
                             target_saving=self.target_saving)


class EconAgentConfig(BaseModel):
    """The EconAgent run: N households, T months, seed, economy parameters, indicator."""

    model_config = ConfigDict(extra="forbid")

    n_agents: int = Field(10, ge=2, le=1000)
    steps: int = Field(36, ge=1)
    seed: int = 0
    max_wage_inflation: float = 0.05
    max_price_inflation: float = 0.10
    period: int = Field(12, ge=1)
    initial_rate: float = 0.03
    memory: bool = True
    indicator: IndicatorConfig = IndicatorConfig()

    @classmethod
    def from_toml(cls, path: str | Path = CONFIG_PATH) -> EconAgentConfig:
        """Load ``configs/econagent.toml`` (or another file with the same keys)."""
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"EconAgent config {str(path)!r} not found") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"EconAgent config {str(path)!r} is not valid TOML: {exc}") from None
        try:
            return cls.model_validate(data.get("econagent", data))
        except ValidationError as exc:
            raise ConfigError(f"invalid EconAgent config {str(path)!r}: {exc}") from None


def build_model(config: EconAgentConfig | None = None, *, seed: int | None = None, backend: Any = None):
    """A fresh :class:`EconModel` for ``config`` (``seed`` overrides ``config.seed``)."""
    from aumann.scenarios.econagent.model import EconModel

    cfg = config or EconAgentConfig()
    return EconModel(cfg.n_agents, backend=backend, seed=cfg.seed if seed is None else seed,
                     max_wage_inflation=cfg.max_wage_inflation, max_price_inflation=cfg.max_price_inflation,
                     period=cfg.period, initial_rate=cfg.initial_rate, memory=cfg.memory)


FEATURE_ATTRS: dict[str, str] = {name: name for name in FEATURES}
"""Feature name → Household attribute (identical names)."""

CONTEXT_KEYS = ("price", "stock", "wage_scale", "inflation_prev", "vol_prev", "risk_h", "imbalance", "rate",
                "demand", "supply")


def _ctx(key: str):
    src = {"stock": "carried"}.get(key, key)

    def read(model: Any) -> float:
        return float(model.last[src])

    read.__name__ = f"context_{key}"
    return read


CONTEXT_FNS = {k: _ctx(k) for k in CONTEXT_KEYS}
"""Per-step world state recorded into ``Panel.context`` (held fixed by the indicator, never attributed)."""


def recorder():
    """A FeatureRecorder for the seven features, in the card's order."""
    from aumann.simulators import FeatureRecorder

    return FeatureRecorder(dict(FEATURE_ATTRS))


def run_panel(config: EconAgentConfig | None = None, *, seed: int | None = None, backend: Any = None,
              progress: bool = False):
    """Simulate ``config.steps`` months and return the (T, N, 7) Panel with the world context."""
    from aumann.simulators import simulate

    cfg = config or EconAgentConfig()
    model = build_model(cfg, seed=seed, backend=backend)
    return simulate(model, steps=cfg.steps, recorder=recorder(), context=CONTEXT_FNS, progress=progress)


def baseline_action(ids: Any):
    """An intervention ``g(model)`` forcing households ``ids`` to the baseline action next month."""

    def _force(model: Any) -> None:
        model.force_baseline(ids)

    return _force


__all__ = [
    "CONFIG_PATH",
    "CONTEXT_FNS",
    "CONTEXT_KEYS",
    "FEATURE_ATTRS",
    "EconAgentConfig",
    "IndicatorConfig",
    "baseline_action",
    "build_model",
    "recorder",
    "run_panel",
]
