"""Robustness ablations at the target step t* (paper, Appendix R and Appendix E).

**Path ablation** (Table path-ablation). The straight path τ ↦ z⁰ + τ (z − z⁰) (our Aumann–Shapley
value) against a random-permutation piecewise-linear path: agents are faded in one at a time in a
random order π, agent π_k moving from z⁰ to z while agents π_1 … π_{k−1} sit at z and the rest at
z⁰. On agent i's segment only agent i's coordinates move, so by the fundamental theorem of calculus
its path integral Σ_d ∫ ∂f/∂z_{i,d} dz_{i,d} over the segment equals *exactly*

    φ_i^π = f(prefix_π(i) ∪ {i}) − f(prefix_π(i))

(the marginal contribution along the vertex path; the masking game's permutation marginal). We
compute that closed expression (no quadrature error) for ``path_orders`` random orders, and report
Kendall τ (mean and min over orders and runs) and the top-k overlap against the straight path,
plus τ of the order-averaged path attribution (a small sampled Shapley).

**f-sensitivity** (Table f-sensitivity). The scenario's alternative aggregators
(:mod:`aumann.attribution.aggregators`: weighted sum f₁, log-aggregate f₂, pairwise interaction f₃),
each attributed with the straight path from the same per-agent baseline; pairwise τ and top-k overlap.

**Baseline ablation** (Table baseline-ablation). Attribution of f at t* from four baselines: zero
(z⁰ = 0), population mean (z⁰ = z̄, the mean over all agents and steps), pre-event (z⁰ = z at the
first recorded step) and the scenario's baseline action; agents ranked by |φ| as in the paper;
pairwise top-10 and top-100 Jaccard (k capped at N/2), Kendall τ and Spearman ρ.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations
from typing import Any

import numpy as np

from aumann.attribution.indicators import EvalContext, evaluate
from aumann.attribution.metrics import kendall_tau, spearman, topk_jaccard, topk_overlap
from aumann.attribution.threads import run_items
from aumann.io import drop_resident
from aumann.scenarios.base import Scenario, ScenarioConfig

_PAIRS = 1 << 16  # agents from which the pairs' rank statistics (sorts of N) run on two threads where a core is idle


def vertex_path_attribution(f: Any, z: Any, z0: np.ndarray, order: np.ndarray,
                            context: dict[str, np.ndarray] | None = None, chunk: int = 256, *,
                            alive: np.ndarray | None = None) -> np.ndarray:
    """φ^π (N,): exact piecewise-linear-path attribution for the agent order ``order``.

    ``z``: the step's features (N, D) or its :class:`~aumann.attribution.indicators.EvalContext` (features,
    context and living mask together); dead rows are held at the baseline (and an alive-aware f never
    sees them)."""
    state = z if isinstance(z, EvalContext) else EvalContext(np.asarray(z), context, alive)
    z = np.asarray(state.z)
    if state.alive is not None:  # dead rows sit at the baseline, as in the engine's masking game
        z = np.where(state.alive[:, None], z, np.broadcast_to(z0, z.shape))
    n = z.shape[0]
    vals = np.empty(n + 1)
    for s in range(0, n + 1, chunk):
        ks = np.arange(s, min(n + 1, s + chunk))
        # mask[b, j] = agent at order position < k_b is in
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n)
        mask = rank[None, :] < ks[:, None]
        batch = np.where(mask[..., None], z[None], z0[None])
        vals[ks] = evaluate(f, state.batch(batch))
    marg = np.diff(vals)  # marg[k] = contribution of order[k]
    phi = np.empty(n)
    phi[order] = marg
    return phi


def _pair_stats(a: np.ndarray, b: np.ndarray, k: int) -> dict[str, float]:
    return {"kendall_tau": float(kendall_tau(a, b)), "top_overlap": float(topk_overlap(a, b, k))}


def path_ablation(f: Any, pt: Any, z0: np.ndarray, phi_straight: np.ndarray, orders: int, rng: np.random.Generator,
                  top_k: int) -> dict[str, Any]:
    """Straight vs random-permutation piecewise-linear paths (per-order τ and overlap).

    The vertex-path marginals come from the masking game's kernel (running sums for pooled
    indicators, plain batched evaluation otherwise); :func:`vertex_path_attribution` is the
    same quantity computed directly (the tests check they agree).
    """
    from aumann.attribution import MaskedIndicatorGame, Problem

    n = pt.N
    game = MaskedIndicatorGame(Problem.build(f, pt, np.ascontiguousarray(z0)), 0)
    kernel = game.kernel()
    perms = np.stack([rng.permutation(n) for _ in range(orders)])
    phis, _ = kernel.prefix_marginals(perms, reverse=False)
    avg = phis.mean(axis=0)
    stats = run_items(lambda phi: _pair_stats(phi_straight, phi, top_k), [*phis, avg], work=n, threshold=_PAIRS)
    return {"kendall_tau_orders": [s["kendall_tau"] for s in stats[:-1]],
            "top_overlap_orders": [s["top_overlap"] for s in stats[:-1]],
            "kendall_tau_average_path": stats[-1]["kendall_tau"],
            "top_overlap_average_path": stats[-1]["top_overlap"], "top_k": top_k, "path": kernel.kind}


def f_sensitivity(scenario: Scenario, config: ScenarioConfig, pt: Any, z0: np.ndarray, top_k: int) -> dict[str, Any]:
    """Pairwise agreement of attributions under the scenario's alternative aggregators."""
    from aumann.attribution import AumannShapley, attribute

    aggs = scenario.alternative_indicators(config)  # the scenario's own code, through its boundary
    if not aggs:
        return {}
    method = AumannShapley(steps=config.study.quadrature_steps, closed_form=False)
    phis = {name: attribute(agg, pt, method=method, baseline=z0).phi[0] for name, agg in aggs.items()}
    pairs = list(combinations(list(phis), 2))
    stats = run_items(lambda ab: _pair_stats(phis[ab[0]], phis[ab[1]], top_k), pairs, work=pt.N, threshold=_PAIRS)
    return {f"{a} vs {b}": st for (a, b), st in zip(pairs, stats, strict=True)}


