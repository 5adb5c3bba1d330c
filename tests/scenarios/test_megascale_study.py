"""`aumann run megascale-social --agents 10000` end to end (small study settings), and the study records."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from aumann import scenarios
from aumann.studies.faithfulness import ATTRIBUTED, FAITHFULNESS_COLUMNS
from tests.cli_run import invoke_run as _invoke

ROWS = [*ATTRIBUTED, "llm_judge", "random"]  # no step map: no action_aumann_shapley row; the judge is the stand-in

FAST = ["--set", "study.permutations=100", "--set", "cascade_permutations=100", "--set", "fidelity_agents=300",
        "--set", "fidelity_steps=8", "--set", "tier_panel_draws=4", "--set", "study.path_orders=2",
        "--set", "study.random_orderings=2"]


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("mega")
    assert _invoke("megascale-social", "--agents", "10000", "--steps", "10", "--runs", "1", "--no-plots",
                   "--out", str(out), *FAST) == 0
    return out


def test_ci_run_writes_the_standard_table_plus_the_log_k_column(ci_run):
    with open(ci_run / "faithfulness.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0].keys()) == (*FAITHFULNESS_COLUMNS, "deletion_auc_logk", "deletion_auc_logk_std", "policy")
    assert [r["method"] for r in rows] == ROWS
    assert all(r["policy"] == "offline policy" for r in rows)
    for r in rows:  # the judge names K_del agents, too few for the log-k grid (empty: NaN)
        ok = r["deletion_auc_logk"] == "" if r["method"] == "llm_judge" else 0.0 <= float(r["deletion_auc_logk"]) <= 1.0
        assert ok, r["method"]
    assert float(rows[0]["kendall_tau"]) > 0.5  # Aumann–Shapley ranks agents like sampled Shapley
    for name in ("cascade", "exact_attribution", "tier_shares", "fidelity", "llm_ablation", "decisions",
                 "smoothing_gap", "faithfulness_extended"):
        assert (ci_run / f"{name}.csv").is_file(), name


def test_report_and_manifest_say_offline_policy_and_count_decisions(ci_run):
    report = (ci_run / "report.md").read_text()
    assert "offline policy" in report and "Scenario analysis" in report
    assert "reduced at scale" not in report  # 10⁴ agents: below [large].threshold, nothing reduced
    manifest = json.loads((ci_run / "manifest.json").read_text())
    assert manifest["policy"] == "offline policy"
    usage = manifest["llm_usage"]
    for key in ("calls", "cache_hits", "retries", "failures", "prompt_tokens", "completion_tokens", "decisions",
                "planned_calls", "latency_p50_s", "latency_p95_s", "cost_usd", "fork_decisions", "fork_calls"):
        assert key in usage, key
    with open(ci_run / "decisions.csv", newline="") as fh:
        per_step = [int(r["requests"]) for r in csv.DictReader(fh)]
    assert len(per_step) == 10 and max(per_step) <= 960 and usage["decisions"] == sum(per_step)
    assert usage["fork_decisions"] > 0  # the re-simulated target step went through the decider


def test_exact_attribution_rows_are_efficient(ci_run):
    with open(ci_run / "exact_attribution.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    closed = [r for r in rows if r["method"].startswith("closed form")]
    assert len(closed) == 2 and all(float(r["efficiency_gap"]) < 1e-9 for r in closed)
    autograd = next(r for r in rows if "autograd" in r["method"])
    assert float(autograd["max_abs_diff_vs_closed_form"]) < 1e-4


def test_cascade_table_and_tiers(ci_run):
    with open(ci_run / "cascade.csv", newline="") as fh:
        rows = {r["method"]: r for r in csv.DictReader(fh)}
    assert set(rows) == {"aumann_shapley", "sampled_shapley", "leave_one_out", "random"}  # the analysis' own table
    assert {r["permutations"] for r in rows.values()} == {"100"}  # the count behind the τ ceiling, on every row
    ours, rnd = rows["aumann_shapley"], rows["random"]
    assert float(ours["deletion_auc_masking"]) > float(rnd["deletion_auc_masking"])
    assert float(ours["deletion_auc"]) > float(rnd["deletion_auc"])
    with open(ci_run / "tier_shares.csv", newline="") as fh:
        tiers = list(csv.DictReader(fh))
    for r in tiers:
        if r["top_1pct"]:
            total = float(r["top_1pct"]) + float(r["next_9pct"]) + float(r["tail_90pct"])
            assert total == pytest.approx(1.0, abs=1e-9)
    biased = next(r for r in tiers if r["panel"].startswith("visibility") and r["indicator"] == "propagation_risk")
    assert float(biased["agents_top_1pct"]) > 0.01  # the biased panel over-samples hubs


def test_study_is_deterministic_in_memory():
    from aumann import scenarios
    from aumann.studies.faithfulness import run_study

    sc = scenarios.get("megascale-social")
    cfg = sc.load_config(agents=600, steps=6, study={"permutations": 40, "random_orderings": 2, "path_orders": 2,
                                                     "ablations": False},
                         fidelity_agents=0, llm_ablation=False, tier_panel_draws=2, cascade_permutations=40)
    a = run_study(sc, cfg)
    b = run_study(sc, cfg)
    # the records as written, checksum and the analysis' tables included: the wall-clock seconds (of the exact
    # attribution's routes, the cascade table's methods) are in the timings, not in the record
    assert json.dumps(a.records, sort_keys=True, default=str) == json.dumps(b.records, sort_keys=True, default=str)
    assert "timings" not in a.records[0]["analysis"] and a.timings[0]["analysis/cascade_exact"] >= 0
    assert not any("seconds" in row for rows in a.records[0]["analysis"]["tables"].values() for row in rows)
    assert a.timed_records()[0]["analysis"]["timings"]["cascade_exact"] == a.timings[0]["analysis/cascade_exact"]
    for k, v in a.arrays[0].items():
        assert np.array_equal(v, b.arrays[0][k]), k


def test_large_n_reductions_are_applied_and_recorded():
    from aumann import scenarios

    sc = scenarios.get("megascale-social")
    small = sc.load_config(agents=1000)
    big = sc.load_config(agents=200_000)
    assert small.study.random_orderings == 20 and small.study.path_orders == 20
    assert big.study.random_orderings == big.large.random_orderings == 3 and big.study.path_orders == 4
    assert big.model_dump()["study"]["random_orderings"] == 3  # what manifest.json records
    # the control-variate reference takes [large].cv_permutations (an explicit smaller count is kept)
    assert small.study.cv_permutations is None and big.study.cv_permutations == big.large.cv_permutations == 64
    assert big.model_dump()["study"]["cv_permutations"] == 64
    assert sc.load_config(agents=200_000, study={"cv_permutations": 16}).study.cv_permutations == 16
    assert sc.load_config(agents=200_000, large={"cv_permutations": 5000}).study.cv_permutations == 1000
    # the plain sampled_shapley row (the comparison; the reference at scale is the control-variate row)
    assert small.study.permutations == 1000 and big.study.permutations == big.large.permutations == 500
    assert big.model_dump()["study"]["permutations"] == 500
    assert sc.load_config(agents=200_000, study={"permutations": 100}).study.permutations == 100
    assert sc.load_config(agents=200_000, large={"permutations": 5000}).study.permutations == 1000
    # the cascade table's sampled Shapley (and its ceiling twin) takes [large].cascade_permutations, recorded
    assert small.cascade_permutations == 1000 and big.cascade_permutations == big.large.cascade_permutations == 500
    assert big.model_dump()["cascade_permutations"] == 500
    assert sc.load_config(agents=200_000, cascade_permutations=40).cascade_permutations == 40
    assert sc.load_config(agents=200_000, large={"cascade_permutations": 5000}).cascade_permutations == 1000


def test_the_report_says_what_was_reduced_at_scale(tmp_path):
    out = tmp_path / "mega"
    assert _invoke("megascale-social", "--agents", "1000", "--steps", "4", "--runs", "1", "--no-plots", "--out",
                   str(out), *FAST, "--set", "large.threshold=500", "--set", "large.cascade_permutations=20",
                   "--set", "analysis=false") == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["cascade_permutations"] == 20 and manifest["config"]["study"]["random_orderings"] == 2
    for page in ("report.md", "report.html"):
        text = (out / page).read_text()
        assert "reduced at scale" in text and "N = 1,000 ≥ 500" in text and "cascade_permutations = 20" in text
        assert "permutations = 500" in text and "judge = false" in text


def test_judge_row_is_off_at_scale_unless_asked_for():
    sc = scenarios.get("megascale-social")
    assert sc.load_config(agents=10_000).study.judge == "auto"  # below [large].threshold: as configured
    assert sc.load_config(agents=200_000).study.judge == "off"
    assert sc.load_config(agents=200_000, study={"judge": "heuristic"}).study.judge == "heuristic"
    assert sc.load_config(agents=200_000, large={"judge": True}).study.judge == "auto"


def test_run_panel_carries_influence_tiers_as_groups():
    sc = scenarios.get("megascale-social")
    cfg = sc.load_config(agents=2_000, steps=3)
    run = sc.simulate(cfg, rng=np.random.default_rng(0))
    tier = run.panel.groups["tier"]
    counts = {str(k): int((tier == k).sum()) for k in np.unique(tier)}
    assert counts == {"top": 20, "mid": 180, "tail": 1800}  # the one label set (aumann.tiers)
    infl = run.model.world.influence  # the top tier holds the most influential agents
    assert infl[tier == "top"].min() >= infl[tier == "mid"].max() >= infl[tier == "tail"].max()


def test_progress_total_counts_every_message_a_run_reports():
    """The progress bar's total (study_stages) lists every message a run ticks: the MegaScale stages' own
    messages included (a 10⁶ run used to end at "17/9 stage(s)"). The study's optional stages and the
    scenario's analysis run in two lanes at the same time: each lane's messages come in order."""
    from aumann.studies.faithfulness import run_study, study_stages

    sc = scenarios.get("megascale-social")
    cfg = sc.load_config(agents=600, steps=6, study={"permutations": 40, "random_orderings": 2, "path_orders": 2},
                         fidelity_agents=300, fidelity_steps=4, tier_panel_draws=2, cascade_permutations=40)
    seen: list[str] = []
    run_study(sc, cfg, progress=lambda r, msg: seen.append(msg))
    declared = list(study_stages(sc, cfg))
    assert sorted(seen) == sorted(declared)
    study_lane = ["smoothing gaps", "ablations"]
    start = declared.index(study_lane[0])
    assert [m for m in seen if m not in study_lane] == [m for m in declared if m not in study_lane]
    assert [m for m in seen if m in study_lane] == study_lane == declared[start:start + 2]
    assert "cascade pressure: deletion" in declared and "LLM ablation" in declared


def test_every_fork_of_the_deletion_stages_is_made_ahead_on_threads(monkeypatch, tmp_path):
    """The offline policy's deletion forks (a vectorised resimulate_fn) run ahead, on the cores, all of them: the
    log-k grid's and the cascade deletion's were forked one by one, on one core, as each curve asked."""
    import threading

    from aumann.evaluation import deletion as dl
    from aumann.studies.faithfulness import run_study

    state = {"ahead": 0, "inside": 0, "outside": 0, "threads": set()}
    orig_prefetch, orig_compute = dl.DeletionOracle.prefetch, dl.DeletionOracle._compute
    def prefetch(self, sets):
        state["ahead"] += 1
        try:
            return orig_prefetch(self, sets)
        finally:
            state["ahead"] -= 1
    def compute(self, key):
        state["inside" if state["ahead"] else "outside"] += 1
        state["threads"].add(threading.current_thread().name)
        return orig_compute(self, key)
    monkeypatch.setattr(dl.DeletionOracle, "prefetch", prefetch)
    monkeypatch.setattr(dl.DeletionOracle, "_compute", compute)
    monkeypatch.setattr("aumann.attribution.threads._CPUS", 2)
    sc = scenarios.get("megascale-social")
    cfg = sc.load_config(agents=3000, steps=4, runs=1, fidelity_agents=200, fidelity_steps=4, tier_panel_draws=2,
                         cascade_permutations=20, llm_ablation=False,
                         study={"permutations": 20, "cv_permutations": 8, "path_orders": 1, "random_orderings": 2,
                                "ablations": False})
    run_study(sc, cfg, out_dir=tmp_path / "out")
    assert state["outside"] == 0 and state["inside"] > 50  # the log-k grid and the cascade deletion too
    assert any(name.startswith("aumann-fork") for name in state["threads"])  # vectorised forks on the cores


def test_a_user_table_beside_the_analysis_keeps_every_table_on_one_core_and_two(monkeypatch):
    """A user stage that adds a table before MegaScale's analysis (lane ``study``): MegaScale's first stage replaced
    ``rec["analysis"]`` and the user's table was lost; with lanes the two lanes' sections are merged into the
    user's dict, and the ``decisions`` stage (alone, after the lanes) wrote into MegaScale's own dict, which was no
    longer in the record: its table was lost. Every table is kept, in the same order on one core and two."""
    from aumann import scenarios
    from aumann.studies import stages as S
    from aumann.studies.faithfulness import run_study
    from aumann.studies.stages import Stage, add_table, register_stage

    monkeypatch.setattr(S, "_STAGES", S.NamedList(list(S._STAGES)))  # registered here only
    register_stage(Stage("mine", lambda ctx: add_table(ctx, "mine", [{"x": 1}]), lane="study"),
                   before="cascade pressure")
    sc = scenarios.get("megascale-social")
    cfg = sc.load_config(agents=600, steps=6, study={"permutations": 40, "random_orderings": 2, "path_orders": 2,
                                                     "ablations": False},
                         fidelity_agents=0, llm_ablation=False, tier_panel_draws=2, cascade_permutations=40)
    tables = []
    for cores in (1, 2):
        monkeypatch.setattr("aumann.attribution.threads.usable_cores", lambda cores=cores: cores)
        rec = run_study(sc, cfg).records[0]
        tables.append(list(rec["analysis"]["tables"]))
        assert rec["analysis"]["tables"]["mine"] == [{"x": 1}]
        assert "decisions" in rec["analysis"]["tables"] and "cascade" in rec["analysis"]["tables"]
        assert rec["analysis"]["agents"] == 600 and "decisions" in rec["analysis"]
    assert tables[0] == tables[1] and tables[0][0] == "mine"
