"""The study's stages: a failing optional stage is recorded and skipped (not fatal), --strict makes it fatal,
and every run is written before its optional stages."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
import torch

from aumann import scenarios
from aumann.errors import ConfigError, StudyError
from aumann.scenarios.base import Scenario
from aumann.studies.faithfulness import run_study
from aumann.studies.report import write_outputs
from aumann.studies.rundir import RunDir
from aumann.studies.stages import Stage, register_stage, stages, unregister_stage

STUDY = {"permutations": 20, "random_orderings": 2, "path_orders": 2, "quadrature_steps": 8}


def gini_like(z: torch.Tensor) -> torch.Tensor:
    """A user's Gini-like inequality of influence + exposure: Σ|x_i − x_j| / (2 N Σ x) — 0/0 at z = 0."""
    x = z[..., 4] + z[..., 1]
    num = (x[..., :, None] - x[..., None, :]).abs().sum((-1, -2))
    return num / (2 * x.shape[-1] * x.sum(-1))


@pytest.fixture(scope="module")
def gini_scenario() -> Scenario:
    base = scenarios.get("midscale-social")
    return dataclasses.replace(base, name="midscale-gini", indicator=lambda cfg: gini_like,
                               original=lambda cfg: gini_like)


@pytest.fixture(scope="module")
def gini_study(gini_scenario, tmp_path_factory):
    out = tmp_path_factory.mktemp("gini")
    cfg = gini_scenario.load_config(agents=30, steps=6, runs=1, study=STUDY)
    result = run_study(gini_scenario, cfg, out_dir=out)
    write_outputs(result, out, command="aumann run midscale-gini", seconds=1.0, plots=False,
                  config=cfg.model_dump(mode="json"))
    return out, result, cfg


def test_a_zero_baseline_that_is_0_over_0_no_longer_kills_the_run(gini_study):
    _, result, _ = gini_study
    rec = result.records[0]
    zero = rec["stages"]["ablation zero-baseline"]
    assert zero["status"] == "failed" and zero["error"] == "IndicatorError" and zero["message"]
    for name in ("simulate", "attribute", "rows", "deletion", "smoothing gaps", "ablations", "ablation path",
                 "ablation f-sensitivity", "ablation population-mean-baseline", "ablation pre-event-baseline",
                 "ablation baseline-action-baseline"):
        assert rec["stages"][name]["status"] == "ok", name
    pairs = rec["ablations"]["baseline"]  # the other baselines are still compared
    assert "population_mean vs pre_event" in pairs and not any("zero" in p for p in pairs)
    assert "path" in rec["ablations"] and "smoothing_gap" in rec
    assert set(rec["methods"]) >= {"aumann_shapley", "sampled_shapley", "leave_one_out", "random"}


def test_the_failure_is_in_the_run_record_manifest_and_report(gini_study):
    out, _, _ = gini_study
    rd = RunDir(out)
    on_disk = json.loads(rd.record(0).read_text())
    assert on_disk["stages"]["ablation zero-baseline"]["error"] == "IndicatorError"
    manifest = json.loads(rd.manifest.read_text())
    fails = manifest["stage_failures"]
    assert [(f["stage"], f["error"]) for f in fails] == [("ablation zero-baseline", "IndicatorError")]
    assert manifest["stages"]["ablation zero-baseline"] == {"failed": 1}
    assert manifest["stages"]["ablations"] == {"ok": 1}
    report = (out / "report.md").read_text()
    assert "ablation zero-baseline skipped: IndicatorError" in report
    baseline_table = (out / "baseline_ablation.csv").read_text()
    assert "population_mean vs pre_event" in baseline_table and "zero vs" not in baseline_table


def test_the_finished_run_resumes_with_its_recorded_failure(gini_study, gini_scenario):
    out, _, cfg = gini_study
    again = run_study(gini_scenario, cfg, out_dir=out)
    assert again.resumed == 1 and again.computed == 0
    assert again.records[0]["stages"]["ablation zero-baseline"]["status"] == "failed"


