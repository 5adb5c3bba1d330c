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


def test_an_undefined_noise_ceiling_prints_a_dash_not_nan():
    """`aumann run` of docs/examples/boltzmann_wealth.py at 6 agents printed "Noise ceiling (two runs of the
    reference, different seeds): τ = nan, J = nan." while the table above it, the CSV and the report say "–"."""
    from aumann.studies.report import headline_markdown

    none = StudyResult(scenario="s", records=[_record(None)], arrays=[], out_dir=None)
    text = headline_markdown(faithfulness_table(none))
    assert "τ = –, J = 1.000." in text and "nan" not in text
    some = StudyResult(scenario="s", records=[_record(0.8)], arrays=[], out_dir=None)
    assert "τ = 0.800, J = 1.000." in headline_markdown(faithfulness_table(some))


def test_a_constant_indicator_leaves_the_top_k_jaccard_blank_like_kendall_tau(tmp_path):
    """A constant indicator (Δv = 0): every baseline's φ is 0, so no attribution has a top k. The baseline-ablation
    table reported Jaccard 1.0 between every pair (the same tie-break, not agreement) beside a blank Kendall τ;
    both are now missing: an empty CSV cell, ``null`` in JSON."""
    import json

    import numpy as np

    from aumann.attribution import Panel
    from aumann.evaluation.ablations import baseline_ablation
    from aumann.io import dumps_json, write_csv
    from aumann.studies.tables import pair_table

    panel = Panel(np.random.default_rng(0).uniform(1, 2, size=(2, 8, 2)))
    pairs = baseline_ablation(lambda z: 0.0 * z[..., 0].sum(-1), panel, 1, np.full((8, 2), 0.5), 8)
    assert pairs and all(math.isnan(p["jaccard_top10"]) and math.isnan(p["kendall_tau"]) for p in pairs.values())
    record = json.loads(dumps_json({"ablations": {"baseline": pairs}}))
    saved = record["ablations"]["baseline"].values()
    assert all(p["jaccard_top10"] is None and p["jaccard_top100"] is None for p in saved)
    rows = pair_table("s", [record], "baseline")
    text = write_csv(tmp_path / "baseline_ablation.csv", rows).read_text().splitlines()
    head = text[0].split(",")
    for line in text[1:]:
        cells = dict(zip(head, line.split(","), strict=True))
        assert cells["jaccard_top10"] == cells["jaccard_top100"] == cells["kendall_tau"] == ""


def test_the_console_headline_shows_an_undefined_noise_ceiling_as_a_dash_like_its_table_cells():
    """mesa-examples' termites scored by the share of termites carrying a chip (0 at every capture: a chip is put
    down within the step): every φ ties, so Kendall τ and the top-k Jaccard are undefined. The headline table that
    ``aumann run`` prints showed "–" in those cells but ended with "Noise ceiling ...: τ = nan, J = nan."."""
    from aumann.studies.report import headline_markdown

    undefined = StudyResult(scenario="s", records=[_record(None)], arrays=[], out_dir=None)
    text = headline_markdown(faithfulness_table(undefined))
    assert "nan" not in text.lower()
    assert "τ = –, J = 1.000." in text
    defined = headline_markdown(faithfulness_table(StudyResult(scenario="s", records=[_record(0.8)], arrays=[],
                                                               out_dir=None)))
    assert "τ = 0.800, J = 1.000." in defined
