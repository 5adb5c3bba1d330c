"""How a row is scored: deletion by its ranking under both oracles, and agreement with the reference.

:func:`score_values` is what a row with values gets by default (:meth:`aumann.studies.rows.Row.score`);
:func:`score_order` scores any one ranking (the judge's), :func:`deletion_metrics` names the metrics of
one or several orderings' deletion summaries (the random orderings'), :func:`logk_metrics` those on the
log-k grid.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from aumann.attribution.metrics import kendall_tau, topk_jaccard
from aumann.evaluation.deletion import deletion_summary
from aumann.scenarios.base import ScenarioConfig
from aumann.studies.context import RunContext

REFERENCE = "sampled_shapley"
"""The plain sampled-Shapley row: always computed, never removable, and the reference on the re-simulation
game or with ``study.reference_estimator = "sampled_shapley"``. Which row the others are measured against
is :func:`reference_row`."""

REFERENCE_CV = "sampled_shapley_cv"
"""The sampled-Shapley row with the Aumann–Shapley control variate: the default reference (issue 25)."""


def reference_row(config: ScenarioConfig) -> str:
    """The row every other row's Kendall τ and top-k Jaccard, and the noise ceiling (a second seed of the same
    estimator), are measured against: ``study.reference_estimator`` on the masking game; plain
    sampled Shapley (:data:`REFERENCE`) on ``study.reference_game = "resimulation"``, where the control-variate
    row is a step-map estimate confirmed by 16 fork permutations, not a long reference (docs/baselines.md)."""
    st = config.study
    if st.reference_game == "masking" and st.reference_estimator == REFERENCE_CV:
        return REFERENCE_CV
    return REFERENCE

#: the per-method metrics of a run record (``rec["methods"][name]``), in order
METRICS = ("deletion_auc", "drop_at_5", "deletion_auc_original", "drop_at_5_original", "deletion_auc_magnitude",
           "drop_at_5_magnitude", "deletion_auc_masking", "drop_at_5_masking", "deletion_auc_masking_magnitude",
           "drop_at_5_masking_magnitude", "kendall_tau", "jaccard_top10", "sum_phi")


def deletion_metrics(res: dict[str, Any], masking: dict[str, Any], res_magnitude: dict[str, Any],
                     masking_magnitude: dict[str, Any]) -> dict[str, float]:
    """The deletion columns of :data:`METRICS` from the deletion summaries
    (:func:`~aumann.evaluation.deletion.deletion_summary`) of the ranking under the re-simulation and masking
    oracles, and of the |φ| ranking under each."""
    return {"deletion_auc": res["deletion_auc"], "drop_at_5": res["drop_at_k"],
            "deletion_auc_original": res["deletion_auc_original"], "drop_at_5_original": res["drop_at_k_original"],
            "deletion_auc_magnitude": res_magnitude["deletion_auc"], "drop_at_5_magnitude": res_magnitude["drop_at_k"],
            "deletion_auc_masking": masking["deletion_auc"], "drop_at_5_masking": masking["drop_at_k"],
            "deletion_auc_masking_magnitude": masking_magnitude["deletion_auc"],
            "drop_at_5_masking_magnitude": masking_magnitude["drop_at_k"]}


def logk_metrics(ctx: RunContext, name: str, res: dict[str, Any], masking: dict[str, Any]) -> dict[str, float]:
    """The log-k grid's deletion AUCs under both oracles (its curves go to ``ctx.arrays``)."""
    ctx.arrays[f"curve_logk_{name}"] = res["curve"]
    ctx.arrays[f"curve_logk_masking_{name}"] = masking["curve"]
    return {"deletion_auc_logk": res["deletion_auc"], "deletion_auc_logk_masking": masking["deletion_auc"]}


def score_order(ctx: RunContext, name: str, order: np.ndarray, magnitude: np.ndarray | None) -> dict[str, float]:
    """Deletion metrics of one ranking (and, when given, of the |φ| ranking) under both oracles; the
    curves go to ``ctx.arrays`` as ``curve[_original|_magnitude|_masking]_<name>``."""
    sizes, f_full = ctx.sizes, ctx.f_full
    by_val = deletion_summary(ctx.oracle, f_full, order, sizes.k_del, sizes.k_drop)
    by_mask = deletion_summary(ctx.masking, f_full, order, sizes.k_del, sizes.k_drop)
    nan = {"deletion_auc": math.nan, "drop_at_k": math.nan}
    by_mag = by_mask_mag = nan
    if magnitude is not None:
        by_mag = deletion_summary(ctx.oracle, f_full, magnitude, sizes.k_del, sizes.k_drop)
        by_mask_mag = deletion_summary(ctx.masking, f_full, magnitude, sizes.k_del, sizes.k_drop)
    ctx.arrays[f"curve_{name}"] = by_val["curve"]
    ctx.arrays[f"curve_original_{name}"] = by_val["curve_original"]
    if magnitude is not None:
        ctx.arrays[f"curve_magnitude_{name}"] = by_mag["curve"]
    ctx.arrays[f"curve_masking_{name}"] = by_mask["curve"]
    return deletion_metrics(by_val, by_mask, by_mag, by_mask_mag)


def score_values(ctx: RunContext, name: str, phi: np.ndarray) -> dict[str, float]:
    """A row with values: deletion by descending φ (and |φ|), Kendall τ and top-k Jaccard against the
    reference, Σφ; the log-k grid when the study deletes along it."""
    depth = ctx.deletion_depth  # the rankings' prefixes the deletions read (no full sort of N)
    order = ctx.orders[name] = ctx.ranked(phi, "value", depth)
    ctx.arrays[f"phi_{name}"] = phi
    metrics = score_order(ctx, name, order, ctx.ranked(phi, "abs", depth))
    reference = reference_row(ctx.config)
    ref = ctx.phi[reference]
    compare = name != reference
    metrics.update({"kendall_tau": ctx.agree(phi, ref, kendall_tau) if compare else math.nan,
                    "jaccard_top10": ctx.agree(phi, ref, topk_jaccard, ctx.sizes.top_k) if compare else math.nan,
                    "sum_phi": float(np.sum(phi))})
    if ctx.grid is not None:
        metrics.update(logk_metrics(ctx, name, deletion_summary(ctx.oracle, ctx.f_full, order, ctx.grid),
                                    deletion_summary(ctx.masking, ctx.f_full, order, ctx.grid)))
    return metrics


__all__ = ["METRICS", "REFERENCE", "REFERENCE_CV", "deletion_metrics", "logk_metrics", "reference_row",
           "score_order", "score_values"]
