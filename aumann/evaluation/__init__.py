"""Evaluation that needs a scenario: deletion through the simulator, the re-simulation game, action
attribution through the simulator, the LLM-as-judge baseline, ablations.

>>> from aumann.evaluation import DeletionOracle, action_attribution, scenario_resimulation_game, run_ablations

The panel-level masking oracle and every metric (deletion curves, agreement) live in
:mod:`aumann.attribution.metrics`; what here needs a scenario's forks does.
"""

from aumann.evaluation.ablations import (
    baseline_ablation,
    f_sensitivity,
    path_ablation,
    run_ablations,
    vertex_path_attribution,
)
from aumann.evaluation.action import action_attribution, step_map_gap
from aumann.evaluation.deletion import (
    DeletionOracle,
    deletion_summary,
    random_summary,
    resimulation_game,
    scenario_resimulation_game,
)

__all__ = [
    "DeletionOracle",
    "action_attribution",
    "baseline_ablation",
    "deletion_summary",
    "f_sensitivity",
    "path_ablation",
    "random_summary",
    "resimulation_game",
    "run_ablations",
    "scenario_resimulation_game",
    "step_map_gap",
    "vertex_path_attribution",
]
