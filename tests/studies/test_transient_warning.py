"""Agents present at no capture: the study warns once, from the run records it holds, computed or resumed.

Before, the :class:`TransientAgentsWarning` came from each run's recording, inside whichever process simulated it:
one warning per run serially (two runs: the same sentence twice); nothing at all in the driver for runs computed
on a process pool or Ray (the worker printed it to its own stderr in Python's raw format, or not at all); nothing
for resumed runs, though their records count the agents. Now ``run_study`` warns once, naming every such run.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import mesa
import pytest

from aumann import scenarios
from aumann.errors import TransientAgentsWarning
from aumann.simulators import LocalExecutor
from aumann.studies.faithfulness import run_study

HATCHERY = Path(__file__).resolve().parents[1] / "scenarios" / "hatchery" / "scenario.py"
STUDY = {"permutations": 20, "random_orderings": 2, "quadrature_steps": 8, "ablations": False, "judge": "off"}


def _said(out: Path, executor=None) -> list[str]:
    """The transient-agents warnings one study of two hatchery runs into ``out`` gives in this process."""
    sc = scenarios.get(f"{HATCHERY}:scenario")
    cfg = sc.load_config(steps=6, runs=2, study=STUDY)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        run_study(sc, cfg, out_dir=out, executor=executor)
    return [str(w.message) for w in got if issubclass(w.category, TransientAgentsWarning)]


def _check(said: list[str]) -> None:
    assert len(said) == 1, said
    msg = said[0]
    assert msg.startswith("hatchery: agents present at no capture in 2 of 2 run(s): run 0: 15 agent(s) (15 Fry) "
                          "were present at no capture, so the panel has no row for them (15 born and removed within "
                          "one step); in 3 of 6 step(s): 5 at panel step 1 (model step 2), ")
    assert "; run 1: 15 agent(s) (15 Fry) were present at no capture" in msg
    assert "counted in each run record's transient_agents" in msg


def test_computed_and_resumed_runs_are_warned_of_once(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _check(_said(out))  # computed: once for both runs (was: the same sentence once per run)
    _check(_said(out))  # resumed: read back from the run records (was: nothing)


@pytest.mark.slow
def test_runs_computed_on_a_process_pool_are_warned_of_in_the_driver(tmp_path: Path) -> None:
    # the worker's own warning never reached the driver (was: nothing here); the driver says it from the records
    with LocalExecutor(max_workers=2, mp_context="fork") as pool:
        _check(_said(tmp_path / "run", pool))


class _Counter(mesa.Agent):
    def __init__(self, model: mesa.Model) -> None:
        super().__init__(model)
        self.ticks = 2**53 + 1  # an integer float64 rounds: warned of by PrecisionLossWarning


class _Nursery(mesa.Model):
    """Counters whose hatchlings are removed as they hatch (present at no capture)."""

    def __init__(self, n: int, rng: int) -> None:
        super().__init__(rng=rng)
        _Counter.create_agents(self, n)

    def step(self) -> None:
        _Counter(self).remove()


def test_the_study_run_is_quiet_of_transient_agents_but_still_warns_of_rounded_integers() -> None:
    # warn_transient=False governed the rounding warning too; warn_rounded separates them (the study now passes both
    # False and warns of each once from its run records: tests/studies/test_rounded_warning.py)
    from aumann.errors import PrecisionLossWarning
    from aumann.scenarios import Scenario, ScenarioConfig
    from aumann.simulators import FeatureRecorder

    class Config(ScenarioConfig):
        agents: int = 3
        steps: int = 2

    sc = Scenario(name="nursery", description="", config_model=Config,
                  build_model=lambda cfg, rng, backend=None: _Nursery(cfg.agents, int(rng.integers(2**31))),
                  make_recorder=lambda cfg: FeatureRecorder({"ticks": "ticks"}), features=("ticks",),
                  indicator=lambda cfg: "lin", original=lambda cfg: "lin", baseline_action=lambda m, ids: None)
    for quiet in (False, True):
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            run = sc.simulate(sc.load_config(), rng=1, warn_transient=not quiet)
        kinds = [w.category for w in got]
        assert kinds.count(PrecisionLossWarning) == 1
        assert kinds.count(TransientAgentsWarning) == (0 if quiet else 1)
        assert run.panel.meta["transient_agents"]["total"] == 2  # counted either way


def test_a_study_without_an_output_folder_does_not_point_at_manifest_json() -> None:
    # run_study(out_dir=None) writes no file, yet the warning said "(manifest.json, the report)"
    sc = scenarios.get(f"{HATCHERY}:scenario")
    cfg = sc.load_config(steps=6, runs=2, study=STUDY)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        run_study(sc, cfg)
    said = [str(w.message) for w in got if issubclass(w.category, TransientAgentsWarning)]
    _check(said)
    assert "counted in each run record's transient_agents (the study result's records); " in said[0]
    assert "manifest.json" not in said[0] and "the report" not in said[0]
