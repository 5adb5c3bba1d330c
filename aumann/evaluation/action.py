"""Action attribution through the simulator: the Aumann–Shapley value of the re-simulation game.

The re-simulation game at step t: v(S) = f(G(a_S, a⁰_rest)), the indicator after the step is
re-simulated with the agents outside S taking the baseline action (agents in S take their
recorded action). Unlike the masking game that :func:`aumann.attribution.attribute` explains (an
agent's recorded feature row replaced by its baseline row, everyone else's rows as recorded), this
game credits an agent for what its action did to *others* (their exposure, reshares, beliefs...).

A scenario opts in with ``Scenario.step_map``: G as a torch function of participation intensities
λ ∈ [0, 1]^N (λ_i = 1 the recorded action, λ_i = 0 the baseline action; at the corners of the cube G
equals the simulator). With v̂(λ) = f(G(λ)), each agent's value is

    φ_i = ∫₀¹ ∂v̂/∂λ_i (τ·1) dτ,        Σ_i φ_i = v̂(1) − v̂(0),

computed by :func:`aumann.attribution.participation.diagonal_path_integral` (the engine's quadrature
rules; G's declared clip kinks on panel boundaries; adaptive refinement until the efficiency budget
``tol`` holds). Cost: one forward and one backward pass of one step per quadrature point, against
m·(N − 1) + 2 re-simulations for sampled Shapley with m permutations on the same game.

Efficiency is checked against the *real* re-simulation game, not only against G: the returned
Attribution's ``delta_v`` is the fork-measured v(N) − v(∅) (the factual step re-simulated; every
agent at the baseline action), and ``provenance`` records the G-vs-fork gaps at those two corners
(features and indicator). :func:`step_map_gap` measures the gap at any other coalitions (the study
uses the coalitions its deletion curves forked), which is what a step map that holds same-step
decisions at their recorded values (``StepMap.exact = False``, SocialLLM) gets wrong.

Window: w = 1 (the actions at step t only). A window of w > 1 steps would compose G over steps
t−w+1 … t and hold the later decisions of the other agents at their recorded values; it is not
implemented.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from aumann.attribution.indicators import EvalContext, as_indicator, evaluate, evaluate_tensor
from aumann.attribution.participation import diagonal_path_integral
from aumann.attribution.problem import AttributionMethod
from aumann.attribution.result import Attribution
from aumann.checks import as_torch
from aumann.errors import IndicatorError, MethodError, StepMapError, StepMapUnavailable
from aumann.scenarios.base import Scenario, StepMap
from aumann.simulators.boundary import call

METHOD = "action_aumann_shapley"


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run the block with ``threads`` torch intra-op threads (``None``: unchanged), then restore."""
    before = torch.get_num_threads()
    if threads is not None and threads != before:
        torch.set_num_threads(int(threads))
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def build_step_map(scenario: Scenario, model: Any, config: Any) -> StepMap:
    """``scenario.step_map(model, config)``, checked (:class:`StepMapUnavailable` when it has none)."""
    if scenario.step_map is None:
        raise StepMapUnavailable(f"scenario {scenario.name!r} provides no step_map, so its actions cannot be "
                                 "attributed through the simulator; give the Scenario a step_map(model, config) "
                                 "returning a StepMap (docs/scenarios.md)")
    # the scenario's own code: an exception in it names the scenario (not a bare traceback from the rows stage)
    sm = scenario.call("step_map(model, config)", scenario.step_map, model, config, error=StepMapError)
    if not isinstance(sm, StepMap):
        raise StepMapError(f"scenario {scenario.name!r}: step_map returned {type(sm).__name__}; expected a StepMap")
    if sm.n_agents != config.agents:
        raise StepMapError(f"scenario {scenario.name!r}: the step map has {sm.n_agents} agents; the config has "
                           f"{config.agents}")
    return sm


def _context(context: Mapping[str, Any], batch: int) -> dict[str, torch.Tensor]:
    out = {}
    for k, v in context.items():
        t = as_torch(np.asarray(v, dtype=np.float64))
        out[k] = t.expand(batch, *t.shape)
    return out


