"""Attribution: panels in, attributions out.

>>> from aumann.attribution import Panel, attribute, indicators, AumannShapley
"""

from aumann.attribution import indicators
from aumann.attribution.engine import attribute
from aumann.attribution.indicators import Indicator, PooledForm
from aumann.attribution.panel import Panel
from aumann.attribution.path import AumannShapley, quadrature
from aumann.attribution.problem import BASELINES, AttributionMethod, Problem, resolve_baseline
from aumann.attribution.result import Attribution

__all__ = [
    "BASELINES",
    "Attribution",
    "AttributionMethod",
    "AumannShapley",
    "Indicator",
    "Panel",
    "PooledForm",
    "Problem",
    "attribute",
    "indicators",
    "quadrature",
    "resolve_baseline",
]
