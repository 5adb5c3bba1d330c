"""Attribution: panels in, attributions out.

>>> from aumann.attribution import Panel, attribute, indicators, AumannShapley

``Panel`` is numpy-only; everything else (which needs torch) is imported on first use, so that
building or loading panels (e.g. in worker processes) does not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from aumann.panel import Panel

_LAZY = {
    "indicators": ("aumann.attribution.indicators", None),
    "attribute": ("aumann.attribution.engine", "attribute"),
    "Indicator": ("aumann.attribution.indicators", "Indicator"),
    "PooledForm": ("aumann.attribution.indicators", "PooledForm"),
    "AumannShapley": ("aumann.attribution.path", "AumannShapley"),
    "DiagonalIntegral": ("aumann.attribution.participation", "DiagonalIntegral"),
    "diagonal_path_integral": ("aumann.attribution.participation", "diagonal_path_integral"),
    "quadrature": ("aumann.attribution.path", "quadrature"),
    "BASELINES": ("aumann.attribution.problem", "BASELINES"),
    "AttributionMethod": ("aumann.attribution.problem", "AttributionMethod"),
    "Problem": ("aumann.attribution.problem", "Problem"),
    "resolve_baseline": ("aumann.attribution.problem", "resolve_baseline"),
    "Attribution": ("aumann.attribution.result", "Attribution"),
    "metrics": ("aumann.attribution.metrics", None),
    "smoothing": ("aumann.attribution.smoothing", None),
    "aggregators": ("aumann.attribution.aggregators", None),
    "Surrogate": ("aumann.attribution.smoothing", "Surrogate"),
    "evaluate": ("aumann.attribution.indicators", "evaluate"),
    "EvalContext": ("aumann.attribution.evalcontext", "EvalContext"),
    "CoalitionCache": ("aumann.attribution.games", "CoalitionCache"),
    "CoalitionGame": ("aumann.attribution.games", "CoalitionGame"),
    "FunctionGame": ("aumann.attribution.games", "FunctionGame"),
    "GameError": ("aumann.attribution.games", "GameError"),
    "MaskedIndicatorGame": ("aumann.attribution.games", "MaskedIndicatorGame"),
    "NetworkQuadratic": ("aumann.attribution.network", "NetworkQuadratic"),
    "AgentwiseIndicator": ("aumann.attribution.pooled", "AgentwiseIndicator"),
    "QuadraticIndicator": ("aumann.attribution.pooled", "QuadraticIndicator"),
    "SampledBanzhaf": ("aumann.attribution.sampled", "SampledBanzhaf"),
    "SampledShapley": ("aumann.attribution.sampled", "SampledShapley"),
    "CoalitionMethod": ("aumann.attribution.semivalues", "CoalitionMethod"),
    "ExactBanzhaf": ("aumann.attribution.semivalues", "ExactBanzhaf"),
    "ExactShapley": ("aumann.attribution.semivalues", "ExactShapley"),
    "LeaveOneOut": ("aumann.attribution.semivalues", "LeaveOneOut"),
}

if TYPE_CHECKING:  # pragma: no cover
    from aumann.attribution import aggregators, indicators, metrics, smoothing
    from aumann.attribution.engine import attribute
    from aumann.attribution.evalcontext import EvalContext
    from aumann.attribution.games import CoalitionCache, CoalitionGame, FunctionGame, GameError, MaskedIndicatorGame
    from aumann.attribution.indicators import Indicator, PooledForm, evaluate
    from aumann.attribution.network import NetworkQuadratic
    from aumann.attribution.participation import DiagonalIntegral, diagonal_path_integral
    from aumann.attribution.path import AumannShapley, quadrature
    from aumann.attribution.pooled import AgentwiseIndicator, QuadraticIndicator
    from aumann.attribution.problem import BASELINES, AttributionMethod, Problem, resolve_baseline
    from aumann.attribution.result import Attribution
    from aumann.attribution.sampled import SampledBanzhaf, SampledShapley
    from aumann.attribution.semivalues import CoalitionMethod, ExactBanzhaf, ExactShapley, LeaveOneOut
    from aumann.attribution.smoothing import Surrogate


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'aumann.attribution' has no attribute {name!r}") from None
    mod = importlib.import_module(module)
    value = mod if attr is None else getattr(mod, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "BASELINES",
    "AgentwiseIndicator",
    "Attribution",
    "AttributionMethod",
    "AumannShapley",
    "CoalitionCache",
    "CoalitionGame",
    "CoalitionMethod",
    "DiagonalIntegral",
    "EvalContext",
    "ExactBanzhaf",
    "ExactShapley",
    "FunctionGame",
    "GameError",
    "Indicator",
    "LeaveOneOut",
    "MaskedIndicatorGame",
    "NetworkQuadratic",
    "Panel",
    "PooledForm",
    "Problem",
    "QuadraticIndicator",
    "SampledBanzhaf",
    "SampledShapley",
    "Surrogate",
    "aggregators",
    "attribute",
    "diagonal_path_integral",
    "evaluate",
    "indicators",
    "metrics",
    "quadrature",
    "resolve_baseline",
    "smoothing",
]
