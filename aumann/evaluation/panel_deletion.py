"""Deletion faithfulness of a recorded panel without a simulator: the masking game only.

A trace (an event log of OASIS, AgentSociety 2, Concordia, ...) cannot be re-simulated: nothing can ask
the simulator what the other agents would have done had some agents been silent. What can be measured
is the *masking* game at the target step t* (the step with the largest Δv_t): the top-k agents by their
attribution φ_{i,t*} have their recorded features at t* set to the baseline z⁰, everyone else's stay as
logged (so the others' recorded reactions to the deleted agents stay in), and the indicator falls from
f = f(z_{t*}) to f_k. Beside it, the mean curve over random orderings. The metrics are those of
:mod:`aumann.evaluation.deletion` (``deletion_auc`` = mean relative drop over k = 1 … K_del,
``drop_at_k`` = 100·(f − f_k)/f at k = ``k_drop``), on the agents alive at t*.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from aumann.attribution.indicators import EvalContext, as_indicator, evaluate
from aumann.attribution.metrics import rank_agents
from aumann.attribution.problem import resolve_baseline
from aumann.evaluation.deletion import MaskingOracle, deletion_summary
from aumann.seeding import as_generator

#: why a trace's deletion study is the masking game only (the report quotes it)
WHY_MASKING_ONLY = ("A log cannot be re-simulated: nothing can ask the simulator what the others would have done "
                    "without the deleted agents. The deletion study is therefore the masking game only: the deleted "
                    "agents' recorded features at t* are set to the baseline, everyone else's stay as logged "
                    "(their reactions to the deleted agents stay in).")


class _LivingOrders:
    """The masking oracle of the whole step, driven by orderings of the living agents (positions 0 … n−1 of
    ``living``): the game the engine explained, dead rows held at the baseline and out of an alive-aware f."""

    def __init__(self, oracle: MaskingOracle, living: np.ndarray) -> None:
        self.oracle, self.living = oracle, living

    def curve(self, order: Any, k_max: int) -> np.ndarray:
        return self.oracle.curve(self.living[np.asarray(order, dtype=np.int64)], k_max)

    def curve_at(self, order: Any, ks: Any) -> np.ndarray:
        return self.oracle.curve_at(self.living[np.asarray(order, dtype=np.int64)], ks)


def masking_deletion(f: Any, panel: Any, att: Any, *, baseline: Any = "zero", k_del: int | None = None,
                     k_drop: int = 5, orderings: int = 20, seed: int = 0) -> dict[str, Any]:
    """The masking deletion study at t* (see the module docstring) as a JSON-ready dict.

    Args:
        f: the attributed indicator; panel: the panel attributed; att: its :class:`Attribution`.
        baseline: the baseline the attribution used (``"zero"``, ``"mean"``, an array, ...).
        k_del: agents deleted at most (default min(living, max(10, ⌈5 % of living⌉), 200)).
        k_drop: the k of ``drop_at_k``; orderings: random orderings averaged; seed: their seed.
    """
    ind = as_indicator(f)
    ts = int(np.argmax(np.asarray(att.delta_v, dtype=np.float64)))
    living = np.flatnonzero(panel.alive[ts]) if panel.alive is not None else np.arange(panel.N)
    n = int(living.size)
    base, label = resolve_baseline(baseline, panel)
    b = base[ts if base.shape[0] > 1 else 0]
    state = EvalContext.at_step(panel, ts)  # the step's features, context and living mask, evaluated together
    z0 = np.broadcast_to(np.asarray(b, dtype=np.float64), panel.values.shape[1:])
    oracle = _LivingOrders(MaskingOracle(ind, ind, state, z0), living)
    fz = float(evaluate(ind, state))
    f_full = (fz, fz)
    if k_del is None:
        k_del = min(n, max(10, math.ceil(0.05 * n)), 200)
    k_del = max(1, min(int(k_del), n))
    k_drop = max(1, min(int(k_drop), k_del))
    order = rank_agents(np.asarray(att.phi[ts], dtype=np.float64)[living])
    ours = deletion_summary(oracle, f_full, order, k_del, k_drop)
    rng = as_generator(seed)
    rnd = deletion_summary(oracle, f_full, [rng.permutation(n) for _ in range(orderings)], k_del, k_drop)
    curve_ours = oracle.curve(order, k_del)[:, 0]
    step = panel.steps[ts]

    def clean(x: Any) -> Any:
        if isinstance(x, np.ndarray):
            return [clean(v) for v in x.tolist()]
        if isinstance(x, list):
            return [clean(v) for v in x]
        if isinstance(x, float | np.floating):
            return float(x) if math.isfinite(float(x)) else None
        return x

    return {
        "game": "masking", "why": WHY_MASKING_ONLY, "t_star": ts,
        "step": step.item() if hasattr(step, "item") else step, "living": n, "k_del": k_del, "k_drop": k_drop,
        "orderings": int(orderings), "seed": int(seed), "baseline": label, "f": clean(fz),
        "ranking": "φ at t* (descending), Aumann–Shapley",
        "aumann_shapley": {"deletion_auc": clean(ours["deletion_auc"]), "drop_at_k": clean(ours["drop_at_k"]),
                           "relative_drop": clean(ours["curve"]), "f_k": clean(curve_ours),
                           "deleted": [_plain(panel.agent_ids[living[i]]) for i in order[:k_del]]},
        "random": {"deletion_auc": clean(rnd["deletion_auc"]), "drop_at_k": clean(rnd["drop_at_k"]),
                   "relative_drop": clean(rnd["curve"])},
    }


def deletion_rows(study: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of ``deletion_masking.csv``: k, the relative drop of the Aumann–Shapley ordering and of random."""
    ours = study["aumann_shapley"]["relative_drop"]
    rnd = study["random"]["relative_drop"]
    fk = study["aumann_shapley"]["f_k"]
    return [{"k": k + 1, "f_k": fk[k], "relative_drop": ours[k], "relative_drop_random": rnd[k]}
            for k in range(len(ours))]


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


__all__ = ["WHY_MASKING_ONLY", "deletion_rows", "masking_deletion"]