def baseline_ablation(f: Any, panel: Any, ts: int, z0_action: np.ndarray, quadrature_steps: int, *,
                      attempt: Callable[[str, Callable[[], np.ndarray]], np.ndarray | None] | None = None,
                      ) -> dict[str, Any]:
    """Pairwise agreement of attributions from the zero, mean, pre-event and baseline-action baselines.

    ``attempt(name, fn)``: runs each baseline's attribution (named ``"zero-baseline"``, ...) and returns
    ``None`` for one that failed, which is then left out of the pairs (the study records why); without it a
    failure raises."""
    from aumann.attribution import AumannShapley, attribute, resolve_baseline

    n, d = panel.N, panel.D
    # the mean over the living rows of every step; pre-event never reads a dead row (a newborn's is its
    # state at birth: the engine's rule for baseline="pre-event", absent="entry")
    mean, _ = resolve_baseline("mean", panel)
    pre, _ = resolve_baseline("pre-event", panel)
    drop_resident(panel.values)  # a large run's spilled panel (aumann.io.spill): the pass over every step handed back
    bases = {"zero": np.zeros((n, d)), "population_mean": np.broadcast_to(mean[0, 0], (n, d)),
             "pre_event": pre[0], "baseline_action": z0_action}
    pt = panel.select_steps([ts])
    method = AumannShapley(steps=quadrature_steps, closed_form=False)
    phis = {}
    for k, b in bases.items():
        def phi_of(b: np.ndarray = b) -> np.ndarray:
            return attribute(f, pt, method=method, baseline=np.ascontiguousarray(b)).phi[0]

        phi = phi_of() if attempt is None else attempt(f"{k.replace('_', '-')}-baseline", phi_of)
        if phi is not None:
            phis[k] = phi
    k10, k100 = min(10, max(1, n // 2)), min(100, max(1, n // 2))

    def stats(ab: tuple[str, str]) -> dict[str, float]:
        pa, pb = np.abs(phis[ab[0]]), np.abs(phis[ab[1]])
        return {"jaccard_top10": float(topk_jaccard(pa, pb, k10)), "jaccard_top100": float(topk_jaccard(pa, pb, k100)),
                "kendall_tau": float(kendall_tau(pa, pb)), "spearman_rho": float(spearman(pa, pb))}

    pairs = list(combinations(list(phis), 2))
    return {f"{a} vs {b}": st for (a, b), st in zip(pairs, run_items(stats, pairs, work=n, threshold=_PAIRS),
                                                      strict=True)}


def run_ablations(scenario: Scenario, config: ScenarioConfig, panel: Any, ts: int, z0: np.ndarray,
                  phi_straight: np.ndarray, rng: np.random.Generator, top_k: int) -> dict[str, Any]:
    """All three ablations for one run (JSON-able)."""
    f = scenario.indicators(config)[0]
    pt = panel.select_steps([ts])
    return {"path": path_ablation(f, pt, z0, phi_straight, config.study.path_orders, rng, top_k),
            "f_sensitivity": f_sensitivity(scenario, config, panel.select_steps([ts]), z0, top_k),
            "baseline": baseline_ablation(f, panel, ts, z0, config.study.quadrature_steps)}


__all__ = ["baseline_ablation", "f_sensitivity", "path_ablation", "run_ablations", "vertex_path_attribution"]
