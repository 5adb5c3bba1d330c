"""Sampled Shapley of the re-simulation game with the action Aumann–Shapley value as a control variate.

The re-simulation game at step t (:func:`aumann.evaluation.resimulation_game`): v(S) = f after the
step is re-simulated with the agents outside S at the baseline action — every evaluation a fork. A
scenario's step map G(λ) (:class:`~aumann.scenarios.base.StepMap`) is a smooth extension of it,
v̂(λ) = f(G(λ)), the function whose diagonal integral is the action Aumann–Shapley value
(:func:`aumann.evaluation.action_attribution`). Its gradient at λ = τ_k·1, τ_k = (k + ½)/N, dotted with
the agent's step (here the unit step of λ_i) is the control of the marginal of agent i at position k
of a permutation:

    g_i(k) = ∂v̂/∂λ_i((k + ½)/N · 1),     E_π[g_i] = (1/N) Σ_k ∂v̂/∂λ_i((k + ½)/N · 1)

— the N-point midpoint rule of the action Aumann–Shapley integral, computed exactly from N gradient
points of the step map (one forward and backward pass of one step each; a step map's kernels are
small, so this costs a few forks' worth of time), never from the adaptive quadrature's K points.
:class:`~aumann.attribution.SampledShapleyCV` then estimates the Shapley value of the *fork* game
(not of G): G enters only through the control, so the estimate is unbiased whatever G's gap to the
simulator at the corners (``StepMap.exact = False`` included); a better G only lowers the variance.

The extension is always the C² surrogate's f ∘ G: with ``original=True`` the coalitions are valued
with the original (non-smooth) indicator, and the surrogate's gradient still serves as its control
(a control need not be the game's own derivative, only have a known mean).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from aumann.attribution import ParticipationGame, SampledShapleyCV
from aumann.attribution.result import Attribution
from aumann.errors import StepMapError
from aumann.evaluation.action import build_step_map, map_value_fn, torch_threads
from aumann.evaluation.deletion import DeletionOracle, resimulation_game
from aumann.scenarios.base import Scenario
from aumann.seeding import RNGLike, describe

METHOD = "sampled_shapley_cv_resimulation"


def resimulation_participation_game(scenario: Scenario, model: Any, config: Any, oracle: DeletionOracle, *,
                                    original: bool = False) -> ParticipationGame:
    """The re-simulation game of ``oracle`` (forks of the step ``model`` is about to take) with the
    step map's f ∘ G as its participation extension (every agent a player: step maps describe fixed
    populations)."""
    sm = build_step_map(scenario, model, config)
    game = resimulation_game(oracle, sm.n_agents, which=1 if original else 0)
    f = scenario.indicator(config)
    return ParticipationGame(game, map_value_fn(sm, f, n_features=len(scenario.features), name=scenario.name),
                             name="resimulation")


def resimulation_shapley_cv(scenario: Scenario, model: Any, config: Any, *, permutations: int = 200,
                            antithetic: bool = False, rng: RNGLike = None, original: bool = False,
                            stderr_tol: float | None = None, max_evals: int | None = None,
                            oracle: DeletionOracle | None = None, fork_threads: int = 1, executor: Any = None,
                            threads: int | None = 1, step: Any = 0,
                            agent_ids: Sequence[Any] | np.ndarray | None = None) -> Attribution:
    """Sampled Shapley of the re-simulation game of the step ``model`` is about to take, with the
    step map's action Aumann–Shapley control variate (module docstring).

    Args:
        scenario: a scenario with a ``step_map`` (fixed population).
        model: the model *before* the step (not modified).
        config: the scenario config.
        permutations, antithetic, stderr_tol, max_evals: as for :class:`~aumann.attribution.SampledShapleyCV`
            (every permutation costs N − 1 forks; two more are shared).
        rng: seed of the permutations.
        original: value coalitions with the original indicator (the control stays the surrogate's).
        oracle: a :class:`DeletionOracle` to fork with (default: a new one on ``fork_threads`` threads or
            ``executor``); its ``forks`` counter includes these.
        threads: torch intra-op threads while the step map's gradients are taken (see
            :func:`~aumann.evaluation.action_attribution`).
        step: the step label recorded in the result.
        agent_ids: agent labels (default 0 … N − 1).

    Returns:
        An :class:`Attribution` (1, N), method ``"sampled_shapley_cv_resimulation"``, with standard errors,
        ``n_evals`` = forks spent on coalitions, and provenance: the estimator's per-step notes (control
        nodes, gradient passes, variance reduction), ``forks`` and ``seconds``.

    Example:
        >>> from aumann import scenarios
        >>> sc = scenarios.get("midscale-social")
        >>> cfg = sc.load_config(agents=20, steps=4)
        >>> run = sc.simulate(cfg, rng=0, keep_from=0)
        >>> res = resimulation_shapley_cv(sc, run.before(3), cfg, permutations=8, rng=0)
        >>> res.phi.shape, bool(res.max_efficiency_gap < 1e-9)
        ((1, 20), True)
    """
    t0 = time.perf_counter()
    f, f_orig = scenario.indicators(config)
    if oracle is None:
        oracle = DeletionOracle(scenario, config, model, f, f_orig, threads=fork_threads, executor=executor)
    forks_before = oracle.forks
    game = resimulation_participation_game(scenario, model, config, oracle, original=original)
    n = game.n_players
    ids = np.arange(n) if agent_ids is None else np.asarray(agent_ids)
    if ids.shape != (n,):
        raise StepMapError(f"agent_ids must have the step map's {n} agents; got shape {ids.shape}")
    method = SampledShapleyCV(permutations=permutations, antithetic=antithetic, stderr_tol=stderr_tol,
                              max_evals=max_evals)
    with torch_threads(threads):
        res = method.attribute_game(game, rng=rng)
    prov = {**res.provenance, "game": "resimulation", "window": 1, "seed": describe(rng),
            "indicator": "original" if original else "surrogate", "forks": oracle.forks - forks_before,
            "seconds": time.perf_counter() - t0}
    return Attribution(phi=res.phi, delta_v=res.delta_v, f_values=res.f_values, f_baseline=res.f_baseline,
                       agent_ids=ids, steps=np.array([step]), features=tuple(scenario.features), stderr=res.stderr,
                       n_evals=res.n_evals, satisfies_efficiency=True, method=METHOD, provenance=prov)


__all__ = ["METHOD", "resimulation_participation_game", "resimulation_shapley_cv"]