def test_strict_makes_the_failure_fatal_naming_the_stage(gini_scenario, tmp_path):
    cfg = gini_scenario.load_config(agents=30, steps=6, runs=1, study=STUDY)
    with pytest.raises(StudyError, match="ablation zero-baseline") as exc:
        run_study(gini_scenario, cfg, out_dir=tmp_path, strict=True)
    assert type(exc.value.__cause__).__name__ == "IndicatorError"
    # the run was written before its optional stages, with the failure recorded
    rec = json.loads(RunDir(tmp_path).record(0).read_text())
    assert rec["stages"]["ablation zero-baseline"]["status"] == "failed"
    strict_cfg = gini_scenario.load_config(agents=30, steps=6, runs=1, study={**STUDY, "strict": True})
    with pytest.raises(StudyError, match="ablation zero-baseline"):  # the config switch, and resume under
        run_study(gini_scenario, strict_cfg, out_dir=tmp_path)  # strict recomputes a run with a failed stage


def test_the_run_is_written_before_the_optional_stages(tmp_path):
    sc = scenarios.get("midscale-social")
    cfg = sc.load_config(agents=20, steps=6, runs=1, study={**STUDY, "ablations": False})
    seen: list[dict] = []

    def peek(ctx):  # an optional stage: the record on disk already holds the required stages' results
        seen.append(json.loads(RunDir(tmp_path).record(0).read_text()))

    register_stage(Stage("peek", peek))
    try:
        result = run_study(sc, cfg, out_dir=tmp_path)
    finally:
        unregister_stage("peek")
    first = seen[0]
    assert first["methods"] and first["stages"]["deletion"]["status"] == "ok"
    assert first["stages"]["peek"]["status"] == "pending" and first["stages"]["ablations"]["status"] == "skipped"
    assert result.records[0]["stages"]["peek"]["status"] == "ok"
    assert RunDir(tmp_path).verify_run(0, result.records[0]["digest"])[0] == "done"


def test_a_run_interrupted_before_its_optional_stages_is_recomputed_on_resume(tmp_path):
    """Ctrl-C during an optional stage leaves the run written with that stage pending; running the same command
    again used to read it back as finished, so the resumed directory never got that stage's results (its
    ablation tables stayed empty), unlike an uninterrupted run of the same config."""
    sc = scenarios.get("midscale-social")
    cfg = sc.load_config(agents=20, steps=6, runs=1, study={**STUDY, "ablations": False})
    calls: list[int] = []

    def interrupted_once(ctx):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt

    register_stage(Stage("late", interrupted_once))
    try:
        with pytest.raises(KeyboardInterrupt):
            run_study(sc, cfg, out_dir=tmp_path)
        on_disk = json.loads(RunDir(tmp_path).record(0).read_text())
        assert on_disk["stages"]["late"]["status"] == "pending"
        result = run_study(sc, cfg, out_dir=tmp_path)  # the same command again
    finally:
        unregister_stage("late")
    assert (result.resumed, result.computed, len(calls)) == (0, 1, 2)
    assert result.records[0]["stages"]["late"]["status"] == "ok" and not result.failed_checks


def test_a_failing_required_stage_names_itself(tmp_path):
    sc = scenarios.get("midscale-social")
    cfg = sc.load_config(agents=20, steps=6, runs=1, study=STUDY)

    def broken(ctx):
        raise ValueError("boom")

    register_stage(Stage("broken core", broken, optional=False))
    try:
        assert [s.name for s in stages()][:5] == ["simulate", "attribute", "rows", "deletion", "broken core"]
        with pytest.raises(StudyError, match=r"^the required stage 'broken core' \(run 0\) raised ValueError: boom$") \
                as exc:
            run_study(sc, cfg)
        assert isinstance(exc.value.__cause__, ValueError)  # the user's traceback stays reachable (and --debug)
    finally:
        unregister_stage("broken core")
    with pytest.raises(ConfigError):
        unregister_stage("rows")


