"""``study.reference_estimator``: which sampled-Shapley row the others' τ / Jaccard and the noise ceiling are
measured against (issue 25: the control-variate row by default), and the report names it."""

from __future__ import annotations

import numpy as np
import pytest

from aumann.attribution.metrics import kendall_tau, topk_jaccard
from aumann.errors import ConfigError
from aumann.studies.faithfulness import run_study
from aumann.studies.report import write_outputs
from aumann.studies.rows import REFERENCE, REFERENCE_CV, reference_row
from tests.tiny import tiny_config

STUDY = {"permutations": 40, "random_orderings": 2, "quadrature_steps": 16, "ablations": False, "judge": "off"}


def test_reference_row_follows_the_config():
    _, cfg = tiny_config("midscale-social", agents=10, steps=4, study=STUDY)
    assert cfg.study.reference_estimator == "sampled_shapley_cv" and reference_row(cfg) == REFERENCE_CV
    _, cfg = tiny_config("midscale-social", agents=10, steps=4, study={**STUDY, "reference_estimator": REFERENCE})
    assert reference_row(cfg) == REFERENCE
    # the re-simulation game keeps plain sampling as its reference (the CV row there is a 16-fork step-map estimate)
    _, cfg = tiny_config("midscale-social", agents=10, steps=4, study={**STUDY, "reference_game": "resimulation"})
    assert reference_row(cfg) == REFERENCE
    with pytest.raises(ConfigError, match="reference_estimator"):
        tiny_config("midscale-social", study={"reference_estimator": "leave_one_out"})


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    out = {}
    for est in (REFERENCE_CV, REFERENCE):
        sc, cfg = tiny_config("midscale-social", agents=10, steps=4, study={**STUDY, "reference_estimator": est})
        d = tmp_path_factory.mktemp(est)
        res = run_study(sc, cfg, out_dir=d)
        write_outputs(res, d, command="test", seconds=0.0, plots=False)
        out[est] = (cfg, d, res)
    return out


@pytest.mark.parametrize("est", [REFERENCE_CV, REFERENCE])
def test_agreement_and_ceiling_are_measured_against_the_configured_reference(both, est):
    _cfg, d, res = both[est]
    rec, arr = res.records[0], res.arrays[0]
    other = REFERENCE if est == REFERENCE_CV else REFERENCE_CV
    ref, phi_other = arr[f"phi_{est}"], arr[f"phi_{other}"]
    assert rec["methods"][est]["kendall_tau"] is None and rec["methods"][est]["jaccard_top10"] is None  # NaN → null
    assert rec["methods"][other]["kendall_tau"] == pytest.approx(kendall_tau(phi_other, ref))
    assert rec["methods"]["aumann_shapley"]["kendall_tau"] == pytest.approx(kendall_tau(arr["phi_aumann_shapley"], ref))
    assert rec["methods"]["leave_one_out"]["jaccard_top10"] == pytest.approx(
        topk_jaccard(arr["phi_leave_one_out"], ref, rec["top_k"]))
    # the noise ceiling is a second seed of the reference itself
    assert rec["ceiling"]["kendall_tau"] == pytest.approx(kendall_tau(arr["phi_ceiling"], ref))
    assert (d / "attributions" / f"run-000-{est}_ceiling.npz").is_file()
    assert not (d / "attributions" / f"run-000-{other}_ceiling.npz").exists()
    assert rec["reference"]["method"] == est and rec["reference"]["game"] == "masking"
    from aumann.attribution import Attribution

    se = np.asarray(Attribution.load(d / "attributions" / f"run-000-{est}.npz").stderr)[0]
    assert rec["reference"]["median_stderr"] == pytest.approx(float(np.median(se)))


def test_only_the_reference_changes(both):
    """Both rows' φ are the same draws either way (their streams do not depend on which is the reference)."""
    a, b = both[REFERENCE_CV][2].arrays[0], both[REFERENCE][2].arrays[0]
    for m in (REFERENCE, REFERENCE_CV, "aumann_shapley", "leave_one_out"):
        np.testing.assert_array_equal(a[f"phi_{m}"], b[f"phi_{m}"])
    assert not np.array_equal(a["phi_ceiling"], b["phi_ceiling"])