def map_features(sm: StepMap, lam: np.ndarray | torch.Tensor, *, n_features: int | None = None,
                 name: str = "scenario") -> torch.Tensor:
    """G(λ) for a batch (B, N) of intensities, with its shape and finiteness checked."""
    lam_t = as_torch(np.asarray(lam, dtype=np.float64)) if not isinstance(lam, torch.Tensor) else lam
    version = lam_t._version  # torch counts every in-place write: G must not rescale the quadrature's λ
    z = call(name, "the step map G(λ)", sm, lam_t, error=StepMapError)
    if lam_t._version != version:
        raise StepMapError(f"scenario {name!r}: the step map G(λ) modified its input λ in place (lam.mul_(), "
                           "lam[...] = ...); the intensities are the quadrature's points, shared with the "
                           "gradient: compute on a new tensor (lam = lam * 0.5)")
    if not isinstance(z, torch.Tensor) or z.ndim != lam_t.ndim + 1 or tuple(z.shape[:-1]) != tuple(lam_t.shape) or (
            n_features is not None and z.shape[-1] != n_features):
        shape = tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__
        raise StepMapError(f"{name}: the step map must map intensities {tuple(lam_t.shape)} to features "
                           f"{(*lam_t.shape, n_features or 'D')}; got {shape}")
    if not torch.isfinite(z.detach()).all():
        raise StepMapError(f"{name}: the step map returned NaN/inf features")
    return z


def map_value_fn(sm: StepMap, f: Any, *, n_features: int, name: str = "scenario") -> Any:
    """v̂(λ) = f(G(λ), context) for a batch (B, N) of intensities → (B,) (differentiable)."""
    ind = as_indicator(f)

    def v(lam: torch.Tensor) -> torch.Tensor:
        z = map_features(sm, lam, n_features=n_features, name=name)
        # a step map describes a fixed population (every row alive): no living mask to carry
        out = evaluate_tensor(ind, EvalContext(z, _context(sm.context, lam.shape[0]) if sm.context else None,
                                               batched=True))
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (lam.shape[0],):
            raise IndicatorError(f"indicator {ind.name!r} must return one value per batch element on the step "
                                 f"map's features; got {getattr(out, 'shape', type(out).__name__)}")
        return out

    return v


def step_map_gap(sm: StepMap, f: Any, coalitions: Sequence[Sequence[int]], fork_values: Sequence[float], *,
                 scale: float, n_features: int, batch: int = 64, threads: int | None = 1,
                 name: str = "scenario") -> dict[str, Any]:
    """|f(G(1 − 1_D)) − v_fork(D)| / scale over deleted sets D (the agents at the baseline action).

    Returns ``{"coalitions", "max_rel", "mean_rel"}`` (0 coalitions: NaN gaps).
    """
    v = map_value_fn(sm, f, n_features=n_features, name=name)
    deleted = [np.asarray(d, dtype=np.int64) for d in coalitions]
    got = np.empty(len(deleted))
    with torch.no_grad(), torch_threads(threads):
        for s in range(0, len(deleted), batch):
            chunk = deleted[s:s + batch]
            lam = np.ones((len(chunk), sm.n_agents))
            for j, d in enumerate(chunk):
                lam[j, d] = 0.0
            got[s:s + len(chunk)] = v(as_torch(lam)).numpy()
    rel = np.abs(got - np.asarray(fork_values, dtype=np.float64)) / max(abs(scale), np.finfo(np.float64).tiny)
    return {"coalitions": len(deleted), "max_rel": float(rel.max()) if rel.size else float("nan"),
            "mean_rel": float(rel.mean()) if rel.size else float("nan")}


