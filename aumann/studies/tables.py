"""The faithfulness study's tables, built from the finished runs' records (nothing is recomputed).

* :func:`faithfulness_table` — the headline table (``faithfulness.csv``): per method, mean and std over
  runs of ``deletion_auc`` = (1/K_del) Σ_{k=1}^{K_del} (f − f_k)/f, ``drop_at_5`` = 100 · (f − f_5)/f
  (f_k: the indicator after the top-k agents take the baseline action and t* is re-simulated; agents
  ranked by signed φ), Kendall τ and top-10 Jaccard against sampled Shapley, and the noise ceiling;
* :func:`extended_table` — the original indicator's deletion metrics and the |φ| ordering beside them;
* :func:`path_table`, :func:`pair_table` — the ablation tables.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from aumann.studies.faithfulness import FAITHFULNESS_COLUMNS, METHODS, StudyResult


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
    """Rows ``aumann_shapley``, ``sampled_shapley``, ``leave_one_out``, ``random``: mean and std over runs
    (the standard columns, then :func:`extra_columns`)."""
    recs = result.records
    ceil_tau = _nanmean([r["ceiling"]["kendall_tau"] for r in recs])
    ceil_j = _nanmean([r["ceiling"]["jaccard_top10"] for r in recs])
    extra = extra_columns(result)
    rows = []
    for m in METHODS:
        row: dict[str, Any] = {"scenario": result.scenario, "method": m}
        for col in ("deletion_auc", "drop_at_5", "kendall_tau", "jaccard_top10"):
            row[col], row[f"{col}_std"] = _mean_std([r["methods"][m][col] for r in recs])
        row["kendall_tau_ceiling"] = ceil_tau
        row["jaccard_ceiling"] = ceil_j
        if "deletion_auc_logk" in extra:
            row["deletion_auc_logk"], row["deletion_auc_logk_std"] = _mean_std(
                [r["methods"][m]["deletion_auc_logk"] for r in recs])
        if "policy" in extra:
            row["policy"] = "; ".join(sorted({str(r["analysis"].get("policy")) for r in recs}))
        rows.append({k: row[k] for k in (*FAITHFULNESS_COLUMNS, *extra)})
    return rows


def extended_table(result: StudyResult) -> list[dict[str, Any]]:
    """Per method: the original indicator's deletion metrics, the magnitude ordering, the masking oracle
    and (when computed) the log-k grid, mean ± std over runs (runs resumed from before a column existed
    drop that column)."""
    rows = []
    cols = ["deletion_auc", "drop_at_5", "deletion_auc_original", "drop_at_5_original", "deletion_auc_magnitude",
            "drop_at_5_magnitude", "deletion_auc_masking", "drop_at_5_masking", "deletion_auc_logk",
            "deletion_auc_logk_masking"]
    cols = [c for c in cols if all(c in r["methods"][m] for r in result.records for m in METHODS)]
    for m in METHODS:
        row: dict[str, Any] = {"scenario": result.scenario, "method": m}
        for col in cols:
            row[col], row[f"{col}_std"] = _mean_std([r["methods"][m][col] for r in result.records])
        rows.append(row)
    return rows


def _summ(vals: list[float]) -> tuple[float, float]:
    arr = _floats(vals)
    arr = arr[np.isfinite(arr)]
    return (float(arr.mean()), float(arr.min())) if arr.size else (float("nan"), float("nan"))


def path_table(scenario: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Table path-ablation row: Kendall τ (mean, min over orders × runs) and mean top-k overlap."""
    recs = [r["ablations"]["path"] for r in records if "ablations" in r]
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
            mean, mn = _summ([r[pair][m] for r in recs])
            row[m] = mean
            if m == "kendall_tau":
                row["kendall_tau_min"] = mn
        rows.append(row)
    return rows


__all__ = ["extended_table", "extra_columns", "faithfulness_table", "pair_table", "path_table"]