def test_a_required_user_stage_that_fails_is_one_line_at_the_cli(tmp_path, capsys):
    """Through ``aumann run``: exit 2 and one typed line naming the stage, no traceback (like a failing step)."""
    from aumann.cli import main

    def broken(ctx):
        raise KeyError("no column 'x' in ctx.extras")

    register_stage(Stage("user check", broken, optional=False))
    try:
        rc = main(["run", "midscale-social", "--agents", "12", "--steps", "4", "--runs", "1", "--no-plots",
                   "--permutations", "8", "--no-ablations", "--out", str(tmp_path / "o")])
    finally:
        unregister_stage("user check")
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert ("aumann: error: StudyError: the required stage 'user check' (run 0) raised KeyError: "
            "\"no column 'x' in ctx.extras\"") in err


def test_scenario_analysis_is_gone_with_a_clear_error():
    base = scenarios.get("midscale-social")
    with pytest.raises(ConfigError, match="register_stage"):
        dataclasses.replace(base, name="with-analysis", analysis=lambda cfg, run, study: {})


def test_seed_streams_keep_their_spawn_order():
    from aumann.studies.context import STREAMS, Streams

    seq = np.random.SeedSequence(7)
    s = Streams(seq)
    old = [np.random.default_rng(c) for c in np.random.SeedSequence(7).spawn(10)]  # 4 + 3 + 3, as before
    for name, g in zip(STREAMS, old):
        assert s(name).integers(2**31) == g.integers(2**31), name
    assert s("reference") is s("reference")
    a, b = Streams(np.random.SeedSequence(7))("my_row"), Streams(np.random.SeedSequence(7))("my_row")
    assert a.integers(2**31) == b.integers(2**31)  # a new name: its own stream, the same every time


def test_a_when_that_raises_or_answers_oddly_is_a_typed_error_naming_the_stage():
    sc = scenarios.get("midscale-social")
    cfg = sc.load_config(agents=12, steps=6, runs=1, study=STUDY)

    def broken(scenario, config):
        return config.no_such_flag  # a user's typo: AttributeError, with a traceback and no stage named

    with pytest.raises(StudyError, match=r"stage 'mine': when\(scenario, config\) raised AttributeError"):
        Stage("mine", lambda ctx: None, when=broken).applies(sc, cfg)
    with pytest.raises(StudyError, match=r"stage 'mine': when\(scenario, config\) returned NoneType"):
        Stage("mine", lambda ctx: None, when=lambda s, c: None).applies(sc, cfg)
    # a numpy comparison is a bool: np.False_ left the stage running (only `is False` skipped it)
    assert Stage("mine", lambda ctx: None, when=lambda s, c: np.int64(c.agents) > 100).applies(sc, cfg) is False
    assert Stage("mine", lambda ctx: None, when=lambda s, c: np.int64(c.agents) > 1).applies(sc, cfg) is True
    assert Stage("mine", lambda ctx: None, when=lambda s, c: "not here").applies(sc, cfg) == "not here"


@pytest.mark.parametrize(("stage", "match"), [
    (Stage("b", lambda ctx: None, needs="dep"), r"needs must be a tuple of str.*needs=\('dep',\)"),  # ran never
    (Stage("b", lambda ctx: None, lane=["x"]), "lane must be a str"),  # a raw TypeError deep in the study
    (Stage("b", lambda ctx: None, ticks="tick"), "ticks must be a tuple of str"),
    (Stage(5, lambda ctx: None), "non-empty str name"),
])
def test_register_stage_refuses_a_malformed_stage_naming_the_field(stage, match):
    with pytest.raises(ConfigError, match=match):
        register_stage(stage)
    assert stage.name not in [s.name for s in stages()]


