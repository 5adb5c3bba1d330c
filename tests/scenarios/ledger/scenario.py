"""Accounts whose ids are 64-bit integers past 2**53, recorded as a feature: integers float64 rounds.

    aumann run tests/scenarios/ledger/scenario.py:scenario --runs 1 --steps 4

Each account's balance grows every step; its ``account`` number (``2**53 + 1 + 2 * k``, an id kept as an attribute)
is recorded too and float64 holds none of them exactly, so the panel counts them in ``meta["rounded_values"]``, which
the study carries into its record, manifest and report. With ``big_ids=false`` the numbers are small: nothing counted.
"""

import mesa
from pydantic import Field

from aumann.attribution import indicators
from aumann.scenarios import Scenario, ScenarioConfig
from aumann.simulators import FeatureRecorder, override_next_step


class Account(mesa.Agent):
    def __init__(self, model, number):
        super().__init__(model)
        self.account = number
        self.balance = 1.0

    def step(self):
        self.balance += 0.5 + self.random.random()


class Ledger(mesa.Model):
    def __init__(self, n=5, big_ids=True, rng=None):
        super().__init__(rng=rng)
        for k in range(n):
            Account(self, (2**53 + 1 if big_ids else 1) + 2 * k)

    def step(self):
        self.agents.shuffle_do("step")


class Config(ScenarioConfig):
    agents: int = Field(5, ge=2)
    steps: int = Field(4, ge=2)
    runs: int = 1
    big_ids: bool = True


def build(cfg: Config, rng, backend=None):
    return Ledger(cfg.agents, cfg.big_ids, rng=int(rng.integers(2**31)))


def no_growth(model, ids):
    for a in model.agents.select(lambda a: a.unique_id in set(ids)):
        override_next_step(a, "step")


scenario = Scenario(
    name="ledger",
    description="accounts with 64-bit account numbers past 2**53 (recorded, rounded by float64): mean balance",
    config_model=Config,
    build_model=build,
    make_recorder=lambda cfg: FeatureRecorder({"balance": "balance", "account": "account"}),
    features=("balance", "account"),
    indicator=lambda cfg: indicators.get("lin"),
    original=lambda cfg: indicators.get("lin"),
    baseline_action=no_growth,
    baseline_action_by="id",
    baseline_description="the balance does not grow this step",
)