@pytest.mark.parametrize("est", [REFERENCE_CV, REFERENCE])
def test_the_report_names_the_reference_and_its_stderr(both, est):
    _cfg, d, _res = both[est]
    md = (d / "report.md").read_text(encoding="utf-8")
    html = (d / "report.html").read_text(encoding="utf-8")
    assert f"reference: {est}" in md and f"Agreement with sampled Shapley (reference: {est})" in html
    assert f"Agreement with sampled Shapley (reference: {est})" in md
    assert f"noise ceiling (two runs of {est})" in md
    assert "median standard error" in md
    other = REFERENCE if est == REFERENCE_CV else REFERENCE_CV
    assert f"(reference: {other})" not in md and f"reference: {other}:" not in md
    assert f"{STUDY['permutations']} permutations, masking game, median standard error" in md


def test_cv_permutations_sets_the_control_variate_row_and_its_ceiling(tmp_path):
    """``study.cv_permutations`` is what the CV row (and, as the reference, its ceiling twin) runs; the plain
    row keeps ``permutations``; the record and the report's reference line say the count actually used."""
    sc, cfg = tiny_config("midscale-social", agents=10, steps=4, study={**STUDY, "cv_permutations": 12})
    res = run_study(sc, cfg, out_dir=tmp_path)
    write_outputs(res, tmp_path, command="test", seconds=0.0, plots=False)
    rec = res.records[0]
    assert rec["sampled_shapley_cv"]["permutations"] == 12
    assert rec["reference"]["permutations"] == rec["reference"]["ceiling_permutations"] == 12
    from aumann.attribution import Attribution

    cv = Attribution.load(tmp_path / "attributions" / "run-000-sampled_shapley_cv.npz")
    ceil = Attribution.load(tmp_path / "attributions" / "run-000-sampled_shapley_cv_ceiling.npz")
    plain = Attribution.load(tmp_path / "attributions" / f"run-000-{REFERENCE}.npz")
    assert cv.provenance["per_step"]["permutations"] == ceil.provenance["per_step"]["permutations"] == 12
    assert plain.provenance["per_step"]["permutations"] == STUDY["permutations"]
    assert "sampled_shapley_cv: sampled Shapley with the Aumann–Shapley control variate, 12 permutations" in (
        tmp_path / "report.md").read_text(encoding="utf-8")


def test_cv_permutations_enters_the_resume_digest_only_when_set():
    """Unset, ``study.cv_permutations`` is what every run before it computed: run directories written before
    the key existed keep their digest (and resume); set, it changes what the CV row computes."""
    import hashlib
    import json

    from aumann.studies.faithfulness import config_digest

    sc, cfg = tiny_config("midscale-social", agents=10, steps=4, study=STUDY)
    what = cfg.model_dump(mode="json", exclude={"runs": True, "step_timeout": True, "execution": True,
                                                "study": {"strict": True, "cv_permutations": True}})
    before = hashlib.sha256(json.dumps({"scenario": sc.name, "backend": "offline", "config": what},
                                       sort_keys=True).encode()).hexdigest()[:16]
    assert config_digest(sc, cfg, "offline") == before
    _, cfg12 = tiny_config("midscale-social", agents=10, steps=4, study={**STUDY, "cv_permutations": 12})
    assert config_digest(sc, cfg12, "offline") != before


@pytest.mark.parametrize("study,key", [({"permutations": 3}, "study.permutations"),
                                       ({"permutations": 6, "antithetic": True}, "study.permutations"),
                                       ({"permutations": 40, "cv_permutations": 2}, "study.cv_permutations"),
                                       ({"permutations": 40, "ceiling_permutations": 3}, "study.ceiling_permutations")])
