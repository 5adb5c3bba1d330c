"""Evaluation that needs a scenario: deletion through the simulator, the re-simulation game, action
attribution through the simulator, the LLM-as-judge baseline, ablations.

>>> from aumann.evaluation import DeletionOracle, action_attribution, scenario_resimulation_game, run_ablations

:class:`MaskingOracle` is the study's masking oracle (deletion curves of the attributed and the original
indicator along an ordering, running sums for pooled indicators). The panel-level ``masking_oracle``
and every metric (deletion curves, agreement) live in
:mod:`aumann.attribution.metrics`; what here needs a scenario's forks does.
"""

from aumann.evaluation.ablations import (
    baseline_ablation,
    f_sensitivity,
    path_ablation,
    run_ablations,
    vertex_path_attribution,
)
from aumann.evaluation.action import ActionAumannShapley, ActionProblem, action_attribution, step_map_gap
from aumann.evaluation.deletion import (
    DeletionOracle,
    MaskingOracle,
    deletion_summary,
    grid_summary,
    random_grid_summary,
    random_summary,
    resimulation_game,
    scenario_resimulation_game,
)

__all__ = [
    "ActionAumannShapley",
    "ActionProblem",
    "DeletionOracle",
    "MaskingOracle",
    "action_attribution",
    "baseline_ablation",
    "deletion_summary",
    "f_sensitivity",
    "grid_summary",
    "path_ablation",
    "random_grid_summary",
    "random_summary",
    "resimulation_game",
    "run_ablations",
    "scenario_resimulation_game",
    "step_map_gap",
    "vertex_path_attribution",
]
