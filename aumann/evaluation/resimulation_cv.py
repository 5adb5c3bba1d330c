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

**A stronger control where G is the simulator (``control="step-map"``).** On the re-simulation game the
first-order model misses most of a marginal's variance: an agent's effect on the others depends on which
of them are already in S, not only on how many (MidScale-Social, N = 200: median ρ² ≈ 0.4, variance
×1.1–1.7). But the step map values the *same coalitions* for the price of a batched tensor
evaluation: its marginal W_i(π) = v̂(1_{S∪i}) − v̂(1_S) along the same permutation is a control whose
mean is the Shapley value of the map game — not known exactly, but estimable as precisely as wanted
without a single fork (``map_permutations`` permutations on the map, themselves with the Aumann–Shapley
control). The estimate is (multi-fidelity Monte Carlo, coefficient 1)

    φ̂_i = mean_forks(Δ_i − W_i) + φ̂_i^map,    se_i² = Var(Δ_i − W_i)/m + (se_i^map)²,

unbiased for the fork game's Shapley value (the two levels use independent permutations), exactly
efficient (Σ_i (Δ_i − W_i) = Δv_fork − Δv_map on every permutation and φ̂^map sums to Δv_map), and its
fork-level variance is what G gets wrong: 0 up to rounding where G is exact at the corners
(``StepMap.exact``, MidScale-Social, EconAgent), so a handful of fork permutations only confirm it;
what G holds fixed (SocialLLM's same-step decisions) shows up as fork-level variance, reported as
``map_variance_reduction`` (Var Δ / Var(Δ − W), median over the agents where Δ − W is not at the rounding
floor; ``map_exact_agents`` is the share where it is).

The extension is always the C² surrogate's f ∘ G: with ``original=True`` the coalitions are valued
with the original (non-smooth) indicator, and the surrogate's gradient still serves as its control
(a control need not be the game's own derivative, only have a known mean).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from aumann.attribution import FunctionGame, ParticipationGame, SampledShapleyCV
from aumann.attribution.distributed import MIN_UNITS_TO_STOP
from aumann.attribution.result import Attribution
from aumann.checks import as_choice, as_int, as_torch
from aumann.errors import MethodError, StepMapError
from aumann.evaluation.action import build_step_map, map_value_fn, torch_threads
from aumann.evaluation.deletion import DeletionOracle, resimulation_game
from aumann.scenarios.base import Scenario
from aumann.seeding import RNGLike, describe, spawn

METHOD = "sampled_shapley_cv_resimulation"
CONTROLS = ("aumann-shapley", "step-map")


def resimulation_participation_game(scenario: Scenario, model: Any, config: Any, oracle: DeletionOracle, *,
                                    original: bool = False) -> ParticipationGame:
    """The re-simulation game of ``oracle`` (forks of the step ``model`` is about to take) with the
    step map's f ∘ G as its participation extension (every agent a player: step maps describe fixed
    populations)."""
    sm = build_step_map(scenario, model, config)
    game = resimulation_game(oracle, sm.n_agents, which=1 if original else 0)
    f = scenario.indicators(config)[0]
    return ParticipationGame(game, map_value_fn(sm, f, n_features=len(scenario.features), name=scenario.name),
                             name="resimulation")


def _map_game(sm: Any, f: Any, n_features: int, name: str) -> ParticipationGame:
    """The step map's own coalition game v̂(1_S) = f(G(1_S)) (batched, no forks) with f ∘ G as its extension."""
    v = map_value_fn(sm, f, n_features=n_features, name=name)

    def values(masks: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return v(as_torch(np.asarray(masks, dtype=np.float64))).to(torch.float64).numpy()

    game = FunctionGame(values, n_players=sm.n_agents, name="step-map")
    game.row_bytes = 16 * 8 * sm.n_agents * max(1, n_features)  # G's working memory per coalition
    return ParticipationGame(game, v, name="step-map")


def resimulation_shapley_cv(scenario: Scenario, model: Any, config: Any, *, permutations: int = 200,
                            control: str = "aumann-shapley", map_permutations: int | None = None,
                            antithetic: bool = False, rng: RNGLike = None, original: bool = False,
                            stderr_tol: float | None = None, max_evals: int | None = None,
                            oracle: DeletionOracle | None = None, fork_threads: int = 1, executor: Any = None,
                            threads: int | None = 1, step: Any = 0,
                            agent_ids: Sequence[Any] | np.ndarray | None = None) -> Attribution:
    """Sampled Shapley of the re-simulation game of the step ``model`` is about to take, with the
    step map as control variate (module docstring).

    Args:
        scenario: a scenario with a ``step_map`` (fixed population).
        model: the model *before* the step (not modified).
        config: the scenario config.
        permutations, antithetic, stderr_tol, max_evals: fork-level permutations (each costs N − 1 forks;
            two more are shared) and stopping rules, as for :class:`~aumann.attribution.SampledShapleyCV`.
        control: ``"aumann-shapley"`` (the first-order model ∂v̂/∂λ_i at the diagonal, exact mean) or
            ``"step-map"`` (the map's own marginals, mean from ``map_permutations`` map-only permutations).
        map_permutations: permutations of the map game for ``control="step-map"`` (default
            max(2000, 10 · permutations); no forks).
        rng: seed of the permutations.
        original: value coalitions with the original indicator (the control stays the surrogate's).
        oracle: a :class:`DeletionOracle` to fork with (default: a new one on ``fork_threads`` threads or
            ``executor``); its ``forks`` counter includes these.
        threads: torch intra-op threads while the step map runs (see :func:`~aumann.evaluation.action_attribution`).
        step: the step label recorded in the result.
        agent_ids: agent labels (default 0 … N − 1).

    Returns:
        An :class:`Attribution` (1, N), method ``"sampled_shapley_cv_resimulation"``, with standard errors,
        ``n_evals`` = forks spent on coalitions, and provenance: ``control``, ``forks``, the estimator's
        notes (control nodes, gradient passes, ``variance_reduction``; with the step-map control
        ``map_permutations``, ``map_evaluations``, ``map_variance_reduction``) and ``seconds``.

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
    control = as_choice(control, "control (re-simulation control variate)", CONTROLS, error=MethodError)
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
        if control == "aumann-shapley":
            res = method.attribute_game(game, rng=rng)
            prov = dict(res.provenance)
            phi, se, dv, fv, fb, evals = res.phi, res.stderr, res.delta_v, res.f_values, res.f_baseline, res.n_evals
        else:
            sm = build_step_map(scenario, model, config)
            mgame = _map_game(sm, f, len(scenario.features), scenario.name)
            m_map = max(2000, 10 * permutations) if map_permutations is None else as_int(
                map_permutations, "map_permutations", minimum=4)
            g_fork, g_map = spawn(rng, 2)
            mres = SampledShapleyCV(permutations=m_map, antithetic=antithetic).attribute_game(mgame, rng=g_map)
            phi, se, info, evals, (fb, fv) = _two_level(method, game, mgame, mres, g_fork)
            dv = np.array([fv - fb])
            phi, se, fv, fb = phi[None], se[None], np.array([fv]), np.array([fb])
            prov = {**{k: v for k, v in mres.provenance.items() if k not in ("seed", "seconds", "game")},
                    "map_permutations": int(mres.provenance.get("permutations", m_map)),
                    "map_evaluations": int(mres.n_evals or 0), **info}
    prov.update({"control": control, "game": "resimulation", "window": 1, "seed": describe(rng),
                 "indicator": "original" if original else "surrogate", "forks": oracle.forks - forks_before,
                 "seconds": time.perf_counter() - t0})
    return Attribution(phi=phi, delta_v=dv, f_values=fv, f_baseline=fb, agent_ids=ids, steps=np.array([step]),
                       features=tuple(scenario.features), stderr=se, n_evals=evals, satisfies_efficiency=True,
                       method=METHOD, provenance=prov)


def _two_level(method: SampledShapleyCV, game: ParticipationGame, mgame: ParticipationGame, mres: Attribution,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, dict[str, Any], int, tuple[float, float]]:
    """Fork level of the step-map control: mean of Δ − W over ``method.permutations`` permutations (its
    stopping rules), plus the map level ``mres``. Returns φ, se, notes, forks, (v(∅), v(N))."""
    fork, mk = game.kernel(), mgame.kernel()
    v0, vN = fork.ends()
    n = game.n_players
    per = 2 if method.antithetic else 1
    m = method._budget(n)
    total = m // per
    round_units = max(2, (method.round_size or 32) // per)
    se_map = mres.stderr[0]
    sums = {k: np.zeros(n) for k in ("d", "dd", "u", "uu")}
    shift_d = shift_u = None
    count = 0
    stopped = "permutations"

    def stderr() -> np.ndarray:
        var_d = np.maximum(sums["dd"] - sums["d"] ** 2 / count, 0.0) / (count - 1)
        return np.sqrt(var_d / count + se_map**2)

    while count < total:
        c = min(round_units, total - count)
        perms = np.stack([rng.permutation(n) for _ in range(c)])
        u, ur = fork.prefix_marginals(perms, method.antithetic)
        w, wr = mk.prefix_marginals(perms, method.antithetic)
        if ur is not None:
            u, w = (u + ur) / 2, (w + wr) / 2
        d = u - w
        if shift_d is None:
            shift_d, shift_u = d[0].copy(), u[0].copy()
        dd, du = d - shift_d, u - shift_u
        sums["d"] += dd.sum(0)
        sums["dd"] += (dd * dd).sum(0)
        sums["u"] += du.sum(0)
        sums["uu"] += (du * du).sum(0)
        count += c
        if method.stderr_tol is not None and count >= MIN_UNITS_TO_STOP and stderr().max() < method.stderr_tol:
            stopped = "stderr_tol"
            break
    if stopped == "permutations" and m < method.permutations:
        stopped = "max_evals"
    phi = shift_d + sums["d"] / count + mres.phi[0]
    gap = (vN - v0) - float(phi.sum())  # rounding only: both levels are efficient
    phi = phi + gap / n
    var_u = np.maximum(sums["uu"] - sums["u"] ** 2 / count, 0.0)
    var_d = np.maximum(sums["dd"] - sums["d"] ** 2 / count, 0.0)
    has = (var_u > 0) & (var_d > 1e-24 * np.maximum(var_u, 1e-300))  # var_d at the rounding floor: G exact there
    ratio = var_u[has] / var_d[has]
    info = {"permutations": count * per, "stopped": stopped,
            "map_exact_agents": float(np.mean(~has & (var_u > 0))) if n else 0.0,
            "map_variance_reduction": float(np.median(ratio)) if ratio.size else None}
    return phi, stderr(), info, count * per * (n - 1) + 2, (v0, vN)


__all__ = ["METHOD", "resimulation_participation_game", "resimulation_shapley_cv"]
