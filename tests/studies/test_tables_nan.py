"""A metric that was NaN reaches the tables as ``None`` (records are JSON, which has no NaN): the
tables treat it as missing instead of failing."""

from __future__ import annotations

import math

from aumann.studies.faithfulness import METHODS, StudyResult
from aumann.studies.tables import extended_table, faithfulness_table


def _record(tau):
    cols = {"deletion_auc": 0.5, "drop_at_5": 10.0, "kendall_tau": tau, "jaccard_top10": 1.0,
            "deletion_auc_original": 0.4, "drop_at_5_original": 8.0, "deletion_auc_magnitude": None,
            "drop_at_5_magnitude": 9.0}
    return {"methods": {m: dict(cols) for m in METHODS}, "ceiling": {"kendall_tau": tau, "jaccard_top10": 1.0}}


def test_none_metrics_are_missing_values():
    result = StudyResult(scenario="s", records=[_record(None), _record(0.8)], arrays=[], out_dir=None)
    rows = {r["method"]: r for r in faithfulness_table(result)}
    assert rows["aumann_shapley"]["kendall_tau"] == 0.8 and rows["aumann_shapley"]["kendall_tau_ceiling"] == 0.8
    ext = {r["method"]: r for r in extended_table(result)}
    assert math.isnan(ext["random"]["deletion_auc_magnitude"]) and ext["random"]["drop_at_5_magnitude"] == 9.0
    none = StudyResult(scenario="s", records=[_record(None)], arrays=[], out_dir=None)
    assert math.isnan(faithfulness_table(none)[0]["kendall_tau_ceiling"])
