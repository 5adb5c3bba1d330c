"""The row registry: every built-in row is one registered Row; adding one changes the table, not the driver."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aumann import scenarios
from aumann.errors import ConfigError
from aumann.studies.faithfulness import METHODS, run_study
from aumann.studies.rows import (
    REFERENCE,
    REFERENCE_CV,
    Row,
    RowOutput,
    get_row,
    reference_row,
    register_row,
    row_names,
    rows,
    unregister_row,
)
from aumann.studies.tables import faithfulness_table

STUDY = {"permutations": 20, "random_orderings": 2, "path_orders": 2, "quadrature_steps": 8, "ablations": False}


def test_every_built_in_row_is_a_registered_row_in_table_order():
    assert METHODS == ("aumann_shapley", "sampled_shapley", "sampled_shapley_cv", "leave_one_out",
                       "action_aumann_shapley", "sampled_shapley_resimulation", "llm_judge", "random")
    assert row_names()[: len(METHODS) - 1] == METHODS[:-1] and row_names()[-1] == "random"
    assert all(isinstance(r, Row) for r in rows())
    assert get_row("action_aumann_shapley").game == "resimulation" and get_row("aumann_shapley").game == "masking"
    assert get_row("sampled_shapley_resimulation").needs == (REFERENCE,)
    with pytest.raises(ConfigError, match="no row named"):
        get_row("nope")


def test_a_row_needs_what_it_reads_to_be_registered_before_it():
    class Late(Row):
        name = "late_row"
        needs = ("not_a_row",)

    with pytest.raises(ConfigError, match="not_a_row"):
        register_row(Late)
    with pytest.raises(ConfigError):
        register_row(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="reference"):
        unregister_row(REFERENCE)
    assert "late_row" not in row_names()


def test_a_registered_row_gets_deletion_agreement_and_a_table_row_from_the_study():
    class Negated(Row):  # the reference's ranking reversed: deletion must get worse, τ = −1
        name = "negated_reference"
        needs = (REFERENCE, REFERENCE_CV)  # whichever of the two study.reference_estimator names

        def compute(self, ctx):
            return RowOutput(phi=-ctx.outputs[reference_row(ctx.config)].phi, cost={"evaluations": 0})

    register_row(Negated)
    try:
        assert row_names()[-2:] == ("negated_reference", "random")
        sc = scenarios.get("midscale-social")
        cfg = sc.load_config(agents=20, steps=6, runs=1, study=STUDY)
        result = run_study(sc, cfg)
    finally:
        unregister_row("negated_reference")
    rec = result.records[0]
    assert list(rec["methods"])[-2:] == ["negated_reference", "random"]
    assert rec["cost"]["negated_reference"] == {"evaluations": 0}
    table = {r["method"]: r for r in faithfulness_table(result)}
    assert table["negated_reference"]["kendall_tau"] == pytest.approx(-1.0)
    ref = reference_row(cfg)
    assert ref == REFERENCE_CV  # the default reference (issue 25)
    assert table["negated_reference"]["deletion_auc"] < table[ref]["deletion_auc"]
    assert math.isnan(table[ref]["kendall_tau"]) and not math.isnan(table[REFERENCE]["kendall_tau"])
    arrays = result.arrays[0]
    np.testing.assert_array_equal(arrays["phi_negated_reference"], -arrays[f"phi_{ref}"])
    assert "curve_masking_negated_reference" in arrays


def test_why_deletion_forks_were_evaluated_in_full_reaches_the_record_manifest_and_report(tmp_path, monkeypatch):
    """DeletionOracle.pooled_fallback (a user's pooled form not used: every fork evaluated in full) was only on the
    oracle object: the run record, manifest.json and the report did not say why a study's forks cost N each."""
    import json

    from aumann.evaluation.deletion import DeletionOracle
    from aumann.studies.report import write_outputs

    why = "the pooled form of 'mine' loses the precision of f between the step and its baseline (test)"
    monkeypatch.setattr(DeletionOracle, "pooled_fallback", property(lambda self: why))
    sc = scenarios.get("midscale-social")
    cfg = sc.load_config(agents=20, steps=6, runs=1, study=STUDY)
    result = run_study(sc, cfg, out_dir=tmp_path)
    assert result.records[0]["pooled_fallback"] == why
    write_outputs(result, tmp_path, command="aumann run midscale-social", seconds=0.0, plots=False)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["pooled_fallbacks"] == [{"run": 0, "reason": why}]
    assert f"run 0: {why}" in (tmp_path / "report.md").read_text()


def test_a_control_variate_row_without_its_control_says_why_in_record_manifest_and_report(tmp_path, monkeypatch):
    """sampled_shapley_cv on an indicator without a gradient is plain sampling with the reason in the attribution's
    provenance (control_fallback); the study carries that reason to the run record, manifest.json and the report."""
    import json

    import aumann.attribution.control_variate as cvmod
    from aumann.studies.report import write_outputs

    why = "indicator 'mine' has no gradient on the path (test)"
    real = cvmod.describe_control
    monkeypatch.setattr(cvmod, "describe_control", lambda c: {**real(c), "control_fallback": why})
    sc = scenarios.get("midscale-social")
    cfg = sc.load_config(agents=20, steps=6, runs=1, study=STUDY)
    result = run_study(sc, cfg, out_dir=tmp_path)
    assert result.records[0]["sampled_shapley_cv"]["control_fallback"] == why
    write_outputs(result, tmp_path, command="aumann run midscale-social", seconds=0.0, plots=False)
    assert json.loads((tmp_path / "manifest.json").read_text())["control_fallbacks"] == [{"run": 0, "reason": why}]
    assert why in (tmp_path / "report.md").read_text()


def _misbehaving(n, how):
    if how == "raises":
        raise ZeroDivisionError("user row divides by zero")
    if how == "nan":
        phi = np.ones(n)
        phi[2] = np.nan
        return RowOutput(phi=phi)
    if how == "one_too_long":  # ranked, deleted and then blamed on the scenario's baseline_action (IndexError)
        return RowOutput(phi=np.arange(n + 1, dtype=float))
    if how == "bare_array":
        return np.arange(n, dtype=float)
    if how == "short_stderr":
        return RowOutput(phi=np.arange(n, dtype=float), stderr=np.ones(2))
    return RowOutput(phi=None, order=np.array([0, 0, n]))  # "bad_order": repeats and out of range


@pytest.mark.parametrize(("how", "says"), [
    ("raises", "raised ZeroDivisionError: user row divides by zero"),
    ("nan", r"RowOutput.phi holds 1 NaN/inf value\(s\) \(first at agent position 2\)"),
    ("one_too_long", r"RowOutput.phi has shape \(21,\); .* shape \(20,\)"),
    ("bare_array", "compute\\(ctx\\) returned ndarray; it must return a RowOutput"),
    ("short_stderr", r"RowOutput.stderr has shape \(2,\)"),
    ("bad_order", r"RowOutput.order must be distinct integer agent positions in \[0, 20\)"),
])
def test_a_user_row_that_raises_or_returns_misshapen_values_is_a_study_error_naming_it(how, says):
    from aumann.errors import StudyError

    class Misbehaving(Row):
        name = "misbehaving_row"

        def compute(self, ctx):
            return _misbehaving(ctx.n, how)

    register_row(Misbehaving)
    try:
        sc = scenarios.get("midscale-social")
        cfg = sc.load_config(agents=20, steps=6, runs=1, study=STUDY)
        with pytest.raises(StudyError, match=r"row 'misbehaving_row' \(run 0\)") as info:
            run_study(sc, cfg)
    finally:
        unregister_row("misbehaving_row")
    assert info.match(says)
    if how == "raises":  # the user's exception stays chained (aumann --debug shows where it came from)
        assert isinstance(info.value.__cause__, ZeroDivisionError)
