"""The faithfulness study end to end on tiny configs: tables, exact columns, resume, ablations."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from aumann.attribution.indicators import evaluate
from aumann.attribution.metrics import rank_agents, relative_drop
from aumann.evaluation.ablations import vertex_path_attribution
from aumann.studies.faithfulness import FAITHFULNESS_COLUMNS, METHODS, StudySizes, run_study
from aumann.studies.report import write_outputs
from tests.tiny import tiny_config


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    sc, cfg = tiny_config("social-llm", agents=8, steps=6, runs=2)
    res = run_study(sc, cfg, out_dir=out)
    write_outputs(res, out, command="test", seconds=0.0, plots=True)
    return sc, cfg, out, res


def test_faithfulness_csv_has_the_exact_columns_and_rows(study_dir):
    _, _, out, _res = study_dir
    with open(out / "faithfulness.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0].keys()) == FAITHFULNESS_COLUMNS
    # resimulation reference off by default; social-llm has a step map; the judge is the offline stand-in
    assert [r["method"] for r in rows] == [m for m in METHODS if m != "sampled_shapley_resimulation"]
    assert all(r["scenario"] == "social-llm" for r in rows)
    ours = rows[0]
    assert -1 <= float(ours["kendall_tau"]) <= 1 and 0 <= float(ours["jaccard_top10"]) <= 1
    # the reference (default: the control-variate row) has no agreement with itself; plain sampling now has one
    assert rows[2]["method"] == "sampled_shapley_cv" and rows[2]["kendall_tau"] == ""
    assert rows[1]["method"] == "sampled_shapley" and -1 <= float(rows[1]["kendall_tau"]) <= 1
    for name in ("report.md", "macro_curve.png", "attribution_heatmap.png", "deletion_curves.png",
                 "path_ablation.csv", "f_sensitivity.csv", "baseline_ablation.csv", "faithfulness_extended.csv",
                 "attributions/run-001-aumann_shapley.npz", "attributions/run-001-leave_one_out.npz"):
        assert (out / name).is_file(), name
    assert (out / "runs" / "run-000.json").is_file() and (out / "runs" / "run-001.npz").is_file()


def test_run_records_are_consistent(study_dir):
    _sc, cfg, _, res = study_dir
    sizes = StudySizes.of(cfg)
    assert (sizes.k_del, sizes.top_k, sizes.k_drop) == (4, 4, 4)
    for rec, arr in zip(res.records, res.arrays):
        ts = rec["t_star"]
        assert ts >= 3 and arr["f_values"][ts] == arr["f_values"][3:].max()
        # Aumann–Shapley is efficient: Σ_i φ_i = f(z_t*) − f(z⁰)
        assert rec["efficiency_gap"] < 1e-5 * abs(rec["delta_v"])
        assert rec["methods"]["aumann_shapley"]["sum_phi"] == pytest.approx(rec["delta_v"], rel=1e-5)
        assert rec["methods"]["sampled_shapley"]["sum_phi"] == pytest.approx(rec["delta_v"], abs=1e-8)
        for m in rec["methods"]:
            assert len(arr[f"curve_{m}"]) == len(arr[f"curve_masking_{m}"]) == sizes.k_del
        # AUC is the mean of the curve and Drop@k its k-th point (in %)
        m = rec["methods"]["aumann_shapley"]
        assert m["deletion_auc"] == pytest.approx(float(np.mean(arr["curve_aumann_shapley"])))
        assert m["drop_at_5"] == pytest.approx(100 * arr["curve_aumann_shapley"][sizes.k_drop - 1])


def test_deletion_point_is_an_independent_fork(study_dir):
    sc, cfg, _, res = study_dir
    rec, arr = res.records[0], res.arrays[0]
    ts = rec["t_star"]
    run = sc.simulate(cfg, rng=np.random.default_rng(np.random.SeedSequence(cfg.seed).spawn(1)[0].spawn(2)[0]),
                      keep_from=0)
    np.testing.assert_allclose(run.panel.values[ts].sum(), res.panels[0].values[ts].sum())
    order = rank_agents(arr["phi_aumann_shapley"])
    z, ctx = sc.step_with_baseline(run.before(ts), cfg, order[:2])
    f = sc.indicator(cfg)
    drop = relative_drop(rec["f_t_star"], np.array([evaluate(f, z, ctx)]))[0]
    assert drop == pytest.approx(arr["curve_aumann_shapley"][1])


def test_resume_skips_finished_runs(study_dir, tmp_path):
    import shutil

    sc, cfg, out, res = study_dir
    out = shutil.copytree(out, tmp_path / "copy")  # the module's directory stays as the first study wrote it
    again = run_study(sc, cfg, out_dir=out)
    assert (again.resumed, again.computed) == (2, 0)
    dump = lambda recs: json.dumps(recs, sort_keys=True, default=str)  # noqa: E731
    assert dump(again.records) == dump(res.records)
    # a changed config is not mistaken for a finished run
    _, cfg2 = tiny_config("social-llm", agents=8, steps=6, runs=1, seed=cfg.seed + 1)
    third = run_study(sc, cfg2, out_dir=out)
    assert (third.resumed, third.computed) == (0, 1)


def test_vertex_path_equals_the_masking_kernel_and_is_efficient(rng):
    sc, cfg = tiny_config("midscale-social", agents=12, steps=5)
    run = sc.simulate(cfg, rng=2, keep_from=0)
    f = sc.indicator(cfg)
    z, z0 = run.panel.values[4], sc.baseline_features(run.before(4), cfg)
    order = rng.permutation(12)
    phi = vertex_path_attribution(f, z, z0, order, chunk=5)
    assert phi.sum() == pytest.approx(float(evaluate(f, z) - evaluate(f, z0)), abs=1e-10)
    from aumann.attribution import MaskedIndicatorGame, Problem

    kernel = MaskedIndicatorGame(Problem.build(f, run.panel.select_steps([4]), z0), 0).kernel()
    np.testing.assert_allclose(kernel.prefix_marginals(order[None], reverse=False)[0][0], phi, atol=1e-10)


def test_resimulation_reference_game_runs():
    sc, cfg = tiny_config("social-llm", agents=6, steps=4, study={"permutations": 6, "reference_game": "resimulation",
                                                                   "ablations": False, "random_orderings": 2})
    res = run_study(sc, cfg)
    rec = res.records[0]
    # the re-simulation game's v(N) − v(∅) is the full deletion drop, which Σφ reproduces (efficiency)
    assert np.isfinite(rec["methods"]["sampled_shapley"]["sum_phi"])
    assert "ablations" not in rec
    # the default reference_estimator (the CV row) does not apply here: plain sampling is this game's reference
    assert cfg.study.reference_estimator == "sampled_shapley_cv"
    assert rec["reference"]["method"] == "sampled_shapley" and rec["reference"]["game"] == "resimulation"


def test_an_interrupted_study_resumes_where_it_stopped(tmp_path):
    sc, cfg = tiny_config("midscale-social", agents=10, steps=4, runs=2, study={"ablations": False})

    def crash_in_second_run(r, msg):
        if r == 1 and msg == "deletion forks":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_study(sc, cfg, out_dir=tmp_path, progress=crash_in_second_run)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["run-000.json", "run-000.npz"]
    res = run_study(sc, cfg, out_dir=tmp_path)
    assert (res.resumed, res.computed) == (1, 1)
    fresh = run_study(sc, cfg)
    assert [r["methods"]["aumann_shapley"]["deletion_auc"] for r in res.records] == \
        [r["methods"]["aumann_shapley"]["deletion_auc"] for r in fresh.records]


def test_saved_attributions_load_back(study_dir):
    from aumann.attribution import Attribution

    _, cfg, out, res = study_dir
    a = Attribution.load(out / "attributions" / "run-000-aumann_shapley.npz")
    assert a.phi.shape == (cfg.steps, cfg.agents)
    np.testing.assert_array_equal(a.phi, res.arrays[0]["phi_all"])
    s = Attribution.load(out / "attributions" / "run-000-sampled_shapley.npz")
    np.testing.assert_array_equal(s.phi[0], res.arrays[0]["phi_sampled_shapley"])


def test_both_games_are_scored_and_the_report_says_which_is_which(study_dir):
    _, _, out, res = study_dir
    with open(out / "faithfulness.csv", newline="") as fh:
        rows = {r["method"]: r for r in csv.DictReader(fh)}
    for r in rows.values():
        for col in ("deletion_auc", "drop_at_5", "deletion_auc_masking", "drop_at_5_masking"):
            float(r[col])  # plain numbers, both oracles, every row
    report = (out / "report.md").read_text()
    assert "**Re-simulation**" in report and "**Masking**" in report and "signed φ" in report and "|φ|" in report
    assert "## Action attribution through the simulator" in report and "## LLM-as-judge" in report
    assert "heuristic stand-in" in report and "not an LLM" in report
    rec, arr = res.records[0], res.arrays[0]
    m = rec["methods"]["aumann_shapley"]
    assert m["deletion_auc_masking"] == pytest.approx(float(np.mean(arr["curve_masking_aumann_shapley"])))
    # the masking curve is the indicator with the top-k rows at their baseline rows, nothing re-simulated
    sc, cfg, _, _ = study_dir
    ts = rec["t_star"]
    order = rank_agents(arr["phi_aumann_shapley"])
    z = res.panels[0].values[ts].copy()
    run = sc.simulate(cfg, rng=np.random.default_rng(np.random.SeedSequence(cfg.seed).spawn(2)[0].spawn(2)[0]),
                      keep_from=0)
    z0 = sc.baseline_features(run.before(ts), cfg)
    z[order[:3]] = z0[order[:3]]
    drop = relative_drop(rec["f_t_star"], np.array([evaluate(sc.indicator(cfg), z)]))[0]
    assert drop == pytest.approx(arr["curve_masking_aumann_shapley"][2])


def test_action_row_records_efficiency_gaps_and_cost(study_dir):
    _, cfg, out, res = study_dir
    for rec in res.records:
        a = rec["action"]
        assert a["relative_efficiency_gap"] <= 1e-6 and a["converged"] and a["fork_gap"] < 1e-10
        assert a["coalition_gap"]["coalitions"] > 0 and not a["exact_map"] and "recorded" in a["holds"]
        assert rec["cost"]["action_aumann_shapley"]["step_evals"] > 0
        assert set(rec["judge"]["overlap"]) == {"aumann_shapley", "sampled_shapley", "sampled_shapley_cv",
                                                "leave_one_out", "action_aumann_shapley"}
    with open(out / "action_attribution.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 and all(float(r["step_evals"]) > 0 and r["exact_map"] == "0" for r in rows)
    assert (out / "judge_overlap.csv").is_file() and not (out / "resimulation_agreement.csv").exists()
    text = (out / "runs" / "run-000.json").read_text()
    assert "NaN" not in text and json.loads(text)["action"]["steps"] == cfg.study.quadrature_steps


def test_resimulation_reference_from_the_config_key_gives_its_row_agreement_and_ceiling(tmp_path):
    sc, cfg = tiny_config("midscale-social", agents=10, steps=4, runs=1, assignments=[
        "study.resimulation_reference=true", "study.permutations=6", "study.ablations=false", "study.judge='off'"])
    assert cfg.study.resimulation_reference
    res = run_study(sc, cfg, out_dir=tmp_path)
    write_outputs(res, tmp_path, command="test", seconds=0.0, plots=False)
    rec = res.records[0]
    assert "sampled_shapley_resimulation" in rec["methods"] and "llm_judge" not in rec["methods"]
    rr = rec["resimulation_reference"]
    assert set(rr["agreement"]) == {"aumann_shapley", "sampled_shapley", "sampled_shapley_cv", "leave_one_out",
                                    "action_aumann_shapley"}
    assert -1 <= rr["agreement"]["action_aumann_shapley"]["kendall_tau"] <= 1
    assert -1 <= rr["ceiling"]["kendall_tau"] <= 1
    cost = rec["cost"]["sampled_shapley_resimulation"]
    assert cost["step_evals"] == 6 * 9 + 2 and "seconds" not in cost  # m·(N − 1) + 2 forks; no wall time in records
    seconds = json.loads((tmp_path / "timings" / "run-000.json").read_text())["seconds"]
    assert seconds["sampled_shapley_resimulation"] > 0 and seconds["action_aumann_shapley"] > 0
    assert res.timed_records()[0]["cost"]["sampled_shapley_resimulation"]["seconds"] == seconds[
        "sampled_shapley_resimulation"]
    with open(tmp_path / "action_attribution.csv", newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert float(row["resimulation_shapley_step_evals"]) == cost["step_evals"]
    assert not any("seconds" in col for col in row)  # wall-clock time is in timings/, not in the table
    # on an exact step map, the re-simulation game's Shapley value sums to the action value's Δv
    assert rec["methods"]["sampled_shapley_resimulation"]["sum_phi"] == pytest.approx(rec["action"]["delta_v"])
    with open(tmp_path / "resimulation_agreement.csv", newline="") as fh:
        rows = {r["method"]: r for r in csv.DictReader(fh)}
    assert float(rows["action_aumann_shapley"]["kendall_tau_ceiling"]) == pytest.approx(rr["ceiling"]["kendall_tau"])
    assert "## Agreement on the re-simulation game" in (tmp_path / "report.md").read_text()


def test_llm_judge_without_an_llm_backend_is_a_config_error():
    from aumann.errors import ConfigError

    sc, cfg = tiny_config("social-llm", agents=6, steps=4, assignments=["study.judge='llm'"])
    with pytest.raises(ConfigError, match="LLM backend"):
        run_study(sc, cfg)
