"""A model that set ``running = False`` and was stepped on: the study warns once, from the run records it holds,
computed or resumed.

Before, the :class:`ModelFinishedWarning` came from each run's ``simulate``, inside whichever process simulated it:
one warning per run serially (two runs: the same sentence twice, beside ``aumann run``'s own "model finished:" line
for each); a process pool's worker printed it to its own stderr in Python's raw format (file:line), a Ray worker's
may not reach the console; a resumed run said nothing. Now ``run_study`` warns once, naming every such run.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from aumann import scenarios
from aumann.errors import ModelFinishedWarning
from aumann.simulators import LocalExecutor
from aumann.studies.faithfulness import run_study

BURNOUT = Path(__file__).resolve().parents[1] / "scenarios" / "burnout" / "scenario.py"
STUDY = {"permutations": 20, "random_orderings": 2, "quadrature_steps": 8, "ablations": False, "judge": "off"}


def _said(out: Path, executor=None) -> list[str]:
    """The model-finished warnings one study of two burnout runs into ``out`` gives in this process."""
    sc = scenarios.get(f"{BURNOUT}:scenario")
    cfg = sc.load_config(steps=8, runs=2, study=STUDY)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        run_study(sc, cfg, out_dir=out, executor=executor)
    return [str(w.message) for w in got if issubclass(w.category, ModelFinishedWarning)]


def _check(said: list[str]) -> None:
    assert said == ["burnout: the model set running = False, the step where Mesa's batch_run stops, in 2 of 2 "
                    "run(s): run 0: at panel step 2 (model step 3); run 1: at panel step 2 (model step 3). aumann kept "
                    "stepping it for all 8 steps, so the steps after are of a finished model (usually unchanged, so f "
                    "is flat there and Δv can be 0 at a t* among them); each run record keeps it (model_finished; "
                    "manifest.json, the report); pass steps=3 (aumann run --steps 3) to stop where the last of them "
                    "finished"]


def test_computed_and_resumed_runs_are_warned_of_once(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _check(_said(out))  # computed: once for both runs (was: "Burnout set running = False ..." once per run)
    _check(_said(out))  # resumed: read back from the run records (was: nothing)


@pytest.mark.slow
def test_runs_computed_on_a_process_pool_are_warned_of_in_the_driver(tmp_path: Path) -> None:
    # the worker's own warning never reached the driver (was: nothing here); the driver says it from the records
    with LocalExecutor(max_workers=2, mp_context="fork") as pool:
        _check(_said(tmp_path / "run", pool))


def test_a_model_finished_on_its_last_step_and_direct_simulate_calls_are_as_before(tmp_path: Path) -> None:
    sc = scenarios.get(f"{BURNOUT}:scenario")
    # finished on the last step (steps=3): nothing stepped on, nothing said
    cfg = sc.load_config(steps=3, runs=1, study=STUDY)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelFinishedWarning)
        run_study(sc, cfg, out_dir=tmp_path / "three")
    # Scenario.simulate called directly still warns (warn_finished=True by default); the study's passes False
    with pytest.warns(ModelFinishedWarning, match="Burnout set running = False at panel step 2"):
        run = sc.simulate(sc.load_config(steps=8), rng=0)
    assert run.panel.meta["model_finished"] == {"step": 2, "model_step": 3, "steps": 8}
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelFinishedWarning)
        quiet = sc.simulate(sc.load_config(steps=8), rng=0, warn_finished=False)
    assert quiet.panel.meta["model_finished"] == {"step": 2, "model_step": 3, "steps": 8}  # kept either way


def test_a_study_without_an_output_folder_does_not_point_at_manifest_json() -> None:
    # run_study(out_dir=None) writes no file, yet the warning said "(model_finished; manifest.json, the report)"
    sc = scenarios.get(f"{BURNOUT}:scenario")
    cfg = sc.load_config(steps=8, runs=2, study=STUDY)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        run_study(sc, cfg)
    (said,) = [str(w.message) for w in got if issubclass(w.category, ModelFinishedWarning)]
    assert "each run record keeps it (model_finished; the study result's records); pass steps=3" in said
    assert "manifest.json" not in said