@dataclass(frozen=True)
class ActionProblem:
    """What :class:`ActionAumannShapley` explains: the step ``model`` is about to take, as the re-simulation
    game of ``scenario`` (its ``step_map`` G the game's smooth extension).

    Attributes:
        scenario: a scenario with a ``step_map``.
        model: the model *before* the step (e.g. ``run.before(t)``; it is not modified).
        config: the scenario config.
        step: the step label recorded in the result.
        agent_ids: agent labels (default 0 … N−1, the panel's order).
        original: attribute the scenario's original (non-smooth) indicator instead of the C² surrogate.
    """

    scenario: Scenario
    model: Any
    config: Any
    step: Any = 0
    agent_ids: Sequence[Any] | np.ndarray | None = None
    original: bool = False

    def indicator(self) -> Any:
        surrogate, original = self.scenario.indicators(self.config)  # through the scenario's boundary
        return original if self.original else surrogate

    def result(self, phi: np.ndarray, *, method: str, provenance: dict[str, Any], state: EvalContext,
               z0: np.ndarray, f_values: float, f_baseline: float, n_evals: int) -> Attribution:
        """The :class:`Attribution` (T = 1), through :meth:`aumann.attribution.Problem.result` like every method's:
        the step ``state`` (everyone's recorded action: features, context and living mask as one
        :class:`~aumann.attribution.indicators.EvalContext`) against ``z0`` (everyone at the baseline action),
        v(N) = ``f_values`` and v(∅) = ``f_baseline``."""
        from aumann.attribution.problem import Problem
        from aumann.panel import Panel

        n = self.config.agents
        ids = np.arange(n) if self.agent_ids is None else np.asarray(self.agent_ids)
        panel = Panel(np.asarray(state.z)[None], features=list(self.scenario.features), agent_ids=ids,
                      steps=np.array([self.step]),
                      context={k: np.asarray(v)[None] for k, v in (state.context or {}).items()},
                      alive=None if state.alive is None else np.asarray(state.alive, dtype=bool)[None])
        problem = Problem.build(as_indicator(self.indicator()), panel, baseline=np.asarray(z0, dtype=panel.dtype))
        return problem.result(np.asarray(phi, dtype=np.float64)[None, :], method=method, provenance=provenance,
                              f_values=np.array([f_values]), f_baseline=np.array([f_baseline]), n_evals=n_evals,
                              satisfies_efficiency=True)


class ActionAumannShapley(AttributionMethod):
    """Aumann–Shapley of the re-simulation game through the scenario's step map: φ_i = ∫₀¹ ∂f(G(τ·1))/∂λ_i dτ.

    An attribution method like the others (hyperparameters here, one verb): ``attribute`` takes an
    :class:`ActionProblem` (the step, through the simulator) where the feature-game methods take a
    :class:`~aumann.attribution.Problem`, and returns its :class:`Attribution` through the same result path.

    Args:
        steps: quadrature points on [0, 1] (a panel of width h gets max(2, ⌈steps · h⌉)).
        tol: efficiency budget relative to v̂(1) − v̂(0) for adaptive refinement (``None``: one pass).
        rule: ``"gauss-legendre"`` or ``"midpoint"``.
        forks: re-simulate the step twice (factual; everyone at the baseline action) to measure the
            game's Δv and the G-vs-fork gap (recommended; ``False`` reports G's own Δv).
        kinks: put the step map's declared clip kinks on panel boundaries.
        max_evals: the most gradient points adaptive refinement may spend.
        threads: torch intra-op threads while integrating (restored afterwards; ``None`` leaves torch's
            setting). A step map's kernels are small (N × 64 values per call), where one thread avoids
            the OpenMP wake-ups that dominate them on a shared machine (MidScale-Social, N = 1000, 2 cores
            under load: 1.2–1.5 s per run with one thread, 13–21 s with two).
    """

    name = METHOD
    satisfies_efficiency = True

    def __init__(self, *, steps: int = 32, tol: float | None = 1e-6, rule: str = "gauss-legendre", forks: bool = True,
                 kinks: bool = True, max_evals: int = 4096, threads: int | None = 1) -> None:
        self.steps, self.tol, self.rule, self.forks = steps, tol, rule, forks
        self.kinks, self.max_evals, self.threads = kinks, max_evals, threads

    def attribute(self, problem: Any, *, rng: Any = None) -> Attribution:
        """Attribute the step of ``problem`` (an :class:`ActionProblem`) to every agent's action."""
        if not isinstance(problem, ActionProblem):
            raise MethodError("ActionAumannShapley attributes a step through the simulator: call "
                              ".attribute(ActionProblem(scenario, model_before, config)) (or action_attribution); "
                              f"got {type(problem).__name__}")
        t0 = time.perf_counter()
        scenario, model, config, threads = problem.scenario, problem.model, problem.config, self.threads
        sm = build_step_map(scenario, model, config)
        f = problem.indicator()
        D, n = len(scenario.features), config.agents
        v = map_value_fn(sm, f, n_features=D, name=scenario.name)
        with torch_threads(threads):
            integral = diagonal_path_integral(v, n, steps=self.steps, rule=self.rule, tol=self.tol,
                                              max_evals=self.max_evals, switches=sm.switches if self.kinks else None)
        prov: dict[str, Any] = {
            "game": "resimulation", "window": 1, "steps": int(self.steps), "rule": self.rule, "tol": self.tol,
            "grad_evals": integral.grad_evals, "value_evals": integral.value_evals,
            "step_evals": integral.grad_evals + integral.value_evals, "panels": len(integral.panels) - 1,
            "kinks": len(integral.kinks), "converged": integral.converged,
            "adaptive_history": [[int(k), float(g)] for k, g in integral.history], "phi_change": integral.phi_change,
            "exact_map": bool(sm.exact), "holds": sm.holds, "delta_v_map": integral.delta_v,
            "map_efficiency_gap": integral.relative_efficiency_gap,
            "indicator": "original" if problem.original else "surrogate",
            "threads": torch.get_num_threads() if threads is None else int(threads),
        }
        with torch.no_grad(), torch_threads(threads):
            corners = map_features(sm, np.stack([np.ones(n), np.zeros(n)]), n_features=D, name=scenario.name).numpy()
        # the step map describes a fixed population: its corners carry the map's context and no mask
        f_full, f_empty = integral.v_full, integral.v_empty
        full, z0 = EvalContext(corners[0], sm.context or None), corners[1]
        if self.forks:  # the forks' steps: features, context and living mask as one context each
            full, empty = scenario.step_state(model, config, []), scenario.step_state(model, config, range(n))
            z0 = empty.z
            f_full, f_empty = float(evaluate(f, full)), float(evaluate(f, empty))
            scale = max(abs(f_full - f_empty), np.finfo(np.float64).tiny)
            prov.update({
                "forks": 2, "v_fork_full": f_full, "v_fork_empty": f_empty,
                "fork_gap": max(abs(integral.v_full - f_full), abs(integral.v_empty - f_empty)) / scale,
                "feature_gap": float(max(np.abs(corners[0] - full.z).max(), np.abs(corners[1] - z0).max())),
            })
        prov["seconds"] = time.perf_counter() - t0
        return problem.result(integral.phi, method=self.name, provenance=prov, state=full, z0=z0, f_values=f_full,
                              f_baseline=f_empty, n_evals=integral.grad_evals + integral.value_evals)