@pytest.mark.parametrize(("name", "rows", "says"), [
    ("faithfulness", [{"k": 1}], "'faithfulness' is the name of one of the study's own tables"),
    ("../evil", [{"k": 1}], "table name '../evil' cannot be used as a file or folder name"),
    ("mine", [{"k": np.arange(3)}], r"add_table 'mine': row 0, column 'k' is ndarray .* a table cell is a number"),
    ("mine", {"k": 1}, "rows must be a list of dicts"),
])
def test_add_table_refuses_a_table_that_would_clobber_escape_or_not_write(tmp_path, name, rows, says):
    """A stage's table named 'faithfulness' replaced the study's headline table: faithfulness.csv came out as one
    blank row; '../evil' and an array in a cell passed the stage and then killed the whole report (PathEscapeError,
    TypeError: not JSON serializable). Each now fails its stage alone, recorded, and the study's tables stand."""
    from aumann.studies.stages import add_table

    register_stage(Stage("user_table", lambda ctx: add_table(ctx, name, rows)))
    try:
        sc = scenarios.get("midscale-social")
        cfg = sc.load_config(agents=12, steps=4, runs=1, study={**STUDY, "ablations": False})
        result = run_study(sc, cfg, out_dir=tmp_path)
        write_outputs(result, tmp_path, command="aumann run midscale-social", seconds=0.0, plots=False,
                      config=cfg.model_dump(mode="json"))
    finally:
        unregister_stage("user_table")
    entry = result.records[0]["stages"]["user_table"]
    assert entry["status"] == "failed" and entry["error"] in ("StudyError", "UnsafeNameError")
    assert re.search(says, entry["message"])
    faith = (tmp_path / "faithfulness.csv").read_text().splitlines()
    assert len(faith) > 2 and faith[1].startswith("midscale-social,aumann_shapley,")
    assert not (tmp_path.parent / "evil.csv").exists()


@pytest.mark.parametrize(("write", "says"), [
    (lambda ctx: ctx.rec.__setitem__("mine", {"x": object()}),
     r"stage 'mine' put a value into the run record \(ctx.rec\['mine'\]\) that JSON cannot hold"),
    (lambda ctx: ctx.arrays.__setitem__("mine", np.array([object()])),
     r"stage 'mine' put ctx.arrays\['mine'\] of dtype object"),
])
def test_a_stage_that_leaves_what_cannot_be_written_fails_alone_and_the_run_stays_readable(tmp_path, write, says):
    """An object in the record passed the stage, then killed the study at the run's write (TypeError: Object of
    type object is not JSON serializable); an object array was pickled into run-000.npz, which every later read
    refused ('holds pickled Python objects ... run the same command again'), and rerunning wrote it again."""
    def stage(ctx):
        ctx.arrays["fine"] = np.ones(2)  # kept only if the whole stage is
        write(ctx)

    register_stage(Stage("mine", stage))
    try:
        sc = scenarios.get("midscale-social")
        cfg = sc.load_config(agents=12, steps=4, runs=1, study={**STUDY, "ablations": False})
        result = run_study(sc, cfg, out_dir=tmp_path)
    finally:
        unregister_stage("mine")
    entry = result.records[0]["stages"]["mine"]
    assert entry["status"] == "failed" and entry["error"] == "StudyError" and re.search(says, entry["message"])
    assert "mine" not in result.records[0] and "fine" not in result.arrays[0]
    assert RunDir(tmp_path).verify_run(0, result.records[0]["digest"])[0] == "done"


