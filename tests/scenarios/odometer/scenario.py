"""Odometers that count past 2**53: recorded integers float64 rounds.

    aumann run tests/scenarios/odometer/scenario.py:scenario --runs 2

Each car drives a random distance every step; its ``odometer`` (an int, recorded as a feature) starts at
``(2**53 + 1) << shift``, which a double cannot hold: the recording keeps the nearest double and counts the rounded
values in the panel's ``meta["rounded_values"]``, which the study carries into its record and manifest and warns of
once. ``shift`` ≥ 11 puts the odometers past int64 (a uint64's or a Python int's range).
"""

import mesa
from pydantic import Field

from aumann.attribution import indicators
from aumann.scenarios import Scenario, ScenarioConfig
from aumann.simulators import FeatureRecorder, override_next_step


class Car(mesa.Agent):
    def __init__(self, model, start: int):
        super().__init__(model)
        self.odometer = start
        self.fuel = 0.0

    def step(self):
        self.fuel += 1.0 + self.random.random()


class Road(mesa.Model):
    def __init__(self, n=4, shift=0, seed=None):
        super().__init__(rng=seed)
        for _ in range(n):
            Car(self, (2**53 + 1) << shift)

    def step(self):
        self.agents.shuffle_do("step")


class Config(ScenarioConfig):
    agents: int = Field(4, ge=2)
    steps: int = Field(4, ge=2)
    runs: int = 2
    shift: int = Field(0, ge=0, le=64)


def build(cfg: Config, rng, backend=None):
    return Road(cfg.agents, cfg.shift, seed=int(rng.integers(2**31)))


def parked(model, ids):
    for a in model.agents.select(lambda a: a.unique_id in set(ids)):
        override_next_step(a, "step")


scenario = Scenario(
    name="odometer",
    description="cars whose odometers count past 2**53 (rounded on their way to float64): mean fuel and odometer",
    config_model=Config,
    build_model=build,
    make_recorder=lambda cfg: FeatureRecorder({"fuel": "fuel", "odometer": "odometer"}),
    features=("fuel", "odometer"),
    indicator=lambda cfg: indicators.get("lin"),
    original=lambda cfg: indicators.get("lin"),
    baseline_action=parked,
    baseline_action_by="id",
    baseline_description="the car stays parked this step",
)
