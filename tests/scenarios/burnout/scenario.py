"""A model that says it is done, as mesa-examples' forest fire does: ``model.running = False`` once nothing
changes any more (here after step ``burn``), where Mesa's ``batch_run`` stops.

    aumann run tests/scenarios/burnout/scenario.py:scenario --runs 1 --steps 8

Each tree adds heat while the fire burns (steps 1 … ``burn``); the model then sets ``running = False`` and its
later steps change nothing, so f (mean heat) is flat from there, t* = argmax f over the second half falls on a
step where the baseline action (the tree does not burn this step) changes nothing either: Δv(t*) = 0.
"""

import mesa
from pydantic import Field

from aumann.attribution import indicators
from aumann.scenarios import Scenario, ScenarioConfig
from aumann.simulators import FeatureRecorder, override_next_step


class Tree(mesa.Agent):
    def __init__(self, model):
        super().__init__(model)
        self.heat = 0.0

    def step(self):
        if self.model.running:
            self.heat += 1.0 + self.random.random()


class Burnout(mesa.Model):
    def __init__(self, n=6, burn=3, seed=None):
        super().__init__(rng=seed)
        self.burn = burn
        for _ in range(n):
            Tree(self)

    def step(self):
        self.agents.shuffle_do("step")
        if self.steps >= self.burn:
            self.running = False


class Config(ScenarioConfig):
    agents: int = Field(6, ge=2)
    steps: int = Field(8, ge=2)
    runs: int = 1
    burn: int = Field(3, ge=1)


def build(cfg: Config, rng, backend=None):
    return Burnout(cfg.agents, cfg.burn, seed=int(rng.integers(2**31)))


def no_burn(model, ids):
    for a in model.agents.select(lambda a: a.unique_id in set(ids)):
        override_next_step(a, "step")


scenario = Scenario(
    name="burnout",
    description="trees that heat up until the fire is out (running = False after step burn): mean heat",
    config_model=Config,
    build_model=build,
    make_recorder=lambda cfg: FeatureRecorder({"heat": "heat"}),
    features=("heat",),
    indicator=lambda cfg: indicators.get("lin"),
    original=lambda cfg: indicators.get("lin"),
    baseline_action=no_burn,
    baseline_action_by="id",
    baseline_description="the tree does not burn this step",
)
