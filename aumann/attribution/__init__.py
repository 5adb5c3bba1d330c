"""Attribution: panels in, attributions out.

>>> from aumann.attribution import Panel, attribute, indicators, AumannShapley
"""

from aumann.attribution import indicators, metrics
from aumann.attribution.engine import attribute
from aumann.attribution.games import CoalitionGame, FunctionGame, GameError, MaskedIndicatorGame
from aumann.attribution.indicators import Indicator, PooledForm
from aumann.attribution.panel import Panel
from aumann.attribution.path import AumannShapley, quadrature
from aumann.attribution.pooled import AgentwiseIndicator, QuadraticIndicator
from aumann.attribution.problem import BASELINES, AttributionMethod, Problem, resolve_baseline
from aumann.attribution.result import Attribution
from aumann.attribution.sampled import SampledBanzhaf, SampledShapley
from aumann.attribution.semivalues import CoalitionMethod, ExactBanzhaf, ExactShapley, LeaveOneOut

__all__ = [
    "BASELINES",
    "AgentwiseIndicator",
    "Attribution",
    "AttributionMethod",
    "AumannShapley",
    "CoalitionGame",
    "CoalitionMethod",
    "ExactBanzhaf",
    "ExactShapley",
    "FunctionGame",
    "GameError",
    "Indicator",
    "LeaveOneOut",
    "MaskedIndicatorGame",
    "Panel",
    "PooledForm",
    "Problem",
    "QuadraticIndicator",
    "SampledBanzhaf",
    "SampledShapley",
    "attribute",
    "indicators",
    "metrics",
    "quadrature",
    "resolve_baseline",
]
