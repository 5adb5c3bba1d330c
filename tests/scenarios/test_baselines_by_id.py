"""Per-agent baselines of a scenario acting by id (``baseline_action_by="id"``) on a model with births.

The baseline z⁰ of step t is the fork before t in which every agent present takes the baseline action, recorded
after one step and aligned to the run's panel by id. Mesa numbers newborns from one counter, so when the baseline
action lets agents breed, the fork's first newborn has the id of the run's first newborn, born to another parent:
that row is no agent of the run taking the baseline action. It used to be aligned anyway (mesa's wolf_sheep with
"the animal does not move": a newborn sheep of the run, energy 3.5, took the energy of the fork's newborn wolf of
the same id, 21.3, as its baseline).
"""

from __future__ import annotations

import mesa
import numpy as np
import pytest

from aumann.attribution import indicators
from aumann.scenarios import Scenario, ScenarioConfig
from aumann.simulators import FeatureRecorder, override_next_step

pytestmark = pytest.mark.filterwarnings("ignore:Random number generator not specified")


class Cell(mesa.Agent):
    def __init__(self, model: mesa.Model, size: float, kind: float) -> None:
        super().__init__(model)
        self.size = size
        self.kind = kind

    def step(self) -> None:
        self.grow()
        if self.random.random() < 0.4:  # splits: the daughter is this step's newborn
            type(self)(self.model, size=self.size / 2, kind=self.kind)
            self.size /= 2

    def grow(self) -> None:
        self.size += 1.0


class Dish(mesa.Model):
    def __init__(self, n: int, seed: int) -> None:
        super().__init__(rng=seed)
        for k in range(n):
            Cell(self, size=1.0 + k, kind=float(k % 2))

    def step(self) -> None:
        self.agents.shuffle_do("step")


class Config(ScenarioConfig):
    agents: int = 6
    steps: int = 4
    runs: int = 1


def _no_growth(model, ids):  # the baseline action: the cell does not grow this step (it may still split)
    for a in model.agents.select(lambda a: a.unique_id in set(ids)):
        override_next_step(a, "grow")


SCENARIO = Scenario(
    name="dish", description="cells that split", config_model=Config,
    build_model=lambda cfg, rng, backend=None: Dish(cfg.agents, int(rng.integers(2**31))),
    make_recorder=lambda cfg: FeatureRecorder({"size": "size", "kind": "kind"}), features=("size", "kind"),
    indicator=lambda cfg: indicators.get("lin"), original=lambda cfg: indicators.get("lin"),
    baseline_action=_no_growth, baseline_action_by="id")


def test_a_run_newborn_takes_no_baseline_from_a_fork_newborn_of_the_same_id():
    cfg = Config()
    run = SCENARIO.simulate(cfg, rng=np.random.default_rng(1), keep_from=0)
    panel = run.panel
    ids = panel.agent_ids.tolist()
    z0 = SCENARIO.baselines(run, cfg, agent_ids=panel.agent_ids)
    seed = int(np.random.default_rng(1).integers(2**31))  # what build_model draws from the run's rng
    newborns = 0
    for t in range(cfg.steps):
        # by hand: the model rebuilt and stepped to t, every cell present does not grow, one step; the cells' state
        # after it is their baseline; a cell born during step t in the run has none (zero)
        by_hand = Dish(cfg.agents, seed)
        for _ in range(t):
            by_hand.step()
        present = {a.unique_id for a in by_hand.agents}
        for a in by_hand.agents:
            a.grow = lambda: None
        by_hand.step()
        after = {a.unique_id: a for a in by_hand.agents if a.unique_id in present}
        for j, i in enumerate(ids):
            want = [after[i].size, after[i].kind] if i in after else [0.0, 0.0]
            assert z0[t, j].tolist() == want, f"step {t}, agent {i}"
            newborns += bool(panel.alive is not None and panel.alive[t, j] and i not in present)
    assert newborns  # the run has newborns whose ids the fork's own newborns take
