"""The faithfulness study's tables, built from the finished runs' records (nothing is recomputed).

* :func:`faithfulness_table` — the headline table (``faithfulness.csv``): per method, mean and std over
  runs of ``deletion_auc`` = (1/K_del) Σ_{k=1}^{K_del} (f − f_k)/f, ``drop_at_5`` = 100 · (f − f_5)/f
  (f_k: the indicator after the top-k agents take the baseline action and t* is re-simulated; agents
  ranked by signed φ), the same two under the masking oracle (``deletion_auc_masking``,
  ``drop_at_5_masking``: the top-k agents' feature rows set to their baseline rows, nothing
  re-simulated), Kendall τ and top-10 Jaccard against sampled Shapley, and the noise ceiling;
* :func:`extended_table` — the original indicator's deletion metrics and the |φ| ordering beside them;
* :func:`action_table` — per run: action attribution's efficiency against the forks, the G-vs-fork
  gaps and its cost next to sampled Shapley's on the re-simulation game;
* :func:`resimulation_table` — agreement with sampled Shapley on the re-simulation game (when run);
* :func:`judge_table` — the judge's top-k overlap with each method (when run);
* :func:`path_table`, :func:`pair_table` — the ablation tables.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from aumann.studies.rundir import StudyResult

FAITHFULNESS_COLUMNS = ("scenario", "method", "deletion_auc", "drop_at_5", "deletion_auc_masking", "drop_at_5_masking",
                        "kendall_tau", "jaccard_top10", "deletion_auc_std", "drop_at_5_std",
                        "deletion_auc_masking_std", "drop_at_5_masking_std", "kendall_tau_std", "jaccard_top10_std",
                        "kendall_tau_ceiling", "jaccard_ceiling")
"""The columns of ``faithfulness.csv`` (then :func:`extra_columns`)."""


def methods_of(result: StudyResult) -> list[str]:
    """The rows the runs have, in table order (the order the study scored them: the row registry's)."""
    out: list[str] = []
    for r in result.records:  # merged: a row only some runs have keeps its place between its neighbours
        prev = None
        for m in r["methods"]:
            if m not in out:
                out.insert(out.index(prev) + 1 if prev is not None else 0, m)
            prev = m
    return out


def _stats(vals: list[Any]) -> tuple[float, float]:
    arr = np.array([math.nan if v is None else v for v in vals], dtype=np.float64)
    ok = arr[np.isfinite(arr)]
    return (float(ok.mean()), float(ok.std())) if ok.size else (math.nan, math.nan)


def _floats(vals: list[Any]) -> np.ndarray:
    """Record values as floats: a metric that was NaN is ``None`` in a record (JSON has no NaN)."""
    return np.array([math.nan if v is None else v for v in vals], dtype=np.float64)


def _nanmean(vals: list[Any]) -> float:
    arr = _floats(vals)
    arr = arr[np.isfinite(arr)]
    return float(arr.mean()) if arr.size else math.nan


def _mean_std(vals: list[Any]) -> tuple[float, float]:
    arr = np.array([math.nan if v is None else v for v in vals], dtype=np.float64)
    ok = arr[np.isfinite(arr)]
    return (float(ok.mean()), float(ok.std())) if ok.size else (math.nan, math.nan)


def extra_columns(result: StudyResult) -> tuple[str, ...]:
    """Columns after the standard ones: ``deletion_auc_logk`` (+ ``_std``) when the study deleted along the
    log-k grid, and ``policy`` when the scenario labels its decision policy (e.g. "offline policy")."""
    recs = result.records
    cols: tuple[str, ...] = ()
    if recs and all("deletion_auc_logk" in r["methods"]["random"] for r in recs):
        cols += ("deletion_auc_logk", "deletion_auc_logk_std")
    if recs and any(r.get("analysis", {}).get("policy") for r in recs):
        cols += ("policy",)
    return cols


def faithfulness_table(result: StudyResult) -> list[dict[str, Any]]:
    """One row per method the runs have (:func:`methods_of` order): mean and std over runs (the standard
    columns, then :func:`extra_columns`)."""
    recs = result.records
    ceil_tau = _nanmean([r["ceiling"]["kendall_tau"] for r in recs])
    ceil_j = _nanmean([r["ceiling"]["jaccard_top10"] for r in recs])
    extra = extra_columns(result)
    rows = []
    for m in methods_of(result):
        row: dict[str, Any] = {"scenario": result.scenario, "method": m}
        for col in ("deletion_auc", "drop_at_5", "deletion_auc_masking", "drop_at_5_masking", "kendall_tau",
                    "jaccard_top10"):
            row[col], row[f"{col}_std"] = _stats([r["methods"][m].get(col) for r in recs if m in r["methods"]])
        row["kendall_tau_ceiling"] = ceil_tau
        row["jaccard_ceiling"] = ceil_j
        if "deletion_auc_logk" in extra:
            row["deletion_auc_logk"], row["deletion_auc_logk_std"] = _mean_std(
                [r["methods"][m].get("deletion_auc_logk") for r in recs if m in r["methods"]])
        if "policy" in extra:
            row["policy"] = "; ".join(sorted({str(r["analysis"].get("policy")) for r in recs}))
        rows.append({k: row[k] for k in (*FAITHFULNESS_COLUMNS, *extra)})
    return rows


EXTENDED_COLUMNS = ("deletion_auc", "drop_at_5", "deletion_auc_original", "drop_at_5_original",
                    "deletion_auc_magnitude", "drop_at_5_magnitude", "deletion_auc_masking", "drop_at_5_masking",
                    "deletion_auc_masking_magnitude", "drop_at_5_masking_magnitude", "deletion_auc_logk",
                    "deletion_auc_logk_masking")
"""The extended table's candidate columns (those every run's every row has are written)."""


def extended_table(result: StudyResult) -> list[dict[str, Any]]:
    """Per method: the original indicator's deletion metrics, the magnitude (|φ|) ordering under both
    oracles and (when computed) the log-k grid, mean ± std over runs (NaN where a method has no values
    to order by magnitude, e.g. the judge; runs resumed from before a column existed drop that column)."""
    rows = []
    recs = result.records
    cols = [c for c in EXTENDED_COLUMNS if all(c in r["methods"][m] for r in recs for m in r["methods"])]
    for m in methods_of(result):
        row: dict[str, Any] = {"scenario": result.scenario, "method": m}
        for col in cols:
            row[col], row[f"{col}_std"] = _stats([r["methods"][m].get(col) for r in recs if m in r["methods"]])
        rows.append(row)
    return rows


ACTION_COLUMNS = ("run", "t_star", "delta_v", "sum_phi", "relative_efficiency_gap", "map_efficiency_gap", "fork_gap",
                  "feature_gap", "coalition_gap_max", "coalition_gap_mean", "coalitions", "exact_map", "converged",
                  "grad_evals", "value_evals", "step_evals", "kinks", "panels", "resimulation_shapley_step_evals")
"""The columns of ``action_attribution.csv``: what the config and seed determine. The wall-clock seconds (once the
columns ``seconds`` and ``resimulation_shapley_seconds``) are in ``timings/run-NNN.json`` (``action_aumann_shapley``,
``sampled_shapley_resimulation``) and in the report's "Cost" section: same config and seed, same bytes."""


def action_table(result: StudyResult) -> list[dict[str, Any]]:
    """Per run: ``action_aumann_shapley``'s efficiency against the fork-measured Δv, the G-vs-fork gaps
    (corners, the deletion coalitions), its work (gradient, value and step evaluations), and sampled Shapley's
    forks on the same game (when run). No wall-clock time: the records' seconds live in ``timings/``."""
    rows = []
    for i, r in enumerate(result.records):
        a = r.get("action")
        if not a:
            continue
        gap = a.get("coalition_gap") or {}
        rr = r.get("cost", {}).get("sampled_shapley_resimulation") or {}
        row = {"run": r.get("run", i), "t_star": r["t_star"],
               **{k: a.get(k) for k in ACTION_COLUMNS if k in a},
               "coalition_gap_max": gap.get("max_rel"), "coalition_gap_mean": gap.get("mean_rel"),
               "coalitions": gap.get("coalitions"),
               "resimulation_shapley_step_evals": rr.get("step_evals")}
        row["exact_map"], row["converged"] = int(bool(a.get("exact_map"))), int(bool(a.get("converged")))
        rows.append({k: (math.nan if row.get(k) is None else row[k]) for k in ACTION_COLUMNS})
    return rows


def resimulation_table(result: StudyResult) -> list[dict[str, Any]]:
    """Agreement of each method with ``sampled_shapley_resimulation`` (Kendall τ, top-k Jaccard; mean
    and std over runs) and that game's noise ceiling (two seeds)."""
    recs = [r["resimulation_reference"] for r in result.records if r.get("resimulation_reference")]
    if not recs:
        return []
    tau_c, j_c = _stats([r["ceiling"]["kendall_tau"] for r in recs])[0], _stats(
        [r["ceiling"]["jaccard_top10"] for r in recs])[0]
    rows = []
    for m in recs[0]["agreement"]:
        row: dict[str, Any] = {"scenario": result.scenario, "method": m}
        for col in ("kendall_tau", "jaccard_top10"):
            row[col], row[f"{col}_std"] = _stats([r["agreement"][m][col] for r in recs if m in r["agreement"]])
        row.update({"kendall_tau_ceiling": tau_c, "jaccard_ceiling": j_c, "permutations": recs[0]["permutations"]})
        rows.append(row)
    return rows


def judge_table(result: StudyResult) -> list[dict[str, Any]]:
    """Top-k overlap |top_k(judge) ∩ top_k(method)| per method (mean and std over runs), with the judge."""
    recs = [r["judge"] for r in result.records if r.get("judge")]
    if not recs:
        return []
    rows = []
    for m in recs[0]["overlap"]:
        mean, std = _stats([r["overlap"][m] for r in recs if m in r["overlap"]])
        rows.append({"scenario": result.scenario, "judge": recs[0]["judge"], "method": m,
                     "top_k": recs[0]["top_k"], "overlap": mean, "overlap_std": std,
                     "candidates": recs[0]["candidates"], "shortlist": recs[0]["shortlist"],
                     "invalid": float(np.mean([r["invalid"] for r in recs])),
                     "filled": float(np.mean([r["filled"] for r in recs]))})
    return rows


def _summ(vals: list[float]) -> tuple[float, float]:
    arr = _floats(vals)
    arr = arr[np.isfinite(arr)]
    return (float(arr.mean()), float(arr.min())) if arr.size else (float("nan"), float("nan"))


def path_table(scenario: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Table path-ablation row: Kendall τ (mean, min over orders × runs) and mean top-k overlap."""
    recs = [r["ablations"]["path"] for r in records if "path" in (r.get("ablations") or {})]
    if not recs:
        return []
    taus = [t for r in recs for t in r["kendall_tau_orders"]]
    ovs = [o for r in recs for o in r["top_overlap_orders"]]
    mean, mn = _summ(taus)
    return [{"scenario": scenario, "kendall_tau_mean": mean, "kendall_tau_min": mn,
             "top_overlap": _nanmean(ovs), "top_k": recs[0]["top_k"],
             "kendall_tau_average_path": _nanmean([r["kendall_tau_average_path"] for r in recs])}]


def pair_table(scenario: str, records: list[dict[str, Any]], which: str) -> list[dict[str, Any]]:
    """Tables f-sensitivity (``which="f_sensitivity"``) and baseline-ablation (``"baseline"``)."""
    recs = [r["ablations"][which] for r in records if "ablations" in r and r["ablations"].get(which)]
    if not recs:
        return []
    rows = []
    for pair in recs[0]:
        metrics = recs[0][pair].keys()
        row: dict[str, Any] = {"scenario": scenario, "pair": pair}
        for m in metrics:
            mean, mn = _summ([r[pair][m] for r in recs if pair in r])
            row[m] = mean
            if m == "kendall_tau":
                row["kendall_tau_min"] = mn
        rows.append(row)
    return rows


__all__ = ["ACTION_COLUMNS", "EXTENDED_COLUMNS", "FAITHFULNESS_COLUMNS", "action_table", "extended_table",
           "extra_columns", "faithfulness_table", "judge_table", "methods_of", "pair_table", "path_table",
           "resimulation_table"]