def action_attribution(scenario: Scenario, model: Any, config: Any, *, steps: int = 32, tol: float | None = 1e-6,
                       rule: str = "gauss-legendre", original: bool = False, forks: bool = True,
                       kinks: bool = True, max_evals: int = 4096, step: Any = 0,
                       agent_ids: Sequence[Any] | np.ndarray | None = None, threads: int | None = 1) -> Attribution:
    """Attribute the re-simulation game of the step ``model`` is about to take to every agent's action:
    ``ActionAumannShapley(...).attribute(ActionProblem(scenario, model, config, ...))``.

    Args: those of :class:`ActionAumannShapley` (``steps``, ``tol``, ``rule``, ``forks``, ``kinks``,
    ``max_evals``, ``threads``) and :class:`ActionProblem` (``original``, ``step``, ``agent_ids``).

    Returns:
        An :class:`Attribution` with ``phi`` of shape (1, N), method ``"action_aumann_shapley"``,
        ``delta_v`` = the fork-measured v(N) − v(∅) (with ``forks``), ``n_evals`` = evaluations of
        the step map (gradient points + forward-only points), and provenance: quadrature (K, rule,
        tol, points, panels, kinks, converged, history, φ change), cost (``step_evals``, ``seconds``),
        the step map's ``exact``/``holds``, ``delta_v_map`` = v̂(1) − v̂(0), ``map_efficiency_gap``
        (relative to it), ``fork_gap`` (|v̂ − v_fork| at both corners, relative to |Δv|) and
        ``feature_gap`` (max |G − fork features| at both corners).

    Raises:
        StepMapUnavailable: the scenario has no step map. StepMapError: the step map misbehaves.

    Example:
        >>> from aumann import scenarios
        >>> sc = scenarios.get("midscale-social")
        >>> cfg = sc.load_config(agents=30, steps=4)
        >>> run = sc.simulate(cfg, rng=0, keep_from=0)
        >>> res = action_attribution(sc, run.before(3), cfg)
        >>> res.phi.shape, bool(res.max_efficiency_gap < 1e-6 * abs(res.delta_v[0]))
        ((1, 30), True)
    """
    method = ActionAumannShapley(steps=steps, tol=tol, rule=rule, forks=forks, kinks=kinks, max_evals=max_evals,
                                 threads=threads)
    return method.attribute(ActionProblem(scenario, model, config, step=step, agent_ids=agent_ids, original=original))


__all__ = ["METHOD", "ActionAumannShapley", "ActionProblem", "action_attribution", "build_step_map", "map_features",
           "map_value_fn", "step_map_gap"]
