"""Fry that hatch and are eaten within the step: agents no capture sees.

    aumann run tests/scenarios/hatchery/scenario.py:scenario --runs 1 --steps 6

Each fish grows every step; in steps ``hatch_every``, 2·``hatch_every``, … every fish lays one fry that a fish eats
before the step ends. The fry are born and removed inside one step, so no capture sees them: the panel has no row
for them and counts them in ``meta["transient_agents"]``, which the study carries into its record, manifest and
report.
"""

import mesa
from pydantic import Field

from aumann.attribution import indicators
from aumann.scenarios import Scenario, ScenarioConfig
from aumann.simulators import FeatureRecorder, override_next_step


class Fish(mesa.Agent):
    def __init__(self, model):
        super().__init__(model)
        self.size = 1.0

    def step(self):
        self.size += 0.5 + self.random.random()


class Fry(Fish):
    pass


class Hatchery(mesa.Model):
    def __init__(self, n=5, hatch_every=2, rng=None):
        super().__init__(rng=rng)
        self.hatch_every = hatch_every
        Fish.create_agents(self, n)

    def step(self):
        self.agents.shuffle_do("step")
        if self.steps % self.hatch_every == 0:
            for _ in range(len(self.agents_by_type[Fish])):
                Fry(self).remove()  # eaten as it hatches


class Config(ScenarioConfig):
    agents: int = Field(5, ge=2)
    steps: int = Field(6, ge=2)
    runs: int = 1
    hatch_every: int = Field(2, ge=1)


def build(cfg: Config, rng, backend=None):
    return Hatchery(cfg.agents, cfg.hatch_every, rng=int(rng.integers(2**31)))


def no_growth(model, ids):
    for a in model.agents.select(lambda a: a.unique_id in set(ids)):
        override_next_step(a, "step")


scenario = Scenario(
    name="hatchery",
    description="fish that grow; fry that hatch and are eaten within the step (present at no capture): mean size",
    config_model=Config,
    build_model=build,
    make_recorder=lambda cfg: FeatureRecorder({"size": "size"}),
    features=("size",),
    indicator=lambda cfg: indicators.get("lin"),
    original=lambda cfg: indicators.get("lin"),
    baseline_action=no_growth,
    baseline_action_by="id",
    baseline_description="the fish does not grow this step",
)
