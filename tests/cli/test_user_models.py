"""Your model, your indicator (issue 21): a user scenario with births, deaths and re-entry run end to end
through ``aumann run dir/x.py:scenario`` with ablations on (its model a sibling package of the file), and
``aumann attribute --indicator file.py:fn``."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from aumann.attribution import Attribution, Panel
from aumann.cli import main
from tests.paths import REPO

LIFECYCLE = REPO / "tests" / "scenarios" / "lifecycle" / "scenario.py"


def test_a_model_with_births_deaths_and_re_entry_runs_end_to_end_with_ablations(tmp_path):
    out = tmp_path / "run"
    assert main(["run", f"{LIFECYCLE}:scenario", "--runs", "2", "--agents", "14", "--steps", "8",
                 "--set", "study.permutations=24", "--set", "study.random_orderings=3",
                 "--set", "study.path_orders=3", "--set", "study.quadrature_steps=12", "--out", str(out)]) == 0
    rows = list(csv.DictReader((out / "faithfulness.csv").open()))
    assert {r["method"] for r in rows} >= {"aumann_shapley", "sampled_shapley", "leave_one_out", "random"}
    for r in rows:
        for col in ("deletion_auc", "drop_at_5", "deletion_auc_masking", "drop_at_5_masking"):
            assert math.isfinite(float(r[col])), (r["method"], col)
    for name in ("path_ablation.csv", "f_sensitivity.csv", "baseline_ablation.csv", "report.html"):
        assert (out / name).stat().st_size > 0, name
    panel = Panel.load(out / "panels" / "run-000.npz")
    a = panel.alive
    assert a is not None and not a.all()
    born = [i for i in range(panel.N) if not a[0, i] and a[:, i].any()]
    back = [i for i in range(panel.N) if any(a[t, i] and not a[t + 1, i] and a[t + 2:, i].any()
                                             for t in range(panel.T - 2))]
    assert born and back  # newborns and agents that left and came back
    res = Attribution.load(out / "attributions" / "run-000-aumann_shapley.npz")
    assert np.all(res.phi[~a] == 0)
    rec = json.loads((out / "runs" / "run-000.json").read_text())
    rec = rec.get("record", rec)
    assert rec["ablations"]["f_sensitivity"]  # the alive-aware aggregators were attributed


def test_attribute_takes_an_indicator_from_a_file(tmp_path, rng):
    (tmp_path / "helpers.py").write_text("SCALE = 2.0\n")
    (tmp_path / "my_indicator.py").write_text(
        "import torch\n"
        "from helpers import SCALE  # a sibling module, imported as python my_indicator.py would\n"
        "def doubled_mean(z, alive=None):\n"
        "    g = z.sum(-1)\n"
        "    if alive is None:\n"
        "        return SCALE * g.mean(-1)\n"
        "    return SCALE * torch.where(alive, g, 0.0).sum(-1) / alive.sum(-1)\n")
    z = np.abs(rng.normal(size=(2, 20, 2)))
    alive = np.ones((2, 20), dtype=bool)
    alive[1, :3] = False
    src = Panel(z, alive=alive).save(tmp_path / "panel.npz")
    out = tmp_path / "out"
    assert main(["attribute", str(src), "--indicator", f"{tmp_path / 'my_indicator.py'}:doubled_mean",
                 "--out", str(out), "--no-report"]) == 0
    res = Attribution.load(out / "attribution.npz")
    want = 2.0 * z[1][alive[1]].sum(axis=1).mean()
    assert res.f_values[1] == pytest.approx(want)
    assert res.provenance["indicator"] == "doubled_mean"
    assert main(["attribute", str(src), "--indicator", f"{tmp_path / 'my_indicator.py'}:nope",
                 "--out", str(tmp_path / "o2")]) == 2


BURNOUT = REPO / "tests" / "scenarios" / "burnout" / "scenario.py"


def test_a_model_that_finished_early_and_a_zero_delta_v_at_t_star_are_said_in_console_manifest_and_report(
        tmp_path, capsys):
    """mesa-examples' forest fire sets running = False when no tree burns; aumann stepped it on, t* = argmax f over
    the second half fell on a flat step where Δv = f(z) − f(z⁰) = 0, and the faithfulness table came out as 0 and
    '–' with no word why. t* keeps its documented rule (here Δv is 0 on the whole window: no other step would
    do), but the console, manifest.json and report.md now say that the model finished (and at which step) and
    that Δv = 0 at t*, and what to change."""
    out = tmp_path / "run"
    assert main(["run", f"{BURNOUT}:scenario", "--runs", "1", "--steps", "8", "--permutations", "20", "--no-plots",
                 "--no-ablations", "--judge", "off", "--out", str(out)]) == 0
    err = " ".join(capsys.readouterr().err.split())  # (Rich wraps lines)
    assert "Δv = 0: run 0: Δv = f(z) − f(z⁰) = 0 at t* = 4 (t* = argmax f over steps 4…7)" in err
    assert "model finished: run 0: the model set running = False at panel step 2 (model step 3)" in err
    assert "pass --steps 3 to stop where it finished" in err
    # said once, by the command (was: also the run's own "aumann: warning: Burnout set running = False ...")
    assert err.count("running = False at panel step 2") == 1 and "aumann: warning" not in err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model_finished"] == [{"run": 0, "step": 2, "model_step": 3, "steps": 8}]
    (zero,) = manifest["zero_delta_v"]
    assert zero["t_star"] == 4 and zero["window"] == [4, 7] and zero["largest_abs_delta_v_step"] is None
    assert "rankings undefined" in zero["why"]
    rec = json.loads((out / "runs" / "run-000.json").read_text())
    assert rec["t_star"] == 4 and rec["delta_v"] == 0.0 and rec["zero_delta_v"]["t_star"] == 4
    report = (out / "report.md").read_text()
    assert "Δv = f(z) − f(z⁰) = 0 at t* = 4" in report and "set running = False at panel step 2" in report
    # --steps 3 (what it says to do): the model finishes on the last step, Δv(t*) ≠ 0, nothing to say
    out3 = tmp_path / "run3"
    assert main(["run", f"{BURNOUT}:scenario", "--runs", "1", "--steps", "3", "--permutations", "20", "--no-plots",
                 "--no-ablations", "--judge", "off", "--out", str(out3)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "Δv = 0" not in err and "model finished" not in err and "running = False" not in err
    manifest = json.loads((out3 / "manifest.json").read_text())
    assert "model_finished" not in manifest and "zero_delta_v" not in manifest
    assert json.loads((out3 / "runs" / "run-000.json").read_text())["delta_v"] != 0


HATCHERY = REPO / "tests" / "scenarios" / "hatchery" / "scenario.py"


def test_agents_no_capture_saw_are_counted_in_the_run_record_manifest_and_report(tmp_path, capsys):
    """Fry that hatch and are eaten within one step have no row; the panel counted them (meta["transient_agents"])
    but the run record, manifest.json and the report said nothing, so a reader of the study's outputs could not know
    that 5 agents a step were left out of f and φ. Now all three say it (absent when there are none)."""
    out = tmp_path / "run"
    assert main(["run", f"{HATCHERY}:scenario", "--runs", "1", "--steps", "6", "--permutations", "20",
                 "--no-plots", "--no-ablations", "--judge", "off", "--out", str(out)]) == 0
    assert "15 agent(s) (15 Fry) were present at no capture" in capsys.readouterr().err  # (the warning, as before)
    counted = {"total": 15, "types": {"Fry": 15},
               "steps": [{"step": t, "model_step": t + 1, "count": 5} for t in (1, 3, 5)]}
    assert Panel.load(out / "panels" / "run-000.npz").meta["transient_agents"] == counted
    assert json.loads((out / "runs" / "run-000.json").read_text())["transient_agents"] == counted
    assert json.loads((out / "manifest.json").read_text())["transient_agents"] == [{"run": 0, **counted}]
    said = "run 0: 15 (15 Fry; 15 born and removed within one step) in 3 step(s). They have no row in the panel"
    assert said in (out / "report.md").read_text()
    assert said in (out / "report.html").read_text()
    # the same command again resumes the run: the console says it once more, from the run record (was: nothing)
    assert main(["run", f"{HATCHERY}:scenario", "--runs", "1", "--steps", "6", "--permutations", "20",
                 "--no-plots", "--no-ablations", "--judge", "off", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "0 run(s) computed, 1 resumed" in " ".join(err.split())
    assert err.count("aumann: warning: hatchery: agents present at no capture in 1 of 1 run(s): run 0: 15 agent(s) "
                     "(15 Fry) were present at no capture") == 1
    # none (hatch_every=3: the first fry hatch in step 3, after these 2 steps): no key anywhere, nothing said
    out1 = tmp_path / "run1"
    assert main(["run", f"{HATCHERY}:scenario", "--runs", "1", "--steps", "2", "--permutations", "20",
                 "--set", "hatch_every=3", "--no-plots", "--no-ablations", "--judge", "off", "--out", str(out1)]) == 0
    assert "transient_agents" not in json.loads((out1 / "manifest.json").read_text())
    assert "transient_agents" not in json.loads((out1 / "runs" / "run-000.json").read_text())
    assert "no capture" not in (out1 / "report.md").read_text().replace("(present at no capture)", "")


LEDGER = REPO / "tests" / "scenarios" / "ledger" / "scenario.py"


def test_recorded_integers_float64_rounded_are_counted_in_the_run_record_manifest_and_report(tmp_path, capsys):
    """Account numbers past 2**53 recorded as a feature: the panel counted them (meta["rounded_values"]) but the run
    record, manifest.json and the report said nothing, so a reader of the study's outputs could not know that f and φ
    saw rounded values. Now all three say it (absent when there are none)."""
    out = tmp_path / "run"
    assert main(["run", f"{LEDGER}:scenario", "--runs", "1", "--steps", "4", "--permutations", "20",
                 "--no-plots", "--no-ablations", "--judge", "off", "--out", str(out)]) == 0
    # (the warning: once, from the run records, since the study's runs do not warn themselves)
    assert "ledger: feature 'account' in 1 of 1 run(s) (run 0; counted in each run record's rounded_values, " \
           "manifest.json): 20 value(s)" in capsys.readouterr().err
    counted = {"features": {"account": {"count": 20, "largest": 2**53 + 9}}}  # 5 accounts × 4 captures
    assert Panel.load(out / "panels" / "run-000.npz").meta["rounded_values"] == counted
    assert json.loads((out / "runs" / "run-000.json").read_text())["rounded_values"] == counted
    assert json.loads((out / "manifest.json").read_text())["rounded_values"] == [{"run": 0, **counted}]
    said = ("integers rounded: run 0: feature 'account': 20 value(s), the largest 9,007,199,254,741,001 (stored as "
            "9,007,199,254,741,000): recorded integers past ±2⁵³")
    assert said in (out / "report.md").read_text()
    assert "<dt>integers rounded</dt><dd>run 0: feature 'account': 20 value(s)" in (out / "report.html").read_text()
    out1 = tmp_path / "run1"  # small account numbers: no key anywhere, nothing said
    assert main(["run", f"{LEDGER}:scenario", "--runs", "1", "--steps", "2", "--permutations", "20",
                 "--set", "big_ids=false", "--no-plots", "--no-ablations", "--judge", "off", "--out", str(out1)]) == 0
    assert "rounded_values" not in json.loads((out1 / "manifest.json").read_text())
    assert "rounded_values" not in json.loads((out1 / "runs" / "run-000.json").read_text())
    assert "integers rounded" not in (out1 / "report.md").read_text()