def test_too_few_permutations_for_the_control_variate_are_refused_by_the_config(study, key):
    """The control-variate row needs 4 units (permutations, or antithetic pairs). ``--permutations 3`` passed the
    config (≥ 2) and the study stopped at stage 4, after simulating, with the row's MethodError; now the config
    refuses it naming the key, before anything runs."""
    from aumann.attribution.control_variate import MIN_UNITS
    from aumann.scenarios.base import CV_MIN_UNITS

    assert CV_MIN_UNITS == MIN_UNITS  # one rule, stated twice: the config may not import the estimator
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        tiny_config("midscale-social", agents=10, steps=4, study={**STUDY, **study})
    # where the count is fine for the row that uses it, it stays accepted
    tiny_config("midscale-social", agents=10, steps=4, study={**STUDY, "permutations": 4})
    tiny_config("midscale-social", agents=10, steps=4, study={**STUDY, "permutations": 7, "antithetic": True})
    tiny_config("midscale-social", agents=10, steps=4, study={**STUDY, "permutations": 3, "cv_permutations": 8})
    tiny_config("midscale-social", agents=10, steps=4,  # plain reference: its ceiling is plain sampling's
                study={**STUDY, "reference_estimator": REFERENCE, "ceiling_permutations": 3})


def test_too_few_permutations_for_the_step_map_control_variate_fail_before_any_run(tmp_path):
    """On the re-simulation game the control-variate row of a scenario with a step map runs min(16, m) fork
    permutations and needs 4: with m = 3 the study stopped with the estimator's MethodError after simulating and
    after the plain reference's forks; now run_study refuses it first, naming the key, and writes no run."""
    sc, cfg = tiny_config("midscale-social", agents=6, steps=3,
                          study={**STUDY, "permutations": 3, "reference_game": "resimulation"})
    assert sc.step_map is not None
    with pytest.raises(ConfigError, match=r"study\.permutations .* = 3: on the re-simulation game"):
        run_study(sc, cfg, out_dir=tmp_path)
    assert not list(tmp_path.rglob("*.npz")) and not list(tmp_path.rglob("*.json"))


def test_the_noise_ceiling_is_the_reference_estimator_paired_as_the_reference(tmp_path):
    """``antithetic = true`` with an odd ``ceiling_permutations``: the control-variate reference ran m = 40 as 20
    antithetic pairs and its ceiling (39) unpaired — a second run of another estimator, not a second seed of the
    reference; and the plain row, not the reference here, dropped its pairs for the ceiling count it does not run.
    Now a row pairs only when every count it runs is even."""
    from aumann.attribution import Attribution

    sc, cfg = tiny_config("midscale-social", agents=10, steps=4,
                          study={**STUDY, "antithetic": True, "ceiling_permutations": 39})
    run_study(sc, cfg, out_dir=tmp_path)
    prov = {name: Attribution.load(tmp_path / "attributions" / f"run-000-{name}.npz").provenance
            for name in (REFERENCE_CV, f"{REFERENCE_CV}_ceiling", REFERENCE)}
    assert prov[REFERENCE_CV]["antithetic"] == prov[f"{REFERENCE_CV}_ceiling"]["antithetic"] is False
    assert prov[f"{REFERENCE_CV}_ceiling"]["permutations"] == 39
    assert prov[REFERENCE]["antithetic"] is True  # 40 permutations, and no ceiling of its own to match


def test_two_permutations_with_antithetic_run_unpaired(tmp_path):
    """``permutations = 2`` with ``antithetic = true`` (and ``cv_permutations = 8`` for the control-variate row) is
    a valid config; the plain row made it one antithetic pair, which has no standard error, and its MethodError
    stopped the study after the simulations. Two permutations now run unpaired."""
    from aumann.attribution import Attribution

    sc, cfg = tiny_config("midscale-social", agents=10, steps=4,
                          study={**STUDY, "permutations": 2, "antithetic": True, "cv_permutations": 8})
    run_study(sc, cfg, out_dir=tmp_path)
    plain = Attribution.load(tmp_path / "attributions" / f"run-000-{REFERENCE}.npz").provenance
    cv = Attribution.load(tmp_path / "attributions" / f"run-000-{REFERENCE_CV}.npz").provenance
    assert (plain["permutations"], plain["antithetic"]) == (2, False)
    assert (cv["permutations"], cv["antithetic"]) == (8, True)