def test_a_zero_delta_v_at_t_star_names_the_window_step_with_the_largest_change():
    """Δv(t*) = 0 leaves every faithfulness row of the run undefined; t* keeps its documented rule (argmax f over
    the second half, so the built-in scenarios' t* and tables do not move) and the record names the step of that
    window with the largest |Δv| (or none, when Δv is 0 on all of it), which the report and console print."""
    from aumann.studies.rundir import zero_delta_v_text
    from aumann.studies.stages import zero_delta_v_record

    dv = np.array([5.0, 4.0, 3.0, 0.0, 0.0, -0.25, 0.125, 0.0])  # window 4…7, t* = 4
    rec = zero_delta_v_record(dv, 4)
    assert rec == {"t_star": 4, "window": [4, 7], "largest_abs_delta_v_step": 5, "largest_abs_delta_v": -0.25}
    text = zero_delta_v_text({"run": 3, **rec})
    assert text.startswith("run 3: Δv = f(z) − f(z⁰) = 0 at t* = 4 (t* = argmax f over steps 4…7)")
    assert "the step of the window with the largest |Δv| is 5 (Δv = -0.25)" in text
    flat = zero_delta_v_record(np.array([1.0, 0.0, np.nan]), 2)  # (a NaN Δv is no change to point at)
    assert flat["window"] == [2, 2] and flat["largest_abs_delta_v_step"] is None
    assert "Δv = 0 on every step of the window" in zero_delta_v_text({"run": 0, **flat})


def test_agents_no_capture_saw_are_said_per_run_both_kinds_and_an_edited_record_does_not_break_the_report():
    """The report's line for a run with agents present at no capture: how many, of which types, how (born and removed
    within a step, or there before the first step and removed in it), in how many steps. A run record edited by hand
    (no types, no steps) still gives a line, not a traceback that would cost the whole page."""
    from collections import Counter

    from aumann.simulators.transients import transient_record
    from aumann.studies.rundir import transient_agents, transient_agents_text

    record = transient_record([(0, 1, Counter({"Fry": 2}), Counter({"Fish": 1})),
                               (3, 4, Counter({"Fry": 4}), Counter())])
    recs = [{"run": 0}, {"run": 1, "transient_agents": record}]
    (d,) = transient_agents(recs)
    assert transient_agents_text(d) == ("run 1: 7 (1 Fish, 6 Fry; 6 born and removed within one step; 1 there "
                                        "before the first step and removed in it) in 2 step(s)")
    assert transient_agents_text({"run": 2, "total": 3}) == "run 2: 3 (3 born and removed within one step) in 0 step(s)"
    assert transient_agents_text({"run": 2, "total": "3"}) == "run 2: 3 in 0 step(s)"


def test_rounded_integers_are_said_per_run_float32_marked_and_an_edited_record_does_not_break_the_report():
    """The report's line for runs whose recorded integers were rounded: per feature and context how many, the largest
    and what it became (float32 where the recorder stored float32). The record keeps only entries that counted some
    and holds a largest past int64 as its digits (records hold int64 integers only); a record edited by hand (a
    count as text, a largest that is no number) still gives a line or none, never a traceback."""
    from aumann.studies.rundir import rounded_values, rounded_values_record, rounded_values_text

    meta = {"features": {"v": {"count": 2, "largest": 2**70 + 1}, "w": {"count": 0, "largest": 0},
                         "x": {"count": 1, "largest": 2**24 + 1, "dtype": "float32"}}}
    record = rounded_values_record(meta)
    assert record == {"features": {"v": {"count": 2, "largest": str(2**70 + 1)},
                                   "x": {"count": 1, "largest": 2**24 + 1, "dtype": "float32"}}}
    (d,) = rounded_values([{"run": 0}, {"run": 1, "rounded_values": record}])
    assert rounded_values_text(d) == (
        "run 1: feature 'v': 2 value(s), the largest 1,180,591,620,717,411,303,425 (stored as "
        "1,180,591,620,717,411,303,424); feature 'x' (float32): 1 value(s), the largest 16,777,217 (stored as "
        "16,777,216)")
    assert rounded_values_record({"features": {"w": {"count": 0, "largest": 0}}}) is None
    assert rounded_values_record("edited") is None
    assert rounded_values([{"run": 0, "rounded_values": {"features": {"v": {"count": "3"}}}}]) == []
    edited = {"run": 2, "context": {"c": {"count": 3, "largest": "x"}}}
    assert rounded_values_text(edited) == "run 2: context 'c': 3 value(s)"
