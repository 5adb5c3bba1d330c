"""Deletion faithfulness through the simulator: force the top-k agents to the baseline action, re-simulate t*.

For a ranking π of the agents (by φ at t*, see :func:`aumann.attribution.metrics.rank_agents`) and
k = 1 … K_del, the agents π[:k] take the scenario's baseline action at t* in a counterfactual fork
that re-simulates step t* from the checkpoint before it; the macro indicator falls from
f = f(z_{t*}) to f_k. The study reports (formulas in :mod:`aumann.attribution.metrics`)

    deletion_auc = mean_relative_drop(f, f_1 … f_Kdel) = (1/K_del) Σ_{k=1}^{K_del} (f − f_k) / f
    drop_at_5    = relative_drop_at_k(f, f_k, 5)       = 100 · (f − f_5) / f

for the attributed (C²) indicator and, beside it, the original indicator. Random is the mean curve
over ``random_orderings`` uniformly random orderings. Forks with the same deleted set are computed
once (rankings often share prefixes).

:class:`DeletionOracle` also defines the *re-simulation game* (:func:`resimulation_game`):
v(S) = f after re-simulating t* with every agent outside S at the baseline action.

Forks start from the run's checkpoint before t*: a checked copy where the model copies faithfully,
else a replay from the scenario's factory (``aumann.simulators.fork(..., strategy="auto")``). In
populations with births and deaths (``Scenario.baseline_action_by="id"``) only the agents present
before t* can take the baseline action: they are the players, and ``agent_ids`` (the run panel's
agent axis) maps panel positions to the agents acted on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aumann.attribution import FunctionGame
from aumann.attribution.indicators import evaluate
from aumann.attribution.metrics import mean_relative_drop, relative_drop, relative_drop_at_k
from aumann.scenarios.base import Scenario


@dataclass
class DeletionOracle:
    """Counterfactual forks of one run at its target step, with a cache keyed by the deleted set."""

    scenario: Scenario
    config: Any
    model_before: Any
    f: Any
    f_original: Any
    agent_ids: Any = None
    _cache: dict[frozenset[int], tuple[float, float]] = field(default_factory=dict)
    forks: int = 0

    def values(self, deleted: Sequence[int]) -> tuple[float, float]:
        """(f_k, f_k original) after re-simulating t* with ``deleted`` (panel positions) at the baseline action."""
        key = frozenset(int(i) for i in deleted)
        if key not in self._cache:
            z, ctx = self.scenario.step_with_baseline(self.model_before, self.config, sorted(key),
                                                      agent_ids=self.agent_ids)
            self.forks += 1
            self._cache[key] = (float(evaluate(self.f, z, ctx)), float(evaluate(self.f_original, z, ctx)))
        return self._cache[key]

    def curve(self, order: Sequence[int], k_max: int) -> np.ndarray:
        """(k_max, 2) array of (f_k, f_k original) for k = 1 … k_max."""
        return np.array([self.values(order[:k]) for k in range(1, k_max + 1)])


def resimulation_game(oracle: DeletionOracle, n: int, which: int = 0,
                      players: Sequence[int] | None = None) -> FunctionGame:
    """v(S): the indicator (``which`` 0: attributed, 1: original) after re-simulating the target step
    with the agents outside S at the baseline action (forks cached per coalition by the oracle).

    The players are panel positions ``players`` (default ``0 … n−1``); player j is position ``players[j]``.
    """
    pos = np.arange(n) if players is None else np.asarray(players, dtype=np.int64)

    def v(masks: np.ndarray) -> np.ndarray:
        return np.array([oracle.values(pos[~m])[which] for m in np.asarray(masks, dtype=bool)])

    return FunctionGame(v, n_players=len(pos), name="resimulation")


def scenario_resimulation_game(scenario: Scenario, model: Any, config: Any, *, original: bool = False,
                               agent_ids: Any = None) -> FunctionGame:
    """The re-simulation coalition game of ``scenario`` at the step ``model`` is about to take
    (``original=True`` values coalitions with the original indicator instead of the C² surrogate).

    For populations with births and deaths pass the run panel's ``agent_ids``: the players are the
    agents among them present in ``model`` (see :meth:`Scenario.present`)."""
    f, f_orig = scenario.indicators(config)
    oracle = DeletionOracle(scenario, config, model, f, f_orig, agent_ids=agent_ids)
    if agent_ids is None:
        return resimulation_game(oracle, config.agents, which=1 if original else 0)
    return resimulation_game(oracle, len(agent_ids), which=1 if original else 0,
                             players=scenario.present(model, agent_ids))


def deletion_summary(oracle: DeletionOracle, f_full: tuple[float, float], order: Sequence[int], k_del: int,
                     k_drop: int) -> dict[str, Any]:
    """Deletion curve, ``deletion_auc`` and ``drop_at_k`` (smooth and original) for one ordering."""
    curve = oracle.curve(order, k_del)
    return {"curve": relative_drop(f_full[0], curve[:, 0]), "curve_original": relative_drop(f_full[1], curve[:, 1]),
            "deletion_auc": mean_relative_drop(f_full[0], curve[:, 0]),
            "drop_at_k": relative_drop_at_k(f_full[0], curve[:, 0], k_drop),
            "deletion_auc_original": mean_relative_drop(f_full[1], curve[:, 1]),
            "drop_at_k_original": relative_drop_at_k(f_full[1], curve[:, 1], k_drop)}


def random_summary(oracle: DeletionOracle, f_full: tuple[float, float], n_agents: int | Sequence[int], k_del: int,
                   k_drop: int, orderings: int, rng: np.random.Generator) -> dict[str, Any]:
    """The Random row: the same metrics of the mean f_k curve over ``orderings`` random orderings
    of ``n_agents`` agents (an int: positions 0 … n−1; a sequence: those positions)."""
    pool = np.asarray(n_agents, dtype=np.int64) if not isinstance(n_agents, int | np.integer) else int(n_agents)
    curves = np.mean([oracle.curve(rng.permutation(pool), k_del) for _ in range(orderings)], axis=0)
    return {"curve": relative_drop(f_full[0], curves[:, 0]), "curve_original": relative_drop(f_full[1], curves[:, 1]),
            "deletion_auc": mean_relative_drop(f_full[0], curves[:, 0]),
            "drop_at_k": relative_drop_at_k(f_full[0], curves[:, 0], k_drop),
            "deletion_auc_original": mean_relative_drop(f_full[1], curves[:, 1]),
            "drop_at_k_original": relative_drop_at_k(f_full[1], curves[:, 1], k_drop)}


__all__ = ["DeletionOracle", "deletion_summary", "random_summary", "resimulation_game", "scenario_resimulation_game"]
